"""Every exercise, in course order: name, lesson, what the learner writes — without importing
any spec: :func:`find` imports the one checked (``specs/NAME.py``). A new exercise is a row."""

import dataclasses
import difflib
import importlib

from minidp.tools.exercise.spec import STUBS, Exercise

TABLE = """
scatter                02  cut a batch (and every tensor argument) into one chunk per device
gather                 02  concatenate the replicas' outputs, in device order, along dim
data_parallel_step     03  one DataParallel step: scatter, replicate, threads, gather, gradients
ring_pass              06  shift by one: send your tensor to rank-1, return the one from rank+1
naive_all_reduce       07  parameter server: every rank sends to rank 0, which sums, sends back
ring_all_reduce        08  textbook ring all-reduce: reduce-scatter loop, then all-gather loop
reduce_scatter         08  reduce-scatter: rank r ends with input_list[r] summed over all ranks
all_gather             09  all_gather: tensor_list[i] = rank i's tensor, on every rank
broadcast              09  broadcast: every rank ends with rank src's tensor, in place
average_metric         09  the mean of a metric over every sample, ranks holding other counts
average_gradients      10  DDP's job after backward: every .grad becomes its average over ranks
bucketed_ddp           11  DDP with hooks: buckets last layer first, all-reduced during backward
distributed_sampler    12  this rank's indices for an epoch: shared shuffle (seed + epoch), pad
no_sync_accumulation   13  accumulate K micro-batches with ddp.no_sync(): one all-reduce, not K
checkpoint             15  save model + optimizer on rank 0, barrier, load everywhere (map_location)
fsdp_unit              21  one FSDP unit: all-gather shards, forward, backward, reduce-scatter grads
zero1_step             19  ZeRO-1's step: average the grads, step what you own, broadcast it
reduce_scatter_grad    20  ZeRO-2's gradient hook: keep your piece of the averaged gradient
bucket_assignment      11  DDP's rebuilt buckets: last parameter first, per dtype, close at >= cap
zero1_partition        19  ZeRO-1's owners: largest parameter first, to the least loaded rank
sync_batchnorm_stats   24  SyncBatchNorm's statistics: global mean and biased variance, uneven x
clip_grad_norm_shards  32  clip_grad_norm_ on sharded gradients: the global norm, one clip factor
hsdp_reduce            37  HSDP's gradient: reduce-scatter in the shard group, all-reduce replicas
fp16_compress_hook     22  a DDP comm hook: all-reduce each bucket in float16, divide first
"""
EXERCISES = tuple(  # (name, lesson, what you write); the lesson is lessons/NN_*.py
    (name, next(STUBS.parent.glob(f"{nn}_*.py")).stem, summary)
    for name, nn, summary in (row.split(None, 2) for row in TABLE.strip().splitlines())
)
NAMES = tuple(name for name, _, _ in EXERCISES)


def find(name: str) -> Exercise:
    """The exercise called ``name`` (its spec imported now), or a ValueError listing the names."""
    row = next((r for r in EXERCISES if r[0] == name), None)
    if row is None:
        close = difflib.get_close_matches(str(name), NAMES, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"no exercise {name!r} — expected one of: {', '.join(NAMES)}.{hint}")
    spec = importlib.import_module(f"minidp.tools.exercise.specs.{name}").EXERCISE
    return dataclasses.replace(spec, name=name, lesson=row[1], summary=row[2])
