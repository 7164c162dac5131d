"""FSDP (ZeRO-3): every parameter, gradient and optimizer state sharded across the ranks.

:func:`fully_shard` (``wrap.py``) makes a module, or a list of modules, one unit, as
FSDP2's (``unit.py`` and ``grads.py``: its shards and collectives; ``layout.py``: how each
parameter is cut and described; ``root.py`` and ``hooks.py``: the schedule;
``controls.py``: FSDP2's methods; ``introspect.py``: ``fully_shard.state(m)``;
``collectives.py``, ``dtensor.py``, ``shard.py``, ``reduce.py``, ``policy.py``,
``state.py``). The DTensors only describe the shards, so torch's APIs (``full_tensor()``,
``clip_grad_norm_``, DCP) work as on FSDP2's. The book (``minidp/textbook/fsdp.py``,
``hsdp.py``) has no units or prefetch.

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_dtensor.py`` (against FSDP2, torch >= 2.8)
"""

from minidp.fsdp.controls import FSDPModule, UnshardHandle
from minidp.fsdp.policy import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from minidp.fsdp.state import full_state_dict, load_full_state_dict, sharded_bytes, traffic
from minidp.fsdp.wrap import fully_shard, register_fsdp_forward_method, unit_of

__all__ = [
    "CPUOffloadPolicy",
    "FSDPModule",
    "MixedPrecisionPolicy",
    "OffloadPolicy",
    "UnshardHandle",
    "full_state_dict",
    "fully_shard",
    "load_full_state_dict",
    "register_fsdp_forward_method",
    "sharded_bytes",
    "traffic",
    "unit_of",
]
