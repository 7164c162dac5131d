"""FSDP (ZeRO-3): every parameter, gradient and optimizer state sharded across the ranks.

* :func:`fully_shard` — make a module one FSDP unit (submodules first, then the root),
  like ``torch.distributed.fsdp.fully_shard``: its parameters become DTensor shards at
  once (``dtensor.py``), its class ``FSDP<Class>`` (:class:`FSDPModule`, FSDP2's methods:
  ``controls.py``); ``wrap.py`` (the call), ``unit.py`` (one unit's shards and
  collectives), ``root.py`` (the schedule: prefetch, reduce-scatter), ``shard.py`` (dim-0
  chunks with padding), ``reduce.py`` (the reduce-scatter in gloo's order), ``policy.py``
  (:class:`MixedPrecisionPolicy`).
* The idea in one page, to read first: the book's ``minidp/textbook/fsdp.py`` (the same
  dim-0 shards, no units, no prefetch, no DTensor) and ``hsdp.py``.
* :func:`full_state_dict` / :func:`load_full_state_dict` — the unsharded parameters by
  name (a collective), and back; :func:`sharded_bytes` — what this rank holds;
  :func:`traffic` — what its collectives moved.

Built only on ``minidp.comm``'s all-gather and reduce-scatter (send/recv underneath); the
DTensors only describe the shards. So torch's own APIs work on the model as on FSDP2's:
``p.full_tensor()``, ``clip_grad_norm_`` (global norm), and checkpoints with
``torch.distributed.checkpoint`` (``get_model_state_dict``/``get_optimizer_state_dict``,
``dcp.save``/``dcp.load``, full or sharded, any world size).

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_dtensor.py`` (against FSDP2 on a gloo
CPU mesh, torch >= 2.8).
"""

from minidp.fsdp.controls import FSDPModule, UnshardHandle
from minidp.fsdp.policy import MixedPrecisionPolicy
from minidp.fsdp.state import full_state_dict, load_full_state_dict, sharded_bytes, traffic
from minidp.fsdp.wrap import fully_shard, unit_of

__all__ = [
    "FSDPModule",
    "MixedPrecisionPolicy",
    "UnshardHandle",
    "full_state_dict",
    "fully_shard",
    "load_full_state_dict",
    "sharded_bytes",
    "traffic",
    "unit_of",
]
