"""Faults: a rank that stalls, stops calling, dies mid-transfer, spins forever, or calls
different collectives than its peers. Each must end in an error that names the rank and
the collective, without a hang and with no process left over.

How promptness is proven without timing anything:

* a death must end the run while the group's timeout is 600 s (a run freed only by the
  timeout would hang the test): the dead rank's neighbour raises :class:`PeerError`
  ("lost its connection to rank P") or is stopped by the launcher;
* a stall must surface as :class:`CollectiveTimeout` under a SHORT timeout (2 s), naming
  the rank that stopped.

Checked mode (``minidp.comm.checked()`` / ``MINIDP_DEBUG=DETAIL``) is what catches
desynchronised ranks whose calls happen to have equal headers: the tests assert that
plain mode pairs them up silently (the wrong sums), then that checked mode refuses them,
and pin down the one case it cannot see (a skipped iteration of a same-line loop).

Run: ``pytest tests/test_faults.py``
"""

from __future__ import annotations

import datetime
import re
import signal
import time

import pytest
import torch
import torch.distributed as dist
from fault_catalog import killed_mid_all_reduce
from helpers import gloo_all_reduce, gloo_reduce_scatter
from torch import nn

import minidp
from minidp.comm import all_reduce, checked
from minidp.comm import group as groups
from minidp.launch import ProcessWorld, WorkerError, child_processes, run_threads, spawn

DDP = minidp.DistributedDataParallel
SHORT = 2.0  # seconds: the group timeout of the stall tests
LONG = 600.0  # seconds: a timeout no test could wait for


def _pin() -> None:
    """Keep this rank-thread's group alive for the session (checked-mode tests only).

    Workaround: checked mode counts collectives per ``id(group)``; a new thread world's
    group can get a dead group's id and inherit its count (see
    ``test_checked_mode_over_many_thread_worlds_has_no_false_alarms``). Groups kept alive
    never share an id.
    """
    _PINNED.append(groups.resolve())


_PINNED: list = []


# ---- a rank stops: it stalls, or it returns early ---------------------------------------


def _stops(rank, world, how):
    if how == "sleeps" and rank == 1:
        time.sleep(SHORT + 0.5)  # past the group's timeout, and never calls
        return None
    if how == "sleeps":
        return all_reduce(torch.ones(4))
    # uneven inputs without join(): rank 0 runs out of batches one step early
    g = torch.Generator().manual_seed(0)
    ddp = DDP(nn.Linear(8, 2))
    x = torch.randn(4, 8, generator=g)
    for _ in range(2 if rank == 0 else 3):
        ddp(x).sum().backward()


@pytest.mark.parametrize(
    "how, pattern",
    [
        ("sleeps", r"direct_all_reduce: rank 0 timed out waiting to recv from rank 1"),
        ("returns_early", r"direct_all_reduce: rank 1 timed out waiting to recv from rank 0"),
    ],
    ids=["sleeps", "returns_early"],
)
def test_a_rank_that_stops_calling_makes_the_others_time_out_naming_it(how, pattern):
    with pytest.raises(WorkerError, match=r"raised CollectiveTimeout: " + pattern) as info:
        run_threads(_stops, 2, how, timeout=SHORT)
    assert info.value.exc_type == "CollectiveTimeout"
    assert "that rank stalled, hangs in other code, or called a different collective" in str(
        info.value
    )
    assert all(f.exc_type == "CollectiveTimeout" for f in info.value.failures)


# ---- a rank is SIGKILLed in the middle of a large ring all-reduce ----------------------
# (the injector lives in fault_catalog.py, whose catalog times the same fault)


def test_rank_killed_mid_all_reduce_is_the_root_cause_and_nothing_is_left():
    """Rank 1 dies with 64 MiB half-way round a 3-rank ring. The launcher names it (with the
    signal) and stops the rest. Neither survivor may return: each either raised PeerError
    (its connection to the dead rank closed) or was still blocked inside the collective and
    was stopped by the launcher. Which of the two is gloo's choice: a receive from a peer
    killed mid-message is not always woken by gloo's connection-closed handling (also with
    plain ``ProcessGroupGloo.send/recv``, no minidp involved), and then only the group's
    timeout (600 s here) or the launcher ends the wait."""
    before = child_processes()
    with pytest.raises(WorkerError, match=r"spawn: rank 1 was killed by signal SIGKILL") as info:
        spawn(killed_mid_all_reduce, 3, timeout=LONG)
    err = info.value
    assert err.rank == 1 and err.exitcode == -signal.SIGKILL
    raised = {f.rank: f for f in err.failures[1:]}
    still_running = re.search(r"ranks stopped while still running: \[([\d, ]*)\]", str(err))
    stopped = {int(r) for r in still_running.group(1).split(",")} if still_running else set()
    assert set(raised) | stopped == {0, 2} and not set(raised) & stopped
    for f in raised.values():
        assert f.exc_type == "PeerError" and f.bystander
        assert f.message.startswith(f"ring_all_reduce(gloo): rank {f.rank} lost its connection")
    assert child_processes() <= before


# ---- a rank spins forever in Python (no collective to time out) ------------------------


def _spin(rank, world, stuck, peers_communicate):
    # A group with a short timeout; the world's own (600 s) stays for start-up and the rest.
    group = dist.new_group(timeout=datetime.timedelta(seconds=SHORT))
    if rank in stuck:
        while True:
            pass
    if peers_communicate:
        all_reduce(torch.ones(4), group=group)
    return rank


def test_rank_stuck_in_python_while_a_peer_waits_in_a_collective():
    before = child_processes()
    with ProcessWorld(2, timeout=LONG) as world:
        with pytest.raises(WorkerError) as info:
            world.run(_spin, [1], True)  # no deadline: the collective's timeout must do it
    text = str(info.value)
    assert info.value.exc_type == "CollectiveTimeout"
    assert "rank 0 timed out waiting to recv from rank 1" in text
    assert "ranks stopped while still running: [1]" in text
    assert child_processes() <= before


def test_ranks_stuck_in_python_are_stopped_by_the_run_deadline():
    before = child_processes()
    with ProcessWorld(2, timeout=LONG) as world:
        with pytest.raises(
            WorkerError, match=r"spawn: rank 0 was still running at the 2s deadline"
        ) as info:
            world.run(_spin, [0, 1], False, timeout=SHORT)
        assert [f.rank for f in info.value.failures] == [0, 1]
        assert all(f.stuck for f in info.value.failures)
        assert world.broken
    assert child_processes() <= before


# ---- desynchronised ranks: plain mode pairs equal headers, checked mode refuses ---------


def _swapped(rank, world):
    _pin()
    a = torch.full((4,), 1.0 + rank)  # e.g. gradients: 1 on rank 0, 2 on rank 1
    b = torch.full((4,), 10.0 * (rank + 1))  # e.g. a metric: 10 and 20
    if rank == 0:
        all_reduce(a)
        all_reduce(b)
    else:  # same shapes, other order
        all_reduce(b)
        all_reduce(a)
    return a, b


def test_swapped_collectives_pair_up_silently_without_checked_mode():
    """The reason checked mode exists: equal headers, so plain mode cannot tell."""
    (a0, b0), (a1, b1) = run_threads(_swapped, 2, timeout=60)
    # Right would be a = 1 + 2 = 3 and b = 10 + 20 = 30 on both ranks. Instead rank 0's a
    # met rank 1's b, and rank 0's b met rank 1's a:
    assert torch.equal(a0, torch.full((4,), 21.0)) and torch.equal(b0, torch.full((4,), 12.0))
    assert torch.equal(b1, torch.full((4,), 21.0)) and torch.equal(a1, torch.full((4,), 12.0))


def _skipped(rank, world):
    _pin()
    metric = torch.tensor([float(rank)])
    grads = torch.tensor([100.0 * (rank + 1)])
    if rank == 0:  # a rank-dependent branch: rank 1 skips this one
        all_reduce(metric)
    all_reduce(grads)


def _reshaped(rank, world):
    _pin()
    t = torch.arange(6.0).view((2, 3) if rank == 0 else (3, 2))  # same numel, other shape
    all_reduce(t)
    return t


@pytest.mark.parametrize(
    "fn, pattern",
    [
        (
            _swapped,
            r"all_reduce \(checked mode\): rank 1 and rank 0 are both at collective #0 of "
            r"this group but call it from different lines .* or they are out of step",
        ),
        (
            _skipped,
            r"all_reduce \(checked mode\): rank 1 and rank 0 are both at collective #0 "
            r".*different lines",
        ),
        (
            _reshaped,
            r"all_reduce \(checked mode\): rank 1 passed \[all_reduce, shape \(3, 2\) "
            r"\(6 elements\).* but rank 0 passed \[all_reduce, shape \(2, 3\).* different shapes",
        ),
    ],
    ids=["swapped_order", "skipped_one", "same_numel_other_shape"],
)
def test_checked_mode_refuses_desynchronised_ranks(fn, pattern):
    with checked(), pytest.raises(WorkerError, match="MismatchError: " + pattern) as info:
        # checked() switches the whole process (every rank-thread), so it wraps the world
        run_threads(fn, 2, timeout=LONG)
    assert sorted(f.rank for f in info.value.failures) == [0, 1]  # every rank, nobody hangs
    assert all(f.exc_type == "MismatchError" for f in info.value.failures)


def test_same_numel_other_shape_is_accepted_in_plain_mode():
    """Plain mode compares numel, dtype and op only (like gloo): the shapes pair up flat."""
    out = run_threads(_reshaped, 2, timeout=60)
    assert torch.equal(out[0], 2 * torch.arange(6.0).view(2, 3))
    assert torch.equal(out[1], 2 * torch.arange(6.0).view(3, 2))


def _loop_skip(rank, world):
    _pin()
    steps = [torch.full((3,), float(i)) for i in range(3)]
    for t in steps if rank == 0 else steps[1:]:  # rank 1 skips the first iteration
        all_reduce(t)  # one line, one shape: the fingerprints of iterations are equal


def test_checked_mode_cannot_see_a_skipped_loop_iteration_until_the_end():
    """Known limit: same line, same shape, and the counters advance in lockstep, so the
    shifted pairs go unnoticed; rank 0's last call has no partner and times out."""
    with checked(), pytest.raises(WorkerError, match=r"raised CollectiveTimeout: .*from rank 1"):
        run_threads(_loop_skip, 2, timeout=SHORT)


def _env_checked(rank, world):
    """Runs with MINIDP_DEBUG=DETAIL in the environment (read when minidp is imported)."""
    found = []
    try:
        _swapped(rank, world)
    except minidp.comm.MismatchError as exc:
        found.append(str(exc))
    try:
        with checked(rank == 0):  # rank 1 turns checked mode off: the ranks disagree
            all_reduce(torch.ones(2))
    except minidp.comm.MismatchError as exc:
        found.append(str(exc))
    return found


def test_minidp_debug_detail_env_and_mixed_modes(monkeypatch):
    monkeypatch.setenv("MINIDP_DEBUG", "DETAIL")  # the rank processes inherit it
    for found in spawn(_env_checked, 2, timeout=LONG):
        assert len(found) == 2
        assert "all_reduce (checked mode): rank 1 and rank 0 are both at collective" in found[0]
        assert "checked mode is on for ranks [0] only — set MINIDP_DEBUG=DETAIL" in found[1]


def _many_checked_worlds(rank, world, worlds):
    def step(r, w):
        all_reduce(torch.ones(3))
        all_reduce(torch.ones(3))

    false_alarms = 0
    with checked():
        for _ in range(worlds):
            try:
                run_threads(step, 2, timeout=60)
            except WorkerError as exc:
                false_alarms += "out of step" in str(exc)
    return false_alarms


def test_checked_mode_over_many_thread_worlds_has_no_false_alarms():
    # In its own process: the stale counters it leaves must not reach the tests above.
    assert spawn(_many_checked_worlds, 1, 30, timeout=LONG) == [0]


# ---- DDP: ranks configured differently -------------------------------------------------
# (different parameter counts, shapes and bucket layouts: tests/test_ddp_errors.py)


def _model() -> nn.Sequential:
    g = torch.Generator().manual_seed(0)  # thread ranks share the global RNG
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def _ddp_steps(rank, world, option, per_rank):
    ddp = DDP(_model(), **{option: per_rank[rank]})
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):  # the bucket rebuild happens at the 2nd forward
        ddp(x).square().sum().backward()
    return [p.grad.clone() for p in ddp.parameters()]


def test_ddp_find_unused_parameters_differing_across_ranks():
    """Both layouts start as one bucket, but the ranks would part at the 2nd forward (rank 0
    rebuilds and broadcasts its layout, rank 1 never rebuilds; DDP's bucket traffic runs in
    its own channel, so the two would wait for each other): construction names the option."""
    with pytest.raises(WorkerError) as info:
        run_threads(_ddp_steps, 2, "find_unused_parameters", [False, True], timeout=LONG)
    assert sorted(f.rank for f in info.value.failures) == [0, 1]
    for f in info.value.failures:
        assert f.exc_type == "RuntimeError"
        assert "rank 1 has find_unused_parameters=True while rank 0 has" in f.message


def test_ddp_bucket_caps_differing_across_ranks_use_rank_0s_layout():
    """Without find_unused_parameters the first buckets are one per dtype whatever the cap,
    and the rebuilt layout is rank 0's, broadcast: per-rank caps cannot desync the ranks,
    and the gradients equal those of a run where both ranks use rank 0's cap."""
    mixed = run_threads(_ddp_steps, 2, "bucket_cap_mb", [0.01, 0.02], timeout=LONG)
    same = run_threads(_ddp_steps, 2, "bucket_cap_mb", [0.01, 0.01], timeout=LONG)
    for got, want in zip(mixed, same):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


# ---- bad input that the collectives must treat like torch ------------------------------


def _like_gloo(rank, world):
    """minidp and gloo on the same awkward inputs: non-contiguous and 0-dim tensors.

    Returns ``{what: (minidp's result, gloo's result, the input)}``.
    """
    pg = groups.resolve()
    base = torch.arange(12.0).view(3, 4) + 100 * rank  # integers: every order sums exactly
    cases = {"non-contiguous": lambda: base.clone().t(), "0-dim": lambda: torch.tensor(7.0 + rank)}
    out = {}
    for name, make in cases.items():
        ours, ref = make(), make().clone()  # ours stays non-contiguous: in place, like torch
        minidp.comm.broadcast(ours, src=world - 1)
        opts = dist.BroadcastOptions()
        opts.rootRank = world - 1
        pg.broadcast([ref], opts).wait()
        out[f"broadcast {name}"] = (ours, ref, make())

        x = make()
        outputs = [torch.empty_like(x) for _ in range(world)]
        minidp.comm.all_gather(outputs, x)
        expected = [torch.empty_like(x) for _ in range(world)]
        pg.allgather([expected], [x.clone()]).wait()
        out[f"all_gather {name}"] = (torch.stack(outputs), torch.stack(expected), x[None])

        inputs = [make() * (i + 1) for i in range(world)]
        ours = minidp.comm.reduce_scatter(make(), [t.clone() for t in inputs])
        ref = gloo_reduce_scatter(make(), [t.clone() for t in inputs])  # torch < 2.8: stand-in
        out[f"reduce_scatter {name}"] = (ours, ref, inputs[0])

        for op in ("sum", "max", "min", "product"):
            t, ref = make(), make().clone()
            opts = dist.AllreduceOptions()
            opts.reduceOp = getattr(dist.ReduceOp, op.upper())
            pg.allreduce([ref], opts).wait()
            out[f"all_reduce {op} {name}"] = (all_reduce(t, op), ref, make())
    minidp.comm.barrier()
    return out


@pytest.mark.parametrize("world", [1, 2, 3])
def test_group_of_one_non_contiguous_and_0dim_like_gloo(world):
    for rank, results in enumerate(run_threads(_like_gloo, world, timeout=60)):
        assert len(results) == 14
        for what, (ours, gloo, given) in results.items():
            assert ours.shape == gloo.shape, f"rank {rank}, {what}: shape"
            assert torch.equal(ours, gloo), f"rank {rank}, {what}: differs from gloo"
            if world == 1:  # a group of one: every collective is the identity
                assert torch.equal(ours, given), f"{what}: not the identity"


def _bad_on_one(rank, world, case):
    if case == "src":
        minidp.comm.broadcast(torch.ones(3), src=1)
    elif case == "int_avg":
        all_reduce(torch.ones(3, dtype=torch.int32), op="avg")
    elif case == "gather_list":
        minidp.comm.all_gather([torch.empty(3), torch.empty(3)], torch.ones(3))
    elif case == "scatter_list":
        minidp.comm.reduce_scatter(torch.empty(3), [torch.ones(3), torch.ones(3)])
    elif case == "gather_dtype":
        minidp.comm.all_gather([torch.empty(3, dtype=torch.float64)], torch.ones(3))


@pytest.mark.parametrize(
    "case, pattern",
    [
        ("src", r"ValueError: broadcast: src must be a rank in \[0, 0\] for this group of 1"),
        ("int_avg", r"TypeError: (ring|direct)_all_reduce: op 'avg' needs a floating-point"),
        ("gather_list", r"ValueError: all_gather: tensor_list has 2 tensors but the group has 1"),
        ("scatter_list", r"ValueError: reduce_scatter: input_list has 2 tensors but the group"),
        ("gather_dtype", r"ValueError: all_gather: tensor_list\[0\] is \(3,\) torch.float64 but"),
    ],
)
def test_group_of_one_still_rejects_bad_input(case, pattern):
    """The identity shortcut of a 1-rank group must not skip the argument checks."""
    with pytest.raises(WorkerError, match=pattern):
        run_threads(_bad_on_one, 1, case, timeout=60)


def _not_a_tensor(rank, world):
    all_reduce([1.0, 2.0])


def test_not_a_tensor_is_a_clear_type_error():
    with pytest.raises(WorkerError, match=r"TypeError: .*expected a torch.Tensor.*list"):
        run_threads(_not_a_tensor, 2, timeout=60)


def _requires_grad(rank, world):
    """A leaf and a non-leaf that require grad, through torch's all_reduce and minidp's
    (both algorithms): values, requires_grad and grad_fn, as torch leaves them."""
    seen = []
    for make in (lambda: torch.full((3,), float(rank + 1), requires_grad=True),
                 lambda: torch.full((3,), float(rank + 1), requires_grad=True) * 2):  # fmt: skip
        for reduce in (gloo_all_reduce, all_reduce, minidp.comm.ring_all_reduce):
            t = make()
            reduce(t, "sum")  # no autograd through c10d: no error, no new graph node
            seen.append((t.detach(), t.requires_grad, t.grad_fn is not None))
    return seen


def test_all_reduce_of_tensors_that_require_grad_works_like_torch():
    for seen in run_threads(_requires_grad, 2, timeout=60):
        for i in (0, 3):  # the leaf's row, the non-leaf's: torch's first, then minidp's two
            (ref, *ref_flags), *ours = seen[i : i + 3]
            for t, *flags in ours:
                assert torch.equal(t, ref) and flags == ref_flags


def test_the_fault_catalog_prints_a_row_per_fault(capsys):
    import fault_catalog

    assert fault_catalog.main(["--only", "op sum vs max"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | desync | op sum vs max | 2 threads | rank " in out
    assert "raised MismatchError: all_reduce: rank 1 passed" in out and "| clear |" in out
    assert "hung: 0; processes or rank threads left behind: 0." in out
