"""Every exercise, in course order: the one list the CLI, the checker and the tests read.

Add an exercise with a one-line edit here (see ``minidp/tools/exercise/__init__.py``).

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import difflib

from minidp.tools.exercise import (
    bucket_assignment,
    clip_grad_norm_shards,
    comm_metrics,
    comm_p2p,
    comm_ring,
    ddp_buckets,
    ddp_grads,
    ddp_loop,
    ddp_no_sync,
    dp_split,
    dp_step,
    fp16_compress_hook,
    fsdp_unit,
    hsdp_reduce,
    sync_batchnorm_stats,
    zero1_partition,
    zero_hook,
    zero_step,
)
from minidp.tools.exercise.spec import Exercise

EXERCISES: tuple[Exercise, ...] = (
    dp_split.SCATTER,
    dp_split.GATHER,
    dp_step.DATA_PARALLEL_STEP,
    comm_p2p.RING_PASS,
    comm_p2p.NAIVE_ALL_REDUCE,
    comm_ring.RING_ALL_REDUCE,
    comm_ring.REDUCE_SCATTER,
    comm_metrics.ALL_GATHER,
    comm_metrics.BROADCAST,
    comm_metrics.AVERAGE_METRIC,
    ddp_grads.AVERAGE_GRADIENTS,
    ddp_buckets.BUCKETED_DDP,
    ddp_loop.DISTRIBUTED_SAMPLER,
    ddp_no_sync.NO_SYNC_ACCUMULATION,
    ddp_loop.CHECKPOINT,
    fsdp_unit.FSDP_UNIT,
    zero_step.ZERO1_STEP,
    zero_hook.REDUCE_SCATTER_GRAD,
    bucket_assignment.BUCKET_ASSIGNMENT,
    zero1_partition.ZERO1_PARTITION,
    sync_batchnorm_stats.SYNC_BATCHNORM_STATS,
    clip_grad_norm_shards.CLIP_GRAD_NORM_SHARDS,
    hsdp_reduce.HSDP_REDUCE,
    fp16_compress_hook.FP16_COMPRESS_HOOK,
)


def find(name: str) -> Exercise:
    """The exercise called ``name``, or a ValueError listing the names."""
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    names = [e.name for e in EXERCISES]
    close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"no exercise {name!r} — expected one of: {', '.join(names)}.{hint}")
