"""minidp — data parallelism from scratch, checked against PyTorch.

Three shelves: the book (``minidp.textbook``, one short page per idea, read in order), the
engine (``comm``, ``launch``, ``dp``, ``ddp``, ``zero``, ``fsdp``, ``nn``, ``trace``: the
torch-faithful library) and the tools (``minidp.tools``: ``python -m minidp ...``).

Start: ``python -m minidp demo ring``; test: ``pytest``.
"""

from minidp import comm, launch

__version__ = "0.1.0"

# The wrappers are imported on first use, so ``import minidp`` stays light and the
# packages do not import each other at start-up.
_LAZY = {
    "DataParallel": "minidp.dp",
    "DistributedDataParallel": "minidp.ddp",
    "DistributedSampler": "minidp.ddp",
    "SyncBatchNorm": "minidp.nn",
    "CPUOffloadPolicy": "minidp.fsdp",
    "FSDPModule": "minidp.fsdp",
    "MixedPrecisionPolicy": "minidp.fsdp",
    "OffloadPolicy": "minidp.fsdp",
    "fully_shard": "minidp.fsdp",
    "register_fsdp_forward_method": "minidp.fsdp",
    "init_device_mesh": "minidp.comm.mesh",
    "ZeroRedundancyOptimizer": "minidp.zero",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'minidp' has no attribute {name!r}")


__all__ = [
    "CPUOffloadPolicy",
    "DataParallel",
    "DistributedDataParallel",
    "DistributedSampler",
    "FSDPModule",
    "MixedPrecisionPolicy",
    "OffloadPolicy",
    "SyncBatchNorm",
    "ZeroRedundancyOptimizer",
    "comm",
    "fully_shard",
    "init_device_mesh",
    "launch",
    "register_fsdp_forward_method",
]
