"""Layers whose behaviour changes when the batch is split across ranks: :class:`SyncBatchNorm`.

Test: ``pytest tests/test_sync_batchnorm.py``
"""

from minidp.nn.sync_batchnorm import SyncBatchNorm

__all__ = ["SyncBatchNorm"]
