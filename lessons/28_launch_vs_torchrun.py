# %% [markdown]
# # Lesson 28 — `torch.distributed.launch` vs `torchrun`: `--local-rank` vs `LOCAL_RANK`
#
# Run: `python lessons/28_launch_vs_torchrun.py`
#
# Older scripts (and many articles) start with the deprecated launcher:
#
#     python -m torch.distributed.launch --nproc-per-node 2 train.py
#
# It hands each process its local rank **as an argument**: `train.py --local-rank=0`, so
# the script must parse it (`parser.add_argument("--local-rank", "--local_rank", type=int)`).
# `torchrun` (= `python -m torch.distributed.run`, torch >= 1.10) passes nothing on the
# command line: every rank reads **`LOCAL_RANK` from the environment**, like `RANK` and
# `WORLD_SIZE`. `launch --use-env` behaves like torchrun.
#
# Version trap: up to torch 1.13 the argument was `--local_rank=N`; **from 2.0.0** launch
# passes `--local-rank=N`. A script whose parser only knows `--local_rank` fails under
# torch >= 2.0 with "unrecognized arguments: --local-rank=0"; accept both spellings, or
# better, read `os.environ["LOCAL_RANK"]`. Both launchers set `LOCAL_RANK` in the
# environment in every torch this course supports (2.4 to 2.15), and `launch` warns that
# it is deprecated (a `FutureWarning`).
#
# This lesson runs both launchers on this very file (2 ranks, gloo, localhost) and
# compares what each rank sees.

# %%
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kit
import torch
import torch.distributed as dist

import minidp

LESSON = kit.HERE / "28_launch_vs_torchrun.py"
CLEAN = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR"]
CLEAN += ["MASTER_PORT", "TORCHELASTIC_RUN_ID"]


def parse_local_rank(argv: list[str]) -> int | None:
    """The parser a launch-era script needs: both spellings, None when absent."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    return parser.parse_known_args(argv)[0].local_rank


def worker() -> None:
    """What this file does when a launcher starts it: report what this rank sees."""
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    total = torch.tensor([dist.get_rank()])
    dist.all_reduce(total)  # the group works: 0 + 1
    report = {
        "argv": sys.argv[1:],
        "arg_local_rank": parse_local_rank(sys.argv[1:]),
        "env_local_rank": os.environ.get("LOCAL_RANK"),
        "rank": dist.get_rank(),
        "sum_of_ranks": int(total),
    }
    out = Path(os.environ["LESSON28_REPORTS"]) / f"rank{dist.get_rank()}.json"
    out.write_text(json.dumps(report))
    dist.destroy_process_group()


# %% [markdown]
# Started by a launcher, this file only reports and exits.

# %%
if __name__ == "__main__" and minidp.launch.launched_by_torchrun():
    worker()
    sys.exit(0)

# %% [markdown]
# ## 1. Both launchers, side by side (started together)

# %%
if __name__ == "__main__":
    kit.title("Lesson 28: torch.distributed.launch vs torchrun")
    has_launch = importlib.util.find_spec("torch.distributed.launch") is not None
    launchers = {"torchrun": "torch.distributed.run"}
    if has_launch:
        launchers["launch"] = "torch.distributed.launch"
    else:
        print(f"torch {torch.__version__} has no torch.distributed.launch: torchrun only")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["OMP_NUM_THREADS"] = "1"  # set, so the launchers do not print their warning about it
    procs, dirs = {}, {}
    for name, module in launchers.items():
        dirs[name] = tempfile.mkdtemp(prefix=f"lesson28-{name}-")
        cmd = [sys.executable, "-m", module, "--standalone", "--nproc-per-node", "2", str(LESSON)]
        print("$ python -m", module, "--standalone --nproc-per-node 2", LESSON.name)
        procs[name] = subprocess.Popen(
            cmd,
            env={**env, "LESSON28_REPORTS": dirs[name]},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    seen, stderr = {}, {}
    for name, proc in procs.items():
        out, stderr[name] = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{name} failed:\n{stderr[name][-2000:]}"
        seen[name] = [
            json.loads((Path(dirs[name]) / f"rank{r}.json").read_text()) for r in range(2)
        ]
        shutil.rmtree(dirs[name])  # read
    print(f"\n{'launcher':>9} {'rank':>4}  {'argv after the script':<22} {'LOCAL_RANK env':>14}")
    for name, reports in seen.items():
        for rep in reports:
            print(
                f"{name:>9} {rep['rank']:>4}  {str(rep['argv']):<22} {rep['env_local_rank']!s:>14}"
            )
    if has_launch:
        warned = "FutureWarning" in stderr["launch"]
        line = next((ln for ln in stderr["launch"].splitlines() if "deprecated" in ln), "")
        print(f"launch's warning: {line.split('FutureWarning: ')[-1].strip() or '(none)'}")

# %% [markdown]
# ## 2. The two spellings, and `--use-env`
# The command each launcher builds for a rank (`torch.distributed.run.config_from_args`,
# without starting anything); and what a parser that knows only `--local_rank` does with
# launch's argument.

# %%
if __name__ == "__main__":
    from torch.distributed import run as torchrun

    def rank_command(parser_module, extra: list[str]) -> list[str]:
        args = parser_module.parse_args([*extra, "--nproc-per-node", "2", "train.py"])
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # else config_from_args sets it here, and warns
        try:
            return torchrun.config_from_args(args)[2]
        finally:
            if before is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = before

    commands = {"torchrun": rank_command(torchrun, [])}
    if has_launch:
        from torch.distributed import launch as old_launch

        commands["launch"] = rank_command(old_launch, [])
        commands["launch --use-env"] = rank_command(old_launch, ["--use-env"])
    for name, cmd in commands.items():
        print(f"{name:>17}: python {' '.join(cmd)}")
    old_style = argparse.ArgumentParser()
    old_style.add_argument("--local_rank", type=int)
    parsed, left_over = old_style.parse_known_args(["--local-rank=0"])
    # parse_args (what scripts call) exits with "unrecognized arguments: --local-rank=0"
    old_error = f"unrecognized arguments: {' '.join(left_over)}" if left_over else ""
    print(f"a parser with only --local_rank, given --local-rank=0: {old_error}")

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    tr = seen["torchrun"]
    kit.check_true(
        "torchrun: no argument, LOCAL_RANK in the environment",
        all(rep["argv"] == [] and rep["env_local_rank"] == str(rep["rank"]) for rep in tr),
        str([(rep["argv"], rep["env_local_rank"]) for rep in tr]),
    )
    kit.check_true(
        "both launchers' groups work (0 + 1 = 1)",
        all(rep["sum_of_ranks"] == 1 for reports in seen.values() for rep in reports),
    )
    if has_launch:
        la = seen["launch"]
        kit.check_true(
            "launch: --local-rank=N as an argument, LOCAL_RANK set too",
            all(
                rep["argv"] == [f"--local-rank={rep['rank']}"]
                and rep["arg_local_rank"] == rep["rank"]
                and rep["env_local_rank"] == str(rep["rank"])
                for rep in la
            ),
            str([rep["argv"] for rep in la]),
        )
        kit.check_true("launch warns that it is deprecated (FutureWarning)", warned)
        kit.check_true(
            "launch --use-env passes no argument, like torchrun",
            commands["launch --use-env"] == commands["torchrun"]
            and any(a.startswith("--local-rank=") for a in commands["launch"]),
            str(commands),
        )
    kit.check_true(
        "a parser with only --local_rank does not recognise --local-rank=0",
        left_over == ["--local-rank=0"] and parsed.local_rank is None,
        old_error,
    )
    kit.done()
