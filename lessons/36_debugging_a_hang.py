# %% [markdown]
# # Lesson 36 — debugging a hang
#
# Run: `python lessons/36_debugging_a_hang.py`
#
# A distributed job that hangs prints nothing: every rank waits in a collective for a
# partner that is somewhere else. The planted bug here is a classic — only rank 0 logs, and
# logging all-reduces a metric:
#
# ```python
# if rank == 0:
#     all_reduce(stats)   # only rank 0 gets here
# all_reduce(grad)        # every rank
# barrier()
# ```
#
# Rank 0's `stats` all-reduce pairs with rank 1's `grad` all-reduce (same shape: nobody
# notices, rank 1 gets a wrong gradient), then rank 0 waits in its `grad` all-reduce while
# rank 1 waits in the barrier — until the group's timeout: torch's default is 30 minutes,
# and 10 for NCCL (`torch.distributed.constants`: `default_pg_timeout`,
# `default_pg_nccl_timeout`). The tools, each on the same bug, every wait bounded by a short
# group timeout:
#
# 1. the timeout itself, and every rank's Python stack while it waits (`faulthandler`,
#    built in; `py-spy dump`, if installed) — and why, with asynchronous collectives (NCCL),
#    the stack shows the wrong line;
# 2. torch's flight recorder: each rank's log of its last collectives, read after the fact,
#    and `fr_trace`, which lines the ranks' logs up;
# 3. `dist.monitored_barrier`: which rank did not arrive;
# 4. `TORCH_DISTRIBUTED_DEBUG=DETAIL`: collectives fingerprinted, a mismatch raises;
# 5. minidp's checked mode (`MINIDP_DEBUG=DETAIL` or `minidp.comm.checked()`) — and the
#    correct code it rejects.

# %%
import contextlib
import datetime
import faulthandler
import inspect
import io
import logging
import os
import pickle
import shutil
import subprocess
import tempfile
import threading

import kit
import torch
import torch.distributed as dist

import minidp
from minidp.comm import MismatchError

WORLD = 2
HANG_S = 3.0  # each group's timeout: how long a hang lasts here
PY_SPY = shutil.which("py-spy")


def buggy_step(rank: int, all_reduce, barrier, group, seen: dict) -> None:
    stats = torch.tensor([rank + 1.0, 0.0, 0.0, 0.0])  # (4,) loss sum, correct, count, steps
    grad = torch.full((4,), 10.0 * (rank + 1))  # (4,) this rank's gradient
    if rank == 0:
        all_reduce(stats, group=group)  # BUG: only rank 0 logs
    all_reduce(grad, group=group)  # every rank
    seen["grad"] = grad.clone()
    barrier(group=group)


def async_step(rank: int, group, seen: dict) -> None:
    """The same bug with asynchronous collectives (``async_op=True``; NCCL's are always so):
    each call returns at once, and only a wait blocks."""
    stats = torch.tensor([rank + 1.0, 0.0, 0.0, 0.0])
    grad = torch.full((4,), 10.0 * (rank + 1))
    if rank == 0:
        dist.all_reduce(stats, group=group, async_op=True)  # BUG: only rank 0 logs
    work = dist.all_reduce(grad, group=group, async_op=True)  # returns at once
    work.wait()  # the first line that waits (NCCL's wait does not either: a later .item() does)
    seen["grad"] = grad.clone()
    dist.barrier(group=group)


def correct_step(rank: int, all_reduce, group, seen: dict) -> None:
    """Correct code: every rank calls one all-reduce — each from its own line."""
    x = torch.full((4,), rank + 1.0)
    if rank == 0:
        all_reduce(x, group=group)  # the same collective on every rank ...
    else:
        all_reduce(x, group=group)  # ... called from another line
    seen["x"] = x.clone()


def line_of(text: str, fn=buggy_step) -> int:
    """The line number of ``text`` inside ``fn``, in this file (to find it in stacks)."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def attempt(step, *args) -> dict:
    """Run ``step(*args, seen)``; what it saw, and the first error ("" if none)."""
    seen: dict = {}
    try:
        step(*args, seen)
        seen["error"] = ""
    except RuntimeError as exc:  # gloo's timeout, torch's mismatch, minidp's MismatchError
        seen["error"] = f"{type(exc).__name__}: {str(exc).strip()}"
    return seen


def run(rank: int, group, all_reduce, barrier) -> dict:
    return attempt(buggy_step, rank, all_reduce, barrier, group)


def short_group():
    return dist.new_group(list(range(WORLD)), timeout=datetime.timedelta(seconds=HANG_S))


# %% [markdown]
# ## The ranks: one bug, five ways to look at it


# %%
@contextlib.contextmanager
def stacks_after(seconds: float, out: dict, key: str):
    """faulthandler: write every thread's stack into ``out[key]`` if the block still runs
    after ``seconds``."""
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback_later(seconds, file=f)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            f.seek(0)
            out[key] = f.read()


def start_py_spy(rank: int, pids: list[int], out: dict) -> None:
    """py-spy on every rank (from rank 0, as you would from a shell), during scenario 1."""
    if PY_SPY and rank == 0:

        def dump():
            out["py-spy"] = [
                subprocess.run(
                    [PY_SPY, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
                ).stdout  # fmt: skip
                for pid in pids
            ]

        out["py-spy thread"] = threading.Timer(HANG_S / 3, dump)
        out["py-spy thread"].start()


def hang_lesson(rank: int, world: int) -> dict:
    pids = [0] * world
    dist.all_gather_object(pids, os.getpid())  # on the default group (long timeout)
    # buggy_step's lines in the file the ranks run (a notebook's cells number them anew)
    out: dict = {"lines": {
        "stats": line_of("all_reduce(stats"), "grad": line_of("all_reduce(grad"),
        "barrier": line_of("barrier(group"), "wait": line_of("work.wait()", async_step),
        "async barrier": line_of("barrier(group", async_step)}}  # fmt: skip

    # 1. plain torch: the timeout; stacks taken while waiting
    group = short_group()
    start_py_spy(rank, pids, out)
    with stacks_after(HANG_S / 2, out, "faulthandler"):
        out["plain"] = run(rank, group, dist.all_reduce, dist.barrier)
    if "py-spy thread" in out:
        out.pop("py-spy thread").join()
    # 2. the flight recorder (TORCH_FR_BUFFER_SIZE set before the ranks started). Reading it
    # symbolizes every entry's stack, which takes seconds: a thread does it while 1b waits.
    # 1b's group is made first: making a group while the recorder is read races in torch's
    # recorder (a rank crashed on it, now and then)
    dumped: dict = {}
    recorder = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)  # not in 2.4
    reader = threading.Thread(target=lambda: dumped.update(pickle.loads(recorder())))
    group_1b = short_group()
    dist.barrier()  # the next scenario starts together (default group)
    if recorder is not None:
        reader.start()

    # 1b. the same bug, asynchronous collectives: where do the stacks point?
    with stacks_after(HANG_S / 2, out, "faulthandler async"):
        out["async"] = attempt(async_step, rank, group_1b)
    out["recorder"] = None  # this torch's gloo has no flight recorder
    if recorder is not None:
        reader.join()
        mine = [e for e in dumped["entries"] if e["process_group"][0] == group.group_name]
        here = os.path.basename(__file__)
        out["recorder"] = [
            (e["collective_seq_id"], e["profiling_name"],
             [f["line"] for f in e["frames"] if f["name"] == "buggy_step" and here in f["filename"]])
            for e in mine
        ]  # fmt: skip
        out["recorder dump"] = {**dumped, "entries": mine}  # for fr_trace, in the main process
    dist.barrier()

    # 3. monitored_barrier at the end of the step instead of barrier
    def monitored(group):
        dist.monitored_barrier(
            group, timeout=datetime.timedelta(seconds=HANG_S), wait_all_ranks=True
        )

    out["monitored"] = run(rank, short_group(), dist.all_reduce, monitored)
    dist.barrier()

    # 4. TORCH_DISTRIBUTED_DEBUG=DETAIL: the level is read when a group is made
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    detail = short_group()
    dist.set_debug_level(dist.DebugLevel.OFF)
    out["detail"] = run(rank, detail, dist.all_reduce, dist.barrier)
    dist.barrier()

    # 5. minidp: its default header check, then checked mode
    out["minidp"] = run(rank, short_group(), minidp.comm.all_reduce, minidp.comm.barrier)
    with minidp.comm.checked():
        out["checked"] = run(rank, short_group(), minidp.comm.all_reduce, minidp.comm.barrier)
    # ... and correct code whose ranks call the same collective from different lines
    out["correct"] = attempt(correct_step, rank, minidp.comm.all_reduce, short_group())
    with minidp.comm.checked():
        out["checked, correct"] = attempt(correct_step, rank, minidp.comm.all_reduce, short_group())
    return out


# %%
if __name__ == "__main__":
    kit.title("Lesson 36: debugging a hang")
    nccl = dist.constants.default_pg_nccl_timeout  # None: this torch was built without NCCL
    print(f"  default timeouts: {dist.constants.default_pg_timeout} (gloo and others), "
          f"{nccl if nccl is not None else 'no NCCL in this build'} (NCCL)")  # fmt: skip
    kit.check_true(
        "torch's default group timeout: 30 minutes; NCCL's 10 (where NCCL is built in)",
        dist.constants.default_pg_timeout == datetime.timedelta(minutes=30)
        and nccl in (None, datetime.timedelta(minutes=10)),
    )
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"  # the flight recorder's ring: read at start-up
    try:  # deadline: whatever happens, this cell ends (the hangs themselves take HANG_S)
        res = kit.spawn(hang_lesson, WORLD, deadline=180)
    finally:
        del os.environ["TORCH_FR_BUFFER_SIZE"]
    first_line = {r: {k: (v["error"].splitlines() or [""])[0][:160] for k, v in out.items()
                      if isinstance(v, dict) and "error" in v} for r, out in enumerate(res)}  # fmt: skip

# %% [markdown]
# ## 1. The hang: a timeout, a wrong gradient, and where each rank waits
# Rank 1's gradient all-reduce returned — paired with rank 0's *stats* — so rank 1 carries
# 10·2 + 1 = 21 where 10 + 20 = 30 was meant. Then both wait until the group's timeout.
# `faulthandler.dump_traceback_later(seconds, file=...)` (standard library) writes every
# thread's stack if the process is still busy after `seconds`: the line each rank waits on.

# %%
if __name__ == "__main__":
    for r in range(WORLD):
        print(f"  rank {r}: {first_line[r]['plain']}")
    print(
        f"  rank 1's 'averaged' gradient: {res[1]['plain']['grad'].tolist()} (meant: [30.0, ...])"
    )
    # Both wait the same HANG_S, but not from the same instant: the rank whose clock runs out
    # first closes its connections, and the other may read that before its own timeout.
    ends = [res[r]["plain"]["error"].lower() for r in range(WORLD)]
    kit.check_true("the ranks end in the group's timeout (or the other's closed connection)",
                   any("timed out" in e for e in ends)
                   and all("timed out" in e or "connection closed" in e for e in ends))  # fmt: skip
    kit.check_true("rank 1 got a wrong sum without any error",
                   res[1]["plain"]["grad"][0].item() == 21.0)  # fmt: skip
    waits = {0: res[0]["lines"]["grad"], 1: res[0]["lines"]["barrier"]}
    for r in range(WORLD):
        stack = [ln for ln in res[r]["faulthandler"].splitlines() if "buggy_step" in ln]
        print(f"  rank {r} faulthandler: {stack[0].strip() if stack else '(no dump)'}")
        kit.check_true(f"faulthandler: rank {r} waits at line {waits[r]}",
                       any(f"line {waits[r]} in buggy_step" in ln for ln in stack))  # fmt: skip

# %% [markdown]
# `py-spy dump --pid PID` does the same from outside, without changing the program — the
# tool for a CPU job that is already stuck (`pip install py-spy`; it needs permission to
# read the process: the same user, and ptrace allowed in containers).

# %%
if __name__ == "__main__":
    if PY_SPY and res[0].get("py-spy"):
        for r, dump in enumerate(res[0]["py-spy"]):
            lines = [ln.strip() for ln in dump.splitlines() if "buggy_step" in ln]
            print(f"  py-spy, rank {r}: {lines[0] if lines else dump[-300:]}")
        kit.check_true("py-spy: rank 0's stack shows buggy_step",
                       any("buggy_step" in ln for ln in res[0]["py-spy"][0].splitlines()))  # fmt: skip
    else:
        print("  (py-spy section skipped: py-spy is not installed — `pip install py-spy`)")

# %% [markdown]
# Those stacks point at the right lines because gloo's collectives are *synchronous*: the
# call returns when the data has arrived. NCCL's are not: `all_reduce` only enqueues the
# work on a CUDA stream and returns, and Python runs on until something needs the result on
# the host — a `.item()`, a `.cpu()`, the next barrier. A hung NCCL job's stacks show that
# next sync point, often far from the collective that did not match. The same bug with
# `async_op=True` shows the effect on gloo (`async_step`): rank 0's stack is at
# `work.wait()`, not at either `all_reduce`.

# %%
if __name__ == "__main__":
    for r in range(WORLD):
        stack = [ln for ln in res[r]["faulthandler async"].splitlines() if "async_step" in ln]
        print(f"  async, rank {r} faulthandler: {stack[0].strip() if stack else '(no dump)'}")
    lines = res[0]["lines"]
    stack0 = [ln for ln in res[0]["faulthandler async"].splitlines() if "async_step" in ln]
    kit.check_true(
        f"asynchronous collectives: rank 0's stack is at the wait (line {lines['wait']}), not "
        "at the all_reduce calls",
        any(f"line {lines['wait']} in async_step" in ln for ln in stack0),
        str(stack0),
    )

# %% [markdown]
# ## 2. The flight recorder
# With `TORCH_FR_BUFFER_SIZE=N` (NCCL's older name: `TORCH_NCCL_TRACE_BUFFER_SIZE`) torch
# keeps each rank's last N collectives — sequence number, op, sizes, state, the Python stack
# that issued it — and `torch._C._distributed_c10d._dump_fr_trace()` returns them (a
# pickle). On torch 2.13 it records gloo's collectives too. This is the tool for a hung
# NCCL job: with `TORCH_NCCL_DUMP_ON_TIMEOUT=1` every rank writes its recorder to a file
# when the watchdog times out (the prefix is `TORCH_FR_DUMP_TEMP_FILE`), and
# `python -m torch.distributed.flight_recorder.fr_trace DIR` (or `torchfrtrace DIR`) lines
# up the ranks' files and names the first collective that does not match.
#
# Side by side, the ops part at #2 (all-reduce vs barrier) — but each entry's frames say
# which line issued it, and they part at #1 already: rank 0's first all-reduce comes from
# the `stats` line, rank 1's from the `grad` line.

# %%
if __name__ == "__main__" and res[0]["recorder"] is None:
    print(f"  (skipped: torch {torch.__version__}'s gloo groups keep no flight recorder)")
elif __name__ == "__main__":
    for r in range(WORLD):
        print(
            f"  rank {r}: "
            + ", ".join(
                f"#{seq} {op} (buggy_step line {lines})" for seq, op, lines in res[r]["recorder"]
            )
        )
    ops = [[op for _, op, _ in res[r]["recorder"]] for r in range(WORLD)]
    kit.check_true("flight recorder: #2 is an all_reduce on rank 0, a barrier on rank 1",
                   ops[0][1:2] == ["gloo:all_reduce"] and ops[1][1:2] == ["gloo:barrier"], str(ops))  # fmt: skip
    first = [res[r]["recorder"][0][2] for r in range(WORLD)]
    lines = res[0]["lines"]
    kit.check_true(
        "flight recorder frames: #1 already differs — rank 0 from the stats line, rank 1 "
        "from the grad line",
        first == [[lines["stats"]], [lines["grad"]]],
        f"{first} vs stats {lines['stats']}, grad {lines['grad']}",
    )

# %% [markdown]
# `fr_trace` on the two ranks' dumps. gloo's dump lacks the table of groups NCCL's carries
# (`pg_config` is empty), so it is filled in — the group's name and its ranks 0 and 1 —
# before the files are written. `fr_trace` matches entries by sequence number, op and
# sizes (not by frames): it names #2 and the culprit rank.

# %%
if __name__ == "__main__":
    try:
        # importing it logs "tabulate is not installed" (its logger writes to stderr)
        with contextlib.redirect_stderr(io.StringIO()):
            from torch.distributed.flight_recorder import fr_trace
    except ImportError:  # older torch: the analyser lived in tools/, outside the package
        fr_trace = None
    records = None  # what fr_trace reports, where it runs
    if fr_trace is None or res[0]["recorder"] is None:
        print("  (fr_trace skipped: this torch has no torch.distributed.flight_recorder)")
    else:
        folder = tempfile.mkdtemp(prefix="lesson36-fr-")
        for r in range(WORLD):
            dump = res[r]["recorder dump"]
            name, desc = dump["entries"][0]["process_group"]
            dump["pg_config"] = {
                name: {"name": name, "desc": desc, "ranks": str(list(range(WORLD)))}
            }
            with open(os.path.join(folder, f"rank_{r}"), "wb") as f:
                pickle.dump(dump, f)
        records = []  # fr_trace reports through this logger (LogRecords)
        log = logging.getLogger("Flight Recorder")
        handlers, log.handlers = log.handlers, []
        collect = logging.Handler()
        collect.emit = records.append
        log.addHandler(collect)
        try:
            fr_trace.main([folder])
        except AssertionError as exc:  # torch 2.11's analyser reads NCCL and XCCL dumps only
            if "gloo" not in str(exc):
                raise
            print(f"  (fr_trace skipped: torch {torch.__version__}'s reads no gloo dumps: {exc})")
            records = None
        finally:
            log.handlers = handlers
            shutil.rmtree(folder)  # the dumps were only for fr_trace
    if records is not None:  # fr_trace ran: what it said must name #2 and rank 1
        said = "\n".join(r.getMessage() for r in records).splitlines()
        found = [ln.strip() for ln in said if "has errors" in ln or "error msg" in ln]
        print("  fr_trace: " + "\n  fr_trace: ".join(found))
        kit.check_true(
            "fr_trace names collective #2: rank 1 ran a barrier where an all_reduce was due",
            any("sequence number: 2 has errors" in ln for ln in found)
            and any("Culprit rank 1" in ln and "barrier" in ln for ln in found),
            str(found),
        )

# %% [markdown]
# ## 3. `monitored_barrier`
# A barrier that says who is missing: rank 0 collects every rank's arrival within the
# timeout and names the ones that did not come (`wait_all_ranks=True`: all of them, not
# only the first). Here rank 0 itself is the one stuck, so rank 1 — which did arrive —
# reports that rank 0 never answered. gloo only (NCCL has no monitored_barrier).

# %%
if __name__ == "__main__":
    for r in range(WORLD):
        print(f"  rank {r}: {first_line[r]['monitored']}")
    kit.check_true("monitored_barrier: rank 1 arrived and points at rank 0",
                   "rank 0" in res[1]["monitored"]["error"] and "monitoredBarrier" in res[1]["monitored"]["error"])  # fmt: skip

# %% [markdown]
# ## 4. `TORCH_DISTRIBUTED_DEBUG=DETAIL`
# Groups made at this level are wrapped (`_ProcessGroupWrapper`): before each collective
# the ranks compare fingerprints (sequence number, op, shapes, dtypes) on a helper group.
# The first pair — `stats` vs `grad`, same op and shape — passes: same fingerprint. At the
# second, all-reduce vs barrier, both ranks raise at once instead of waiting.

# %%
if __name__ == "__main__":
    for r in range(WORLD):
        print(f"  rank {r}: {first_line[r]['detail']}")
    kit.check_true("DETAIL: every rank raises 'Detected mismatch between collectives'",
                   all("Detected mismatch between collectives" in res[r]["detail"]["error"] for r in range(WORLD)))  # fmt: skip
    kit.check_true("DETAIL: the same-shaped first pair still went through (wrong sum on rank 1)",
                   res[1]["detail"]["grad"][0].item() == 21.0)  # fmt: skip

# %% [markdown]
# ## 5. minidp: the header check, then checked mode
# Every minidp collective first exchanges a small header (kind, size, dtype, op): the
# all-reduce vs barrier mismatch raises at once on every rank — after the same-shaped pair
# went through, like DETAIL. Checked mode adds a per-group sequence number and the calling
# line (`module:function:line`, `minidp/comm/agree.py`): rank 0 calls from the `stats`
# line, rank 1 from the `grad` line, so the very first pair raises, before any data moves.

# %%
if __name__ == "__main__":
    for key in ("minidp", "checked"):
        for r in range(WORLD):
            print(f"  {key:<7} rank {r}: {first_line[r][key]}")
    kit.check_true("minidp (default): MismatchError at the second collective, on every rank",
                   all(res[r]["minidp"]["error"].startswith(MismatchError.__name__) for r in range(WORLD))
                   and res[1]["minidp"]["grad"][0].item() == 21.0)  # fmt: skip
    kit.check_true(
        "checked mode: 'out of step' at the first collective, no wrong sum delivered",
        all("out of step" in res[r]["checked"]["error"] for r in range(WORLD))
        and "grad" not in res[1]["checked"],
    )

# %% [markdown]
# The calling line is also checked mode's blind spot: it compares *where* each rank calls
# from, so correct code in which the ranks call the same collective from different lines
# (`correct_step`: an `if`/`else` with the same all-reduce in both branches) is rejected
# too. The default mode runs it and sums right. Move such a call out of the branch, or check
# that part of the program without checked mode.

# %%
if __name__ == "__main__":
    for key in ("correct", "checked, correct"):
        for r in range(WORLD):
            got = res[r][key]
            print(f"  {key:<17} rank {r}: " + (got["error"].splitlines()[0][:150]
                  if got["error"] else f"sum {got['x'].tolist()}"))  # fmt: skip
    kit.check_true(
        "correct code, matched all-reduces from different lines: default mode sums right, "
        "checked mode rejects it on every rank",
        all(not res[r]["correct"]["error"] and res[r]["correct"]["x"][0].item() == 3.0
            for r in range(WORLD))
        and all(res[r]["checked, correct"]["error"].startswith(MismatchError.__name__)
                and "different lines" in res[r]["checked, correct"]["error"]
                for r in range(WORLD)),
    )  # fmt: skip
    kit.done()

# %% [markdown]
# **What to reach for.** A CPU job (gloo) hung right now: `py-spy dump` every rank (or have
# `faulthandler` armed) — its collectives are synchronous, so the stacks show who waits
# where. A GPU job (NCCL): the stacks show the next sync point, not the collective; run with
# the flight recorder on (`TORCH_FR_BUFFER_SIZE`, `TORCH_NCCL_DUMP_ON_TIMEOUT=1`), let the
# watchdog time out, and read the dumps with `fr_trace` — then each entry's frames for the
# lines. To find it early in development: `TORCH_DISTRIBUTED_DEBUG=DETAIL` or minidp's
# checked mode (both slower: an extra exchange per collective; checked mode also rejects
# matched calls from different lines), and `monitored_barrier` at step boundaries. And a
# timeout shorter than the defaults (30 minutes, NCCL 10) when debugging.
