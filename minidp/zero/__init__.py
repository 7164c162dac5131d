"""ZeRO: data parallelism with the model states partitioned across the ranks.

* :class:`ZeroRedundancyOptimizer` (``zero1.py``, ``bucket_view.py``): ZeRO-1, optimizer
  state sharded by whole parameters (torch's rule), beside DDP.
* :class:`Zero2Optimizer` (``zero2.py``): ZeRO-2, gradients reduce-scattered by bucketed
  hooks during backward, each rank stepping its dim-0 rows; ``zero2_layout.py`` (rows and
  buffers), ``zero2_hooks.py`` (one optimizer per parameter), ``zero2_checks.py``.
* ``partition.py`` (ZeRO-1's owners; ZeRO-2's rows: ``fsdp/shard.py``), ``checks.py``
  (errors), ``state.py`` (checkpoints in torch's format, any world size).

The book's ``minidp/textbook/zero.py`` shows both stages on one page; the memory planner
is a tool (``minidp/tools/planner``). Lessons 18-20 and 23; ``python -m minidp bench zero``.
Test: ``pytest tests/test_zero.py tests/test_zero2.py tests/test_zero2_train.py
tests/test_zero2_state.py tests/test_zero2_moves.py``
"""

from minidp.zero.zero1 import ZeroRedundancyOptimizer
from minidp.zero.zero2 import Zero2Optimizer

__all__ = ["Zero2Optimizer", "ZeroRedundancyOptimizer"]
