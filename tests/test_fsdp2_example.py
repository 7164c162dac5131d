"""FSDP2's ordinary recipe, unchanged but for the import: ``tests/scripts/fsdp2_example.py``.

The script (written in the style of pytorch/examples' FSDP2 example: meta init,
``reset_parameters``, ``MixedPrecisionPolicy``, explicit prefetching with ``unshard()``, a
checkpointer using ``get_model_state_dict`` or ``full_tensor()``, resume) runs once with
``torch.distributed.fsdp`` and once with ``minidp`` (its top level, as the README says)
swapped in by its import block, in the same 2-rank world: 3 steps, save, then a fresh
model resumes from the file for 3 more. The losses and every tensor of both checkpoints
must be identical (``torch.equal``).

On main this failed at the script's first check: ``isinstance(model, FSDPModule)`` (minidp
had no FSDPModule and no DTensor parameters); past it, the meta recipe trained nothing (the
optimizer held parameters the first forward replaced) and the full state dict was rank 0's
rows.

Run: ``pytest tests/test_fsdp2_example.py``
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
from helpers import FSDP2_UNUSABLE

SCRIPT = Path(__file__).resolve().parent / "scripts" / "fsdp2_example.py"

pytestmark = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")

CONFIGS = {  # name: the script's flags
    "bf16_prefetch_dcp": ["--mixed-precision", "--explicit-prefetching", "--dcp-api"],
    "fp32_full_tensor": [],
}


def _run(rank: int, world: int, impl: str, out: str, flags: list[str]) -> list[float]:
    """In a rank: load the script with ``impl``'s import, train, save, resume, save."""
    os.environ["FSDP2_EXAMPLE_IMPL"] = impl
    spec = importlib.util.spec_from_file_location(f"fsdp2_example_{impl}", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    losses = script.main(script.parse([out, *flags]))
    return losses + script.main(script.parse([out, "--resume", *flags]))


@pytest.fixture(scope="module")
def runs(process_world, tmp_path_factory):
    done = {}
    for name, flags in CONFIGS.items():
        for impl in ("torch", "minidp"):
            out = tmp_path_factory.mktemp(f"{name}_{impl}")
            losses = process_world(2).run(_run, impl, str(out), flags)
            done[name, impl] = (losses, out)
    return done


def _equal(a, b, where: str) -> list[str]:
    """Paths where two nested checkpoint values differ (tensors: torch.equal)."""
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a)} vs {sorted(b)}"]
        return [d for k in a for d in _equal(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _equal(x, y, f"{where}[{i}]")]
    if isinstance(a, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [f"{where}: {tuple(a.shape)} vs {tuple(b.shape)}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_example_trains_and_resumes_like_fsdp2(runs, name):
    (theirs, their_dir), (ours, our_dir) = runs[name, "torch"], runs[name, "minidp"]
    assert ours == theirs, (ours, theirs)  # every rank, every step, both runs
    assert len(ours[0]) == 6 and ours[0][0] != ours[0][-1]
    for step in (3, 6):
        saved = [torch.load(d / f"step{step}.pt", weights_only=True) for d in (their_dir, our_dir)]
        assert saved[0]["model"]["tok_embeddings.weight"].shape == (64, 32)  # full, not a shard
        assert _equal(*saved, f"step{step}") == []


def test_a_wrong_import_would_be_caught(runs):
    """The comparison can fail: the two configurations' losses differ (bf16 vs fp32)."""
    assert runs["bf16_prefetch_dcp", "minidp"][0] != runs["fp32_full_tensor", "minidp"][0]
