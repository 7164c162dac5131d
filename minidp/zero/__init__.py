"""ZeRO: data parallelism with the model states partitioned across the ranks.

* :class:`ZeroRedundancyOptimizer` (``zero1.py``): ZeRO-1, optimizer state sharded by
  parameter, torch's partitioning rule; used beside DDP.
* ``partition.py``: who owns what (whole parameters, or dim-0 rows).
* ``checks.py``: the errors (unsupported optimizer, ranks that disagree, sparse grads).

Test: ``pytest tests/test_zero.py``
"""

from minidp.zero.zero1 import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
