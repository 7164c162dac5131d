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
# rank 1 waits in the barrier. Forever by default (30 minutes). The tools, each on the same
# bug, every wait bounded by a short group timeout:
#
# 1. the timeout itself, and every rank's Python stack while it waits (`faulthandler`,
#    built in; `py-spy dump`, if installed);
# 2. torch's flight recorder: each rank's log of its last collectives, read after the fact;
# 3. `dist.monitored_barrier`: which rank did not arrive;
# 4. `TORCH_DISTRIBUTED_DEBUG=DETAIL`: collectives fingerprinted, a mismatch raises;
# 5. minidp's checked mode (`MINIDP_DEBUG=DETAIL` or `minidp.comm.checked()`).

# %%
import datetime
import faulthandler
import inspect
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
HANG_S = kit.pick(5.0, 3.0)  # each group's timeout: how long a hang lasts here
PY_SPY = shutil.which("py-spy")


def buggy_step(rank: int, all_reduce, barrier, group, seen: dict) -> None:
    stats = torch.tensor([rank + 1.0, 0.0, 0.0, 0.0])  # (4,) loss sum, correct, count, steps
    grad = torch.full((4,), 10.0 * (rank + 1))  # (4,) this rank's gradient
    if rank == 0:
        all_reduce(stats, group=group)  # BUG: only rank 0 logs
    all_reduce(grad, group=group)  # every rank
    seen["grad"] = grad.clone()
    barrier(group=group)


def line_of(text: str) -> int:
    """The line number of ``text`` inside buggy_step, in this file (to find it in stacks)."""
    lines, start = inspect.getsourcelines(buggy_step)
    return start + next(i for i, line in enumerate(lines) if text in line)


def run(rank: int, group, all_reduce, barrier) -> dict:
    seen: dict = {}
    try:
        buggy_step(rank, all_reduce, barrier, group, seen)
        seen["error"] = ""
    except RuntimeError as exc:  # gloo's timeout, torch's mismatch, minidp's MismatchError
        seen["error"] = f"{type(exc).__name__}: {str(exc).strip()}"
    return seen


def short_group():
    return dist.new_group(list(range(WORLD)), timeout=datetime.timedelta(seconds=HANG_S))


# %% [markdown]
# ## The ranks: one bug, five ways to look at it


# %%
def stacks_while_hung(rank: int, pids: list[int], out: dict) -> None:
    """Start the watchers of scenario 1: this rank's faulthandler; py-spy on every rank."""
    out["faulthandler_file"] = tempfile.TemporaryFile("w+")
    faulthandler.dump_traceback_later(HANG_S / 2, file=out["faulthandler_file"])
    if PY_SPY and rank == 0:  # one rank dumps every rank, as you would from a shell

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
    out: dict = {"lines": {"grad": line_of("all_reduce(grad"), "barrier": line_of("barrier(group")}}

    # 1. plain torch: the timeout; stacks taken while waiting
    group = short_group()
    stacks_while_hung(rank, pids, out)
    out["plain"] = run(rank, group, dist.all_reduce, dist.barrier)
    faulthandler.cancel_dump_traceback_later()
    f = out.pop("faulthandler_file")
    f.seek(0)
    out["faulthandler"] = f.read()
    if "py-spy thread" in out:
        out.pop("py-spy thread").join()
    # 2. the flight recorder (TORCH_FR_BUFFER_SIZE set before the ranks started)
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    mine = [e for e in trace["entries"] if e["process_group"][0] == group.group_name]
    here = os.path.basename(__file__)
    out["recorder"] = [
        (e["collective_seq_id"], e["profiling_name"],
         [f["line"] for f in e["frames"] if f["name"] == "buggy_step" and here in f["filename"]])
        for e in mine
    ]  # fmt: skip
    dist.barrier()  # the next scenario starts together (default group)

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
    return out


# %%
if __name__ == "__main__":
    kit.title("Lesson 36: debugging a hang")
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
# tool for a job that is already stuck (`pip install py-spy`; it needs permission to read
# the process: the same user, and ptrace allowed in containers).

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
# ## 2. The flight recorder
# With `TORCH_FR_BUFFER_SIZE=N` torch keeps each rank's last N collectives — sequence
# number, op, sizes, state, Python stack — and `torch._C._distributed_c10d._dump_fr_trace()`
# returns them (a pickle; NCCL jobs also dump on a timeout, and `python -m
# torch.distributed.flight_recorder.fr_trace` compares the ranks' dumps). On torch 2.13 it
# records gloo's collectives too. Side by side, the two ranks part at collective #2.

# %%
if __name__ == "__main__":
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
    kit.done()

# %% [markdown]
# **What to reach for.** Hung right now: `py-spy dump` every rank (or have `faulthandler`
# armed) — the stacks show who waits where. Afterwards: the flight recorder's per-rank log.
# To find it early in development: `TORCH_DISTRIBUTED_DEBUG=DETAIL` or minidp's checked mode
# (both slower: an extra exchange per collective), and `monitored_barrier` at step
# boundaries. And always a timeout shorter than 30 minutes when debugging.
