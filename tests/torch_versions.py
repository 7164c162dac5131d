"""The torch releases docs/versions.md verifies: one list for ``noxfile.py`` and the tests.

``nox -s tests-<major.minor>`` runs the README's test command against each of them; the test
run ends with one line naming the installed torch and the newest verified one (``conftest.py``),
so a user on a newer torch knows the suite has not been run there yet.
"""

from __future__ import annotations

# The floor is pyproject's `torch>=2.4`; the last is the newest release verified in full.
TORCH_VERSIONS = ["2.4.0", "2.7.0", "2.8.0", "2.11.0", "2.13.0", "2.14.1", "2.15.0"]


def release(version: str) -> tuple[int, ...]:
    """'2.15.0+cu132' -> (2, 15, 0): comparable, local build tag dropped."""
    parts = version.split("+")[0].split(".")
    return tuple(int(p) for p in parts if p.isdigit())


def verified_line(installed: str) -> str:
    """One line for the end of a test run: the installed torch against the verified ones."""
    newest = TORCH_VERSIONS[-1]
    if release(installed)[:2] > release(newest)[:2]:
        return (
            f"torch {installed} is newer than the newest verified release ({newest}): the "
            "suite has not been run on it — a failure may be torch's change, not yours "
            "(docs/versions.md)"
        )
    verified = any(release(installed)[:2] == release(v)[:2] for v in TORCH_VERSIONS)
    return f"torch {installed}; newest verified release {newest}" + (
        "" if verified else f" (this minor release is not in the matrix: {TORCH_VERSIONS})"
    )
