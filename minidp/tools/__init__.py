"""The tools beside the library: the ``python -m minidp ...`` commands and what they share.

* ``bench/`` — benchmarks against torch's components, with verdicts and spreads;
* ``demo/`` — classroom demos in the terminal (ring, DataParallel, DDP);
* ``diagrams/`` — the pictures in ``diagrams/``, from real traced runs;
* ``classroom/`` — real runs recorded and stepped through in a browser page;
* ``planner/`` — memory per GPU for DDP / ZeRO / FSDP, measured and planned;
* ``exercise`` (``minidp/tools/exercise``) — the checker of the learners' exercises.

The library (the book in ``minidp/textbook`` and the engine: every other package) never
imports anything here; ``tests/test_imports.py`` reads the import graph and fails if it did.

Run: ``python -m minidp --help``
"""
