"""Exercise ``fp16_compress_hook`` (lesson 22): a DDP communication hook that sends every
bucket as float16 — torch's ``fp16_compress_hook``, written by the learner.

What torch does (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``,
``_compress_hook``, torch 2.13): ``compressed = bucket.buffer().to(torch.float16)
.div_(world_size)`` — cast first, then divide IN FLOAT16 (dividing first keeps the sum
from overflowing fp16's 65504) — then ``dist.all_reduce(compressed, group=...,
async_op=True).get_future()``, and ``.then(decompress)``, where ``decompress`` copies the
summed fp16 values back into the bucket's own float32 buffer (``buffer.copy_(...)``: the
cast back, in place) and returns that buffer.

Reference: on every rank the same float32 MLP as ``ddp_grads.py`` is trained two steps by
torch DDP with torch's own hook registered, and a copy by torch DDP with the learner's
hook, on the same data: every gradient must be ``torch.equal``. 100-byte buckets: the
first backward sends one bucket of all 147 gradients (DDP's first layout), the second
three (27, 72, 48 elements: the layout rebuilt in gradient order). Exact, not a
tolerance: both hooks see the same buckets and do the same float16 arithmetic through the
same gloo all-reduce, so any other order of rounding (dividing in float32, dividing after
the sum) shows as other bits. Dividing by 2 only shifts the exponent, so with 2 ranks
those two slips give torch's bits; the fixed cases show them from 3 ranks.

The classic mistakes' gradients come from the same DDP with the slip's hook (``SLIPS``):
recognised bit for bit. Real rank processes (torch DDP wants a full ProcessGroup): the
learner's hook trains in rank processes forked in the sandbox, watched by
``hook_watch.HookWatch`` (a blocking hook returning a completed Future, a collective on
the default group); torch's hook and the slips' in the judge's reference worker. The
last item compared: "the hook's Future completed only after its all-reduce".

Test: ``pytest tests/test_exercise_set_b.py -k fp16``
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from minidp.tools.exercise.ddp_grads import CASES, _data, _grads, _model, ddp_cases, warm_ddp
from minidp.tools.exercise.hook_watch import HookWatch
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, everywhere, same

CAP_MB = 100 / 2**20  # 100-byte buckets: the MLP's 588 bytes of gradients make three
STEPS = 2  # the second backward runs on the rebuilt buckets


def _then_copy(buffer: torch.Tensor, fut, scale: int = 1):
    def decompress(f):
        buffer.copy_(f.value()[0])
        return buffer.div_(scale) if scale != 1 else buffer

    return fut.then(decompress)


def _reduce(state, tensor: torch.Tensor):
    return dist.all_reduce(tensor, group=state, async_op=True).get_future()


def _divide_after(state, bucket):  # sum in fp16, divide the float32 result
    buffer = bucket.buffer()
    return _then_copy(buffer, _reduce(state, buffer.to(torch.float16)), state.size())


def _no_divide(state, bucket):
    buffer = bucket.buffer()
    return _then_copy(buffer, _reduce(state, buffer.to(torch.float16)))


def _divide_before(state, bucket):  # divide in float32, then cast
    buffer = bucket.buffer()
    return _then_copy(buffer, _reduce(state, buffer.div(state.size()).to(torch.float16)))


def _bfloat16(state, bucket):
    buffer = bucket.buffer()
    return _then_copy(buffer, _reduce(state, buffer.to(torch.bfloat16).div_(state.size())))


def _compress_after(state, bucket):  # the float32 average, rounded to float16 afterwards
    buffer = bucket.buffer()
    fut = _reduce(state, buffer.div_(state.size()))
    return fut.then(lambda f: buffer.copy_(f.value()[0].to(torch.float16)))


def _divide_twice(state, bucket):  # divided in float16 before the sum, and again after
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    return _then_copy(buffer, _reduce(state, compressed), state.size())


def _not_copied(state, bucket):  # the sum is made, but the bucket keeps its own values
    buffer = bucket.buffer()
    fut = _reduce(state, buffer.to(torch.float16).div_(state.size()))
    return fut.then(lambda f: buffer)


SLIPS = {  # name -> the hook with that slip (its gradients, to recognise the slip)
    "divide after": _divide_after,
    "no divide": _no_divide,
    "divide before": _divide_before,
    "bfloat16": _bfloat16,
    "not copied": _not_copied,
    "compress after": _compress_after,
    "divide twice": _divide_twice,
    "no compression": None,  # DDP's own all-reduce: float32 average
}


def _train(hook, case, rank: int, group) -> list:
    """Two steps of the float32 MLP through torch DDP with ``hook`` (None: DDP's own
    all-reduce); every parameter's gradient after each step."""
    model = _model(case).float()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=CAP_MB)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    grads = []
    for step in range(STEPS):
        ddp.zero_grad(set_to_none=True)
        x, y = (t.float() for t in _data(case, rank, step))
        nn.functional.mse_loss(ddp(x), y).backward()
        grads += _grads(model)
    return grads


def _learn(fn, case, rank, world, group) -> Answer:
    with HookWatch(group, fn.__code__.co_filename) as watch:
        grads = _train(watch.wrap(fn), case, rank, group)
    return Answer([*grads, watch.asynchronous()], {"blocking": watch.blocking})


def _expect(case, rank, world, group) -> Expected:
    expected = _train(default_hooks.fp16_compress_hook, case, rank, group)
    slips = {name: [*_train(hook, case, rank, group), True] for name, hook in SLIPS.items()}
    names = [name for name, _ in _model(case).named_parameters()]
    labels = [f"step {s + 1}: {n}'s gradient" for s in range(STEPS) for n in names]
    labels.append("the hook's Future completed only after its all-reduce")
    return Expected([*expected, True], {"slips": slips, "labels": labels})


def _is(slip: str, min_world: int = 1):
    """A detector: on every rank the gradients are those of the ``slip``'s hook."""
    return lambda case, results: (
        case["world"] >= min_world
        and everywhere(results, lambda rank, r: same(r.got, r.extra["slips"][slip]))
    )


FP16_COMPRESS_HOOK = Exercise(
    name="fp16_compress_hook",
    lesson="22_mixed_precision",
    summary="a DDP comm hook: all-reduce each bucket in float16, divide first, copy back",
    reference="torch DDP with torch's fp16_compress_hook registered (gloo), float32, torch.equal",
    learn=_learn,
    expect=_expect,
    cases=CASES,
    strategy=ddp_cases,
    processes=True,
    reference_processes=True,
    generated=4,
    answers=("torch.distributed.algorithms.ddp_comm_hooks.default_hooks", "minidp.ddp.hooks"),
    shrink=lambda case: iter(()),  # the cases are small; a try costs seconds
    prepare=warm_ddp,
    mistakes=(
        Mistake(
            "forgot to divide by the world size",
            "every gradient is about world_size times torch's: the all-reduce SUMS — divide "
            "the float16 tensor by state.size() before the all-reduce.",
            _is("no divide", 2),
        ),
        Mistake(
            "divided after the sum",
            "you divided the float32 result after the all-reduce: torch divides the float16 "
            "tensor BEFORE it (compressed = buffer.to(torch.float16).div_(world_size)) — "
            "other roundings, and a sum of W float16 gradients may overflow 65504.",
            _is("divide after", 3),
        ),
        Mistake(
            "divided before compressing",
            "you divided in float32 and then cast: torch casts to float16 FIRST and divides "
            "the float16 tensor (buffer.to(torch.float16).div_(world_size)) — the two "
            "roundings happen in the other order.",
            _is("divide before", 3),
        ),
        Mistake(
            "sum never copied into the bucket",
            "the gradients are this rank's own: in the .then callback copy the all-reduced "
            "float16 values into the bucket's buffer (bucket.buffer().copy_(fut.value()[0])) "
            "and return it — a new tensor that nobody returns is lost.",
            _is("not copied", 2),
        ),
        Mistake(
            "compressed after the all-reduce",
            "you all-reduced the float32 bucket and cast the result to float16 afterwards: "
            "no byte was saved on the wire, and the rounding happens after the sum. Cast "
            "BEFORE the all-reduce: that is what halves the traffic.",
            _is("compress after", 2),
        ),
        Mistake(
            "divided twice",
            "the gradients are torch's divided by the world size once more: divide the "
            "float16 tensor before the all-reduce, and only copy the sum back in decompress.",
            _is("divide twice", 2),
        ),
        Mistake(
            "compressed to bfloat16",
            "the exercise (and torch's fp16_compress_hook) sends torch.float16: 10 mantissa "
            "bits; bfloat16 keeps only 7.",
            _is("bfloat16"),
        ),
        Mistake(
            "no compression",
            "the gradients are the plain float32 average: cast the bucket to torch.float16 "
            "before the all-reduce — that halves the bytes sent, and rounds as torch does.",
            _is("no compression"),
        ),
        Mistake(
            "all-reduced on the default group",
            "the hook must all-reduce on `state`, the process group DDP hands it (DDP may "
            "run on a subgroup): dist.all_reduce(compressed, group=state, async_op=True). "
            "On the default group, ranks outside DDP's group never join and it hangs.",
            raised=r"WrongGroup: ",
        ),
        Mistake(
            "blocking all-reduce in the hook",
            "the gradients are right, but the hook waited for its all-reduce and returned an "
            "already-completed Future: the communication no longer overlaps the rest of "
            "backward, which is what comm hooks are for. Start it with async_op=True and "
            "return fut.then(decompress) — DDP waits for the Future itself, at the end.",
            lambda case, results: everywhere(
                results,
                lambda rank, r: r.got[-1] is False and same(r.got[:-1], r.expected[:-1]),
            ),
        ),
        Mistake(
            "returned the all-reduce's future",
            "dist.all_reduce(...).get_future() holds a LIST of tensors: return "
            "fut.then(decompress), where decompress(fut) copies fut.value()[0] into "
            "bucket.buffer() and returns that tensor.",
            raised=r"hook result|Unable to cast \[tensor",  # (the latter: through HookWatch)
        ),
        Mistake(
            "annotations as strings",
            "DDP compares the hook's annotations with dist.GradBucket and "
            "torch.futures.Future[torch.Tensor] themselves: remove "
            "'from __future__ import annotations' from your file (or the annotations).",
            raised=r"annotation should be",
        ),
    ),
)
