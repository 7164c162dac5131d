"""Real scripts, only the import changed: torch's classes and minidp's give the same bits.

Two training scripts written the way the popular ones are (``tests/scripts/``: one in the
style of pytorch/examples' DDP tutorial series, one in the style of nanoGPT's
``train.py``) run under a real ``torchrun --nproc-per-node 2`` on CPU with gloo:

1. as written, with torch's ``DistributedDataParallel`` (and ``DistributedSampler``,
   ``ZeroRedundancyOptimizer``);
2. with the marked import lines replaced by ONE line importing minidp's — the text of
   everything else is untouched (the test checks that);

each launched twice: from scratch, then resumed from the checkpoint the first launch
wrote. The launches are subprocesses that wait mostly on each other, so they start when
collection ends and run in the background beside the other tests (``conftest.py``,
``lesson_runs.py``; ``python tests/test_real_scripts.py SCRIPT torch|minidp DIR`` is one
such job); the test compares what they wrote: every rank's losses and the checkpoints
must be ``torch.equal``. Between them the scripts use ``device_ids`` (on GPU),
``LOCAL_RANK``, ``DistributedSampler.set_epoch``,
``no_sync`` and ``require_backward_grad_sync`` accumulation, ``clip_grad_norm_`` (after
``GradScaler.unscale_``), LR schedules, weight-decay groups, tied weights, eval forwards
under ``no_grad``, ``Join`` for uneven data with ZeRO beside DDP, and save/resume.

On a GPU machine ``tests/test_gpu.py`` runs the first script with ``--device cuda``.
Run: ``pytest tests/test_real_scripts.py``
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parent / "scripts"
REPO = Path(__file__).resolve().parents[1]
LAUNCH_TIMEOUT_S = 180  # a hung launch fails the test instead of hanging the suite
# What an outer launcher may have set: torchrun must compute its own.
LAUNCHER_ENV = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "OMP_NUM_THREADS",
}
RENDEZVOUS_FAILURES = ("EADDRINUSE", "Address already in use", "RendezvousConnectionError",
                       "DistNetworkError")  # fmt: skip
MINIDP_LINE = "from minidp import {names}  # the one line changed"
# script: (its torch import lines, the names the minidp line imports, its two launches)
SCRIPTS_UNDER_TEST = {
    "examples_style_ddp.py": (
        [
            "from torch.distributed.optim import ZeroRedundancyOptimizer",
            "from torch.nn.parallel import DistributedDataParallel as DDP",
            "from torch.utils.data.distributed import DistributedSampler",
        ],
        "DistributedDataParallel as DDP, DistributedSampler, ZeroRedundancyOptimizer",
        (
            ["--epochs", "1", "--snapshot", "{out}/snap.pt", "--losses", "{out}/first"],
            ["--epochs", "2", "--snapshot", "{out}/snap.pt", "--losses", "{out}/resumed"],
        ),
    ),
    "nanogpt_style_ddp.py": (
        ["from torch.nn.parallel import DistributedDataParallel as DDP  # the line a user swaps"],
        "DistributedDataParallel as DDP",
        (
            ["--out_dir={out}", "--max_iters=3", "--eval_interval=2", "--init_from=scratch"],
            ["--out_dir={out}", "--max_iters=5", "--eval_interval=2", "--init_from=resume"],
        ),
    ),
}


def swapped(script: str) -> str:
    """The script's text with its torch import lines replaced by one minidp line."""
    torch_lines, names, _ = SCRIPTS_UNDER_TEST[script]
    lines = (SCRIPTS / script).read_text().splitlines(keepends=True)
    out, replaced = [], False
    for line in lines:
        if line.rstrip("\n") in torch_lines:
            if not replaced:
                out.append(MINIDP_LINE.format(names=names) + "\n")
                replaced = True
            continue
        out.append(line)
    assert replaced and len(out) == len(lines) - len(torch_lines) + 1, "import lines not found"
    return "".join(out)


def torchrun(script: Path, args: list[str], log: Path, nproc: int = 2) -> None:
    """``torchrun --standalone --nproc-per-node nproc script args``; raises with its output."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # the same kernels in every launch
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", str(nproc), "--max-restarts", "0", str(script), *args,
    ]  # fmt: skip
    for _attempt in range(2):
        with open(log, "w") as out:
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=LAUNCH_TIMEOUT_S
            )
        text = log.read_text()
        # --standalone picks a free port for its rendezvous; another process may take it
        # first (the launch, not the script, failed): one retry, as tests/test_multinode.py
        if proc.returncode == 0 or not any(m in text for m in RENDEZVOUS_FAILURES):
            break
    assert proc.returncode == 0, f"{script.name} {args} exited {proc.returncode}:\n{text[-4000:]}"


def run_both_launches(script: str, variant: str, root: Path, extra: list[str] = ()) -> Path:
    """Run ``variant`` ("torch" or "minidp") of ``script``: scratch, then resume; its dir."""
    out = root / variant
    out.mkdir()
    path = SCRIPTS / script
    if variant == "minidp":
        path = root / f"minidp_{script}"
        path.write_text(swapped(script))
    for i, args in enumerate(SCRIPTS_UNDER_TEST[script][2]):
        torchrun(path, [a.format(out=out) for a in args] + list(extra), out / f"launch{i}.log")
    return out


def saved(out: Path) -> dict[str, object]:
    """Every ``.pt`` file a run wrote, loaded (losses per rank and launch, checkpoints)."""
    return {p.name: torch.load(p, weights_only=True) for p in sorted(out.glob("*.pt"))}


def assert_same(a, b, where: str = "") -> None:
    """``torch.equal`` on every tensor of two nested structures, equality on the rest."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where}: {a} vs {b}"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def test_the_swap_changes_only_the_import_lines():
    for script, (torch_lines, _, _) in SCRIPTS_UNDER_TEST.items():
        original = (SCRIPTS / script).read_text().splitlines()
        changed = swapped(script).splitlines()
        assert [x for x in original if x not in torch_lines] == [
            x for x in changed if not x.startswith("from minidp import")
        ]


VARIANTS = ("torch", "minidp")
_ROOTS: dict[str, Path] = {}  # script -> where its background launches write


def background_jobs(items) -> dict[tuple[str, str], list[str]]:
    """The launches of the selected scripts, as jobs for the background runner (conftest):
    ``(kind, name) -> argv``, each job one variant's two launches into its script's folder."""
    jobs = {}
    for item in items:
        if item.originalname == "test_script_gives_torchs_bits_with_minidp_swapped_in":
            script = item.callspec.params["script"]
            root = _ROOTS[script] = Path(tempfile.mkdtemp(prefix="minidp-real-script-"))
            for variant in VARIANTS:
                jobs[("real script", f"{variant}:{script}")] = [
                    sys.executable, __file__, script, variant, str(root)]  # fmt: skip
    return jobs


def remove_folders() -> None:
    """The background launches' folders, at the session's end (deselected or interrupted)."""
    for root in _ROOTS.values():
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def launched(request, tmp_path):
    """``launched(script) -> (torch's folder, minidp's folder)``: the background runs where
    conftest started them, else (a run without the runner) launched here, one after another."""
    from test_lessons import RUNS

    runs = request.config.stash.get(RUNS, None)

    def get(script: str) -> tuple[Path, Path]:
        if runs is None or script not in _ROOTS:
            return tuple(run_both_launches(script, v, tmp_path) for v in VARIANTS)
        for variant in VARIANTS:
            rc, out, seconds = runs.result(("real script", f"{variant}:{script}"))
            assert rc == 0, f"{script} ({variant}) exited {rc} after {seconds:.0f}s:\n{out[-4000:]}"
        return tuple(_ROOTS[script] / v for v in VARIANTS)

    return get


@pytest.mark.parametrize("script", list(SCRIPTS_UNDER_TEST))
def test_script_gives_torchs_bits_with_minidp_swapped_in(script, launched):
    theirs, ours = (saved(out) for out in launched(script))
    losses = [name for name in theirs if "rank" in name]
    assert len(losses) == 4, f"expected losses of 2 ranks x 2 launches, got {list(theirs)}"
    assert all(len(theirs[name]) > 3 for name in losses)  # they trained
    assert_same(theirs, ours, script)


if __name__ == "__main__":  # one background job: SCRIPT VARIANT DIR
    run_both_launches(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
