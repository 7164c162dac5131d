"""ZeRO: data parallelism with the model states partitioned across the ranks.

* :class:`ZeroRedundancyOptimizer` (``zero1.py``): ZeRO-1, optimizer state sharded by
  parameter, torch's partitioning rule; used beside DDP.
* :class:`Zero2Optimizer` (``zero2.py``): ZeRO-2, gradients reduce-scattered by bucketed
  hooks during backward, each rank keeping and stepping only its dim-0 rows.
* ``textbook.py``: both stages in a few lines each, after backward, one call per parameter.
* ``partition.py``: who owns what (whole parameters, or dim-0 rows).
* ``checks.py``: the errors (unsupported optimizer, ranks that disagree, sparse grads).

Test: ``pytest tests/test_zero.py``
"""

from minidp.zero.zero1 import ZeroRedundancyOptimizer
from minidp.zero.zero2 import Zero2Optimizer

__all__ = ["Zero2Optimizer", "ZeroRedundancyOptimizer"]
