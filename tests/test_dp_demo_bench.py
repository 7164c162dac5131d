"""The DP classroom demo and benchmark run end to end (non-interactively).

Run: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import torch

from minidp.tools.bench import dp as bench_dp
from minidp.tools.demo import dp as demo_dp


def test_demo_runs_and_ends_with_passing_parity_checks(capsys):
    assert demo_dp.main(["--devices", "3", "--batch", "7", "--color", "never"]) == 0
    out = capsys.readouterr().out
    stages = ("1. scatter", "2. replicate", "3. parallel_apply", "4. gather", "5. backward")
    for stage in stages + ("6. optimizer step", "7. next step: replicate again"):
        assert stage in out
    assert "163 parameter elements (4 tensors) copied to 2 other device(s)" in out
    assert "every replica holds the updated weights: True" in out
    assert "cpu #2         x[rows 6..6]  (1, 6)" in out  # 7 rows on 3 devices: 3, 3, 1
    assert "shares the model's storage" in out and "a copy" in out
    assert "outputs torch.equal: True, 4 gradients torch.equal: True" in out
    assert "assert_close: True" in out
    assert "cpu #0 (main)" in out and "\033[" not in out  # no colour when not a TTY


def test_demo_records_the_update_and_the_fresh_replicas():
    from minidp.tools.recorder.dp import dp_events

    model, x, y = demo_dp.make_model_and_data(6)
    devices = [torch.device("cpu")] * 2
    dp_events(model, x, y, devices)  # the recorded step leaves the summed gradients in .grad
    before = [prm.detach().clone() for prm in model.parameters()]
    grads = [prm.grad.clone() for prm in model.parameters()]
    update = demo_dp.record_update(model, devices, 2, lr=0.5)
    # the same SGD step done by torch on a copy of the pre-step weights and the DP gradients
    twin = [b.clone().requires_grad_() for b in before]
    for t, g in zip(twin, grads):
        t.grad = g
    torch.optim.SGD(twin, lr=0.5).step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin))
    assert update.fresh and update.replicas_after == [update.after] * 2
    assert update.after != update.before


def test_demo_small_batch_uses_fewer_devices(capsys):
    assert demo_dp.main(["--devices", "4", "--batch", "3"]) == 0
    assert "only 3 of 4 devices get rows" in capsys.readouterr().out


def test_bench_quick_run_prints_table_and_restores_threads(capsys):
    before = torch.get_num_threads()
    args = [
        "--width",
        "32",
        "--batch",
        "16",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--rounds",
        "1",
        "--devices",
        "2",
    ]
    assert bench_dp.main(args) == 0
    out = capsys.readouterr().out
    assert "torch.nn.DataParallel" in out
    if not torch.cuda.is_available():
        assert "without GPUs it is the plain model" in out and "2 chunks in turn" in out
    assert "minidp DataParallel" in out and "vs torch DP" in out and "(main)" in out
    assert torch.get_num_threads() == before
