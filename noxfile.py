"""The torch version matrix: the README's test command in a fresh environment per torch release.

    pip install nox uv                 # uv makes the environments (falls back to virtualenv)
    nox -l                             # the sessions: tests-2.4, tests-2.7, ... tests-2.15
    nox -s tests-2.4                   # one version (first run downloads torch: minutes)
    nox -s tests-2.4 -- -x tests/test_buckets.py   # arguments after -- go to pytest
    nox -s summary                     # docs/versions.md's table: one row per version run

Run the versions one at a time (`nox -s tests-2.4 tests-2.7 ...` runs them in turn): each suite
uses every core it is given, and two at once only make both slow. Environments are kept in .nox/
and reused; the download cache is uv's (or pip's) usual one, shared by all versions.

Why nox: it is the usual tool for "the same tests against several versions of a dependency",
it is plain Python, and it does not need the project to change its packaging. Each session pins
only torch; everything else resolves as a learner's `pip install -e ".[dev]"` would.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import nox

# The releases docs/versions.md promises, kept in one list with the tests (the test run names the
# newest of them); the floor is pyproject's `torch>=2.4`.
sys.path.insert(0, str(pathlib.Path(__file__).parent / "tests"))
from torch_versions import TORCH_VERSIONS  # noqa: E402

RESULTS = pathlib.Path(".nox") / "results"  # one JSON per version, read by `summary`

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests-2.13"]  # plain `nox` runs the default version, like CI


def _short(version: str) -> str:
    """'2.14.1' -> '2.14': the session name a person types."""
    return ".".join(version.split(".")[:2])


def _counts(junit: pathlib.Path) -> dict[str, int]:
    """passed/failed/skipped from pytest's JUnit XML (errors count as failed)."""
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    return {"passed": total - skipped - failed, "failed": failed, "skipped": skipped}


def _make_tests_session(version: str):
    def tests(session: nox.Session) -> None:
        # uv does not compile .pyc files by default (pip does): where PYTHONDONTWRITEBYTECODE
        # is set, every process then compiles torch's Python again at import — measured:
        # the suite took twice as long (9:43 against 5:00 for the same tests)
        session.install(f"torch=={version}", "-e", ".[dev]", env={"UV_COMPILE_BYTECODE": "1"})
        installed = session.run(
            "python", "-c", "import torch; print(torch.__version__)", silent=True
        )
        if installed is None:  # `nox --install-only`: environments made, nothing run
            return
        installed = installed.strip()
        RESULTS.mkdir(parents=True, exist_ok=True)
        junit = RESULTS / f"torch-{version}.xml"
        junit.unlink(missing_ok=True)  # a run that dies leaves none: not last time's
        # Exactly the README's command; extra pytest arguments may follow `--`. Every exit
        # code is let through so that a crash is recorded too.
        session.run(
            "python",
            "-m",
            "pytest",
            f"--junitxml={junit}",
            *session.posargs,
            success_codes=range(-64, 256),
        )
        row = {
            "version": installed,
            "date": datetime.date.today().isoformat(),
            "commit": _commit(),
            "args": " ".join(session.posargs),
        }
        row.update(_counts(junit) if junit.exists() else {"crashed": True})
        (RESULTS / f"torch-{version}.json").write_text(json.dumps(row))
        session.log(_row(row))
        if row.get("crashed") or row["failed"]:
            session.error(f"torch {installed}: {_row(row)}")

    tests.__doc__ = f"python -m pytest with torch=={version}"
    return nox.session(name=f"tests-{_short(version)}")(tests)


for _version in TORCH_VERSIONS:
    _make_tests_session(_version)


def _commit() -> str:
    """The tested commit, short, with "+changes" when the working tree differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    return (git("rev-parse", "--short", "HEAD") or "?") + (
        "+changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def _row(row: dict) -> str:
    if row.get("crashed"):
        result = "FAIL: pytest died before the end (no report; run it to see where)"
    else:
        result = "pass" if row["failed"] == 0 else "FAIL"
        result += f": {row['passed']} passed, {row['failed']} failed, {row['skipped']} skipped"
    scope = f" (`{row['args']}`)" if row["args"] else ""
    return f"| {row['version']} | {result}{scope} | {row['date']} | {row.get('commit', '?')} |"


@nox.session(python=False)
def summary(session: nox.Session) -> None:
    """Print docs/versions.md's table from the last run of each version."""
    print("| torch | result (`python -m pytest`) | date | commit |")
    print("| --- | --- | --- | --- |")
    for version in TORCH_VERSIONS:
        path = RESULTS / f"torch-{version}.json"
        if path.exists():
            print(_row(json.loads(path.read_text())))
        else:
            print(f"| {version} | not run: `nox -s tests-{_short(version)}` | | |")
