"""What the DataParallel exercises share: each rank's batch, and torch's scatter/gather code
run on CPU (its CUDA-only ``Scatter`` / ``Gather`` swapped for ``chunk`` / ``cat``)."""

import contextlib
import threading

import torch
import torch.nn.parallel.scatter_gather as torch_sg

_SWAP = threading.Lock()  # rank threads share torch's module: one swap at a time
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64")  # scatter/gather: any dtype
# batch 10 on 4 devices: 3, 3, 3, 1; batch 5: 2, 2, 1 (3 devices); batch 3 on 5
CASES = tuple({"world": w, "shape": s, "devices": d, "seed": i, **more}
              for i, (w, s, d, more) in enumerate((
    (1, (10, 3), 4, {}), (2, (8, 2), 4, {}), (3, (5, 3), 4, {}),
    (1, (7, 2), 3, {"dtype": "float16"}), (2, (3, 2), 5, {"dtype": "int64"}),
    (1, (6, 1), 1, {}))))  # fmt: skip


class _CpuScatter:  # torch's Scatter.apply(target_gpus, chunk_sizes, dim, tensor) on CPU
    apply = staticmethod(lambda devices, sizes, dim, t: tuple(t.chunk(len(devices), dim)))


class _CpuGather:  # torch's Gather.apply(target_device, dim, *tensors) on CPU
    apply = staticmethod(lambda device, dim, *tensors: torch.cat(tensors, dim))


@contextlib.contextmanager
def torch_scatter_gather_on_cpu():
    """torch's scatter/gather container code, its two CUDA-only leaves run on CPU."""
    with _SWAP:
        saved = torch_sg.Scatter, torch_sg.Gather
        torch_sg.Scatter, torch_sg.Gather = _CpuScatter, _CpuGather
        try:
            yield
        finally:
            torch_sg.Scatter, torch_sg.Gather = saved


def batch(case, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch: x (B, F) and labels y (B,) in 0..2."""
    g = torch.Generator().manual_seed(case.get("seed", 0) * 1009 + rank)
    rows, features = case["shape"]
    x = torch.randn(rows, features, generator=g).to(getattr(torch, case.get("dtype", "float32")))
    return x, torch.randint(0, 3, (rows,), generator=g)


def draw(rng) -> dict:
    """World 1..3, batch 1..12, 1..4 features, 1..6 devices, any dtype."""
    return {"world": rng.randint(1, 3), "shape": (rng.randint(1, 12), rng.randint(1, 4)),
            "devices": rng.randint(1, 6), "seed": rng.randint(0, 99),
            "dtype": rng.choice(DTYPES)}  # fmt: skip
