"""Every fault and bad input a reliability review found: each ends in a clear error (or the
result torch gives), without a hang and with nothing left behind.

The catalog (``fault_catalog.py``): six rows a class can watch, then ``fault_cases.py``,
``fault_cases_launch.py`` and ``fault_cases_comm.py``. Each row runs in a fresh world
through ``fault_runner.py``, which
times it, names the root cause and counts the processes and rank threads left over.
About three minutes on 2 cores (a fresh world per row, several stalls of a 2 s timeout by
design), so it is marked ``slow``; ``tests/test_faults.py`` and
``tests/test_reliability_*.py`` check the same behaviours in the default run.

Run: ``pytest -m slow tests/test_fault_catalog.py`` (``-k WORD`` picks rows by name)
"""

from __future__ import annotations

import pytest
from fault_catalog import CATALOG, silent_pairing
from fault_runner import run_fault

NO_ERROR = ("no error (like torch)", "clear:")  # rows whose right outcome is no exception


def test_the_catalog_names_each_row_once():
    names = [f.name for f in CATALOG]
    assert len(names) == len(set(names)) and len(names) > 40, len(names)


@pytest.mark.slow
@pytest.mark.parametrize("fault", CATALOG, ids=lambda f: f.name)
def test_every_fault_ends_clearly_without_a_hang_or_leftovers(fault):
    outcome = run_fault(fault)
    assert not outcome.hung and outcome.leftovers == 0, outcome
    if fault.on_success is silent_pairing:  # plain mode: what checked mode refuses
        assert outcome.verdict.startswith("no error, WRONG RESULT"), outcome.verdict
        return
    clear = outcome.verdict == "clear" or outcome.verdict.startswith(NO_ERROR)
    assert clear, f"{fault.name}: {outcome.verdict} — {outcome.first_line}"
