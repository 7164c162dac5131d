"""A grade a teacher can trust: each classic way to pass without doing the work fails, with
a report that says what was seen — exit 1 where the code is wrong (or called the answer),
2 where it reached for what decides the verdict (tampering).

Run: ``pytest tests/test_exercise_cheats.py``

Every fixture is a file in ``tests/exercise_cheats/NAME__WHAT.py``, checked through the
command itself (``main([...])``): the exit code a grading script reads is what is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minidp.tools.exercise import NAMES, find, main

CHEATS_DIR = Path(__file__).resolve().parent / "exercise_cheats"

# (exercise, fixture, exit code, what the report must say) — the eight classes
CHEATS = [
    # 1. forging the verdict: writes into the checker's pipe, exits 0 at import
    ("ring_all_reduce", "forge_verdict", 2, "said it was done with 0 of 10 cases answered"),
    # 2. reading the answer from the checker's frames
    ("ring_all_reduce", "read_expected", 2, "your file called sys._getframe"),
    # 3. changing what equality means: a tensor subclass whose torch.equal says True
    ("ring_all_reduce", "equal_lies", 2, "a torch.Tensor subclass not from torch"),
    # 4. swapping code, not names (and, the older way, names)
    ("ring_all_reduce", "swap_code", 2, "minidp.tools.exercise.spec.compare.__code__"),
    ("ring_all_reduce", "patch_reference", 2, "minidp.tools.exercise.reference.all_reduce"),
    ("ring_all_reduce", "unlinks_by_dir_fd", 2,
     "os.remove on no-such-module-of-minidp.py: code under check may not change the package"),
    # 5. calling the library's answer, or the answer key
    ("reduce_scatter", "calls_library", 1, "reduce_scatter is this exercise's answer"),
    ("all_gather", "calls_library", 1, "all_gather is this exercise's answer"),
    ("broadcast", "calls_library", 1, "minidp.textbook.collectives.broadcast is this exercise's"),
    ("hsdp_reduce", "runs_solution", 2, "the reference solutions are not available"),
    ("clip_grad_norm_shards", "runs_solution", 2, "the reference solutions are not available"),
    # 6. wrong code the data could not see: a ring adding through int8
    ("ring_all_reduce", "int8_sums", 1, "hint (fractions lost on the way)"),
    # 7. a process left running (it once held the checker's pipe for minutes)
    ("ring_all_reduce", "sleeps_after", 2, "left processes running after the check"),
    ("ring_pass", "sleeps_plain", 2, "left processes running after the check"),
    ("ring_all_reduce", "kills_checker", 2, "was killed during the check"),
    # 8. a blocking hook that returns a completed Future
    ("fp16_compress_hook", "blocking", 1, "hint (blocking all-reduce in the hook)"),
]  # fmt: skip


def _sleeps(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if words[0].endswith(b"sleep") and marker.encode() in words:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("name,what,code,says", CHEATS, ids=[f"{n}-{w}" for n, w, *_ in CHEATS])
def test_a_cheat_fails_and_the_report_says_what_was_seen(name, what, code, says, capfd):
    path = CHEATS_DIR / f"{name}__{what}.py"
    rc = main(["check", name, "--path", str(path), "--generated", "0"])
    out = capfd.readouterr().out
    assert rc == code, out
    assert says in out, out
    if code == 2:
        assert "TAMPERING" in out or "ERROR" in out
    assert "PASS" not in out.splitlines()[-1]


@pytest.mark.parametrize(
    "name,what,marker",
    [("ring_all_reduce", "sleeps_after", "300.0417"), ("ring_pass", "sleeps_plain", "300.0555")],
)
def test_nothing_the_learner_started_outlives_the_check(name, what, marker):
    """Cheat 7 once kept ``check`` from exiting for minutes: its ``sleep`` held a pipe."""
    path = CHEATS_DIR / f"{name}__{what}.py"
    assert f'MARKER = "{marker}"' in path.read_text()
    main(["check", name, "--path", str(path), "--generated", "0"])
    assert _sleeps(marker) == []


def test_every_fixture_in_the_cheats_folder_is_tested():
    on_disk = {p.stem for p in CHEATS_DIR.glob("*.py")}
    assert on_disk == {f"{n}__{w}" for n, w, *_ in CHEATS}


def test_check_all_json_grades_a_folder_of_honest_wrong_and_cheating_files(tmp_path, capfd):
    """A teacher's folder: an honest file, a wrong one, one that calls the answer, one that
    forges, one that tampers with equality: each graded as what it is."""
    files = {
        "ring_all_reduce": find("ring_all_reduce").solution,
        "ring_pass": find("ring_pass").slips[0].with_name("wrong_direction.py"),
        "reduce_scatter": CHEATS_DIR / "reduce_scatter__calls_library.py",
        "naive_all_reduce": CHEATS_DIR / "ring_all_reduce__equal_lies.py",
        "all_gather": CHEATS_DIR / "ring_all_reduce__forge_verdict.py",
    }
    for name, source in files.items():
        text = source.read_text().replace("def ring_all_reduce(", f"def {name}(")
        text = text.replace("def ring_pass(", f"def {name}(")
        (tmp_path / f"{name}.py").write_text(text)
    rc = main(["check", "--all", "--json", "--dir", str(tmp_path), "--generated", "0"])
    report = json.loads(capfd.readouterr().out)
    entries = {e["exercise"]: e for e in report["exercises"]}
    assert report["score"] == 1 and report["of"] == len(NAMES) and rc == 2
    assert (entries["ring_all_reduce"]["status"], entries["ring_all_reduce"]["exit"]) == ("pass", 0)
    assert entries["ring_all_reduce"]["passed"] == entries["ring_all_reduce"]["cases"] == 10
    assert (entries["ring_pass"]["status"], entries["ring_pass"]["exit"]) == (
        "fail: wrong direction", 1)  # fmt: skip
    assert (entries["reduce_scatter"]["status"], entries["reduce_scatter"]["exit"]) == (
        "fail: called the answer", 1)  # fmt: skip
    for cheat in ("naive_all_reduce", "all_gather"):
        assert (entries[cheat]["status"], entries[cheat]["exit"]) == ("tampering", 2)
        assert entries[cheat]["tamper"], entries[cheat]
    assert "subclass not from torch" in entries["naive_all_reduce"]["tamper"][0]
    assert entries["broadcast"]["status"] == "missing"


def test_a_check_run_from_inside_the_lessons_folder_passes_the_solution():
    """A learner in ``lessons/``: the checker's own clean-up (``shutil.rmtree`` of its rank
    folder, entries removed by names relative to the folder) is not the learner writing into
    the lessons (it was judged against the working directory once, and refused)."""
    lessons = find("no_sync_accumulation").solution.parents[1]
    cmd = [sys.executable, "-m", "minidp", "exercise", "check", "no_sync_accumulation",
           "--path", "solutions/no_sync_accumulation.py", "--generated", "0"]  # fmt: skip
    out = subprocess.run(cmd, cwd=lessons, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "TAMPERING" not in out.stdout, out.stdout[-3000:] + out.stderr
