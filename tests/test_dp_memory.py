"""memory_report: the per-device byte table of one DataParallel step.

Run: ``pytest tests/test_dp_memory.py``

On simulated devices the numbers are counted, so they can be predicted exactly from the
model and the batch: that is what these tests do.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minidp.dp import DataParallel
from minidp.tools.planner.dp_memory import format_bytes, memory_report


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_counts_match_the_model_and_the_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
    dp = DataParallel(model, device_ids=["cpu"] * 3)
    x = torch.randn(10, 8)  # chunks of 4, 4, 2 rows
    report = memory_report(dp, x, loss_fn=lambda out: out.pow(2).sum())
    params = nbytes(model.parameters()) + nbytes(model.buffers())
    grads = nbytes(model.parameters())
    rows = [4, 4, 2]
    assert [r.device for r in report.rows] == ["cpu #0", "cpu #1", "cpu #2"]
    assert [r.params for r in report.rows] == [params] * 3
    assert [r.inputs for r in report.rows] == [k * 8 * 4 for k in rows]
    # replica outputs (k, 4) float32; the main device also holds the gathered (10, 4)
    assert [r.outputs for r in report.rows] == [4 * 16 + 10 * 16, 4 * 16, 2 * 16]
    # every replica's own parameter gradients; the main device also holds the sum (.grad)
    assert [r.grads for r in report.rows] == [2 * grads, grads, grads]
    assert all(r.activations > 0 for r in report.rows)
    assert report.rows[0].total > report.rows[1].total > report.rows[2].total


def test_grads_restored_and_table_printed():
    model = nn.Linear(4, 2)
    dp = DataParallel(model, device_ids=["cpu"] * 2)
    report = memory_report(dp, torch.randn(6, 4))
    assert model.weight.grad is None  # the step's gradients are not left behind
    text = str(report)
    for word in ("device", "params", "activations", "grads", "cpu #0 (main)", "cpu #1"):
        assert word in text
    assert "main device holds" in text and "counted tensor bytes" in text


def test_format_bytes():
    assert [format_bytes(n) for n in (None, 12, 1536, 3 * 2**20)] == [
        "-",
        "12 B",
        "1.5 KiB",
        "3.0 MiB",
    ]


def test_error_report_needs_devices():
    dp = DataParallel(nn.Linear(2, 2), device_ids=["cpu"])
    dp.device_ids = []  # the plain-module case (no GPUs, device_ids=None)
    with pytest.raises(
        ValueError, match=r"expected a DataParallel with devices but got device_ids=\[\]"
    ):
        memory_report(dp, torch.ones(2, 2))


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2+ GPUs"
)
def test_gpu_report_has_measured_columns():
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)).cuda()
    report = memory_report(DataParallel(model, device_ids=[0, 1]), torch.randn(32, 64).cuda())
    assert [r.device for r in report.rows] == ["cuda:0", "cuda:1"]
    assert all(r.cuda_peak is not None and r.cuda_peak >= r.cuda_before for r in report.rows)
    # the main device holds the model, the gathered output and the summed gradients
    assert report.rows[0].cuda_peak > report.rows[1].cuda_peak
    assert "cuda peak" in str(report)
