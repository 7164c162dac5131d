"""``data_parallel_step`` (lesson 3) vs ``nn.DataParallel`` on CPU (the plain module) and on
every GPU there is: output, loss, rows per device, gradients (added to), rtol 1e-10."""

import torch
from torch import nn

from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import dp
from minidp.tools.exercise.specs.ddp import grads as _grads
from minidp.tools.exercise.specs.ddp import names


def gpu_plan(cuda_available: bool, cuda_count: int) -> dict:
    """Every case's machine keys: ``{"cuda": K}`` runs torch's DataParallel on K GPUs too."""
    return {"cuda": int(cuda_count)} if cuda_available and cuda_count > 0 else {}


def _mlp(case) -> nn.Module:
    """A small float64 MLP, the same for every rank of the case (an earlier .grad too)."""
    g = torch.Generator().manual_seed(10_000 + case.get("seed", 0))
    model = nn.Sequential(nn.Linear(case["shape"][1], 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
            if case.get("accumulate"):  # a gradient from an earlier micro-batch
                p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
    return model


def learn(fn, case, rank, world, group):
    x, y = dp.batch(case, rank)
    x = x.double()
    mine, seen = _mlp(case), []
    # every forward of the model or of any replica (deepcopy keeps the hook): rows received
    mine.register_forward_pre_hook(lambda module, args: seen.append(len(args[0])))
    answer = fn(mine, x, y, nn.functional.cross_entropy, ["cpu"] * case["devices"])
    out, loss = answer if isinstance(answer, (tuple, list)) and len(answer) == 2 else (answer, None)
    got = [out, loss, sorted(seen, reverse=True), *_grads(mine)]  # (sent as plain data)
    if case.get("cuda"):  # the same answer, compared with torch's GPU DataParallel too
        got += [out, loss, *_grads(mine)]
    return [*got, [x, y]]


def _on_gpus(case, x, y) -> list:
    """torch's real DataParallel on ``case["cuda"]`` GPUs: output, loss, gradients (on CPU)."""
    model = _mlp(case).to("cuda:0")  # Module.to moves an earlier .grad too
    out = nn.DataParallel(model, device_ids=list(range(case["cuda"])))(x.to("cuda:0"))
    loss = nn.functional.cross_entropy(out, y.to("cuda:0"))
    loss.backward()
    return [out.detach().to("cpu"), loss.detach().to("cpu"), *_grads(model)]


def expect(case, rank, world, group):
    x, y = dp.batch(case, rank)
    x, model = x.double(), _mlp(case)
    out = model(x)  # torch's DataParallel without an accelerator: the plain module
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    rows = sorted([len(c) for c in x.chunk(case["devices"])], reverse=True)  # scatter: chunk
    expected = [out.detach(), loss.detach(), rows, *_grads(model)]
    labels = ["output", "loss", "rows each device received", *names(model)]
    if case.get("cuda"):
        expected += _on_gpus(case, x, y)
        gpu = f"torch's DataParallel on {case['cuda']} GPU(s)"
        labels += [f"{what} vs {gpu}" for what in ("output", "loss", *names(model))]
    return Expected([*expected, [x, y]], [*labels, "the batch after the call (unchanged)"])


EXERCISE = Exercise(
    reference="torch.nn.DataParallel: on CPU its plain-module forward/backward, and where "
    "CUDA exists also the real wrapper on the GPUs; float64, rtol 1e-10", learn=learn,
    expect=expect, cases=tuple({**{k: v for k, v in c.items() if k != "dtype"},
                                "accumulate": i == 3} for i, c in enumerate(dp.CASES)),
    draw=lambda rng: {**(c := dp.draw(rng)), "dtype": "float64", "accumulate": c["seed"] % 3 == 0},
    tolerance=lambda case: (1e-10, 1e-12),
    plan=lambda: gpu_plan(torch.cuda.is_available(), torch.cuda.device_count()),
    answers=("minidp.textbook.dp", "minidp.dp.replicate", "minidp.dp.parallel_apply",
             "minidp.dp.scatter", "minidp.dp.gather", "minidp.dp.data_parallel.DataParallel",
             "torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.DataParallel",
             "torch.nn.parallel.replicate", "torch.nn.parallel.parallel_apply",
             "torch.nn.parallel.scatter_gather"))  # fmt: skip
