"""FSDP (ZeRO-3): every parameter, gradient and optimizer state sharded across the ranks.

:func:`fully_shard` (``wrap.py``) makes a module one unit, as FSDP2's (``unit.py``: its
shards and collectives; ``root.py``: the schedule; ``controls.py``: FSDP2's methods;
``dtensor.py``, ``shard.py``, ``reduce.py``, ``policy.py``, ``state.py``). The DTensors only
describe the shards, so torch's APIs (``full_tensor()``, ``clip_grad_norm_``, DCP) work as
on FSDP2's. The book (``minidp/textbook/fsdp.py``, ``hsdp.py``) has no units or prefetch.

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_dtensor.py`` (against FSDP2, torch >= 2.8)
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
