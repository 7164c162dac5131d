"""ZeRO: data parallelism with the model states partitioned across the ranks.

* :class:`ZeroRedundancyOptimizer` (``zero1.py``): ZeRO-1, optimizer state sharded by
  parameter, torch's partitioning rule; used beside DDP.
* :class:`Zero2Optimizer` (``zero2.py``): ZeRO-2, gradients reduce-scattered by bucketed
  hooks during backward, each rank keeping and stepping only its dim-0 rows;
  ``zero2_layout.py`` (who holds which rows, bucket buffers), ``zero2_hooks.py`` (weak
  gradient hooks, one optimizer per parameter), ``zero2_state.py`` (checkpoints in
  torch's format, any world size), ``zero2_checks.py`` (what it refuses: optimizers that
  are not element-wise, loops that would train wrongly). A freed ``.grad`` is a DTensor of
  this rank's rows, as FSDP2's (``minidp.fsdp.dtensor``).
* The idea in one page: the book's ``minidp/textbook/zero.py`` (both stages after backward,
  one call per parameter).
* ``partition.py``: who owns what (whole parameters, or dim-0 rows).
* ``checks.py``: the errors (unsupported optimizer, ranks that disagree, sparse grads).
* ``objects.py``: a Python object (a state dict) broadcast over minidp's collectives.

The bytes each stage holds and sends, and the planner for real models, are tools:
``minidp/tools/planner``. Lessons 18-20 and 23; measure: ``python -m minidp bench zero``.
Test: ``pytest tests/test_zero.py tests/test_zero2.py tests/test_zero2_train.py
tests/test_zero2_state.py tests/test_zero2_moves.py``
"""

from minidp.zero.zero1 import ZeroRedundancyOptimizer
from minidp.zero.zero2 import Zero2Optimizer

__all__ = ["Zero2Optimizer", "ZeroRedundancyOptimizer"]
