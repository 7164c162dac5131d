"""The tools beside the library: the ``python -m minidp ...`` commands and what they share.

``bench/`` (benchmarks against torch's components, with verdicts and spreads), ``demo/``
(classroom demos in the terminal), ``diagrams/`` (the pictures in ``diagrams/``),
``classroom/`` (a browser page), all showing runs of ``recorder/``; ``planner/`` (memory per
GPU, measured and planned); ``exercise/`` (the checker of the learners' exercises). The
library never imports anything here (``tests/test_imports.py``).

Run: ``python -m minidp --help``
"""
