"""Pickling a DDP model (``torch.save(ddp)``, ``copy.deepcopy``) as torch's allows it.

Test: ``pytest tests/test_ddp_save.py``

torch pickles a DDP only over the default group: the state leaves out the group, the
reducer and the logger (threads, autograd hooks, sockets), and loading takes the default
group again and builds a fresh reducer — without a broadcast, and without a comm hook,
as torch's loaded DDP.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist


def default_group():
    """The group ``init_process_group`` made (None without one, or in a thread world)."""
    return dist.group.WORLD if dist.is_initialized() else None


def getstate(ddp) -> dict:
    """``ddp.__dict__`` without its live parts; refused, as torch's, off the default group."""
    if ddp.process_group is not default_group():
        raise ddp.logger.error(
            RuntimeError,
            "DDP Pickling/Unpickling are only supported when using DDP with the default "
            "process group. That is, when you have called init_process_group and have not "
            "passed process_group argument to DDP constructor. Hint: save the module's "
            "state_dict() (ddp.module.state_dict()) instead",
        )
    state = dict(ddp.__dict__)
    for live in ("process_group", "reducer", "logger"):  # threads, hooks, the group
        del state[live]
    return state


def setstate(ddp, state: dict, module_setstate: Callable[[dict], None]) -> None:
    """A loaded DDP: the default group, a fresh reducer (no broadcast: torch's neither)."""
    state["process_group"] = default_group()
    if state["process_group"] is None:
        raise RuntimeError(
            "DistributedDataParallel: loading a pickled DDP needs the default process "
            "group, and there is none. Hint: call torch.distributed.init_process_group(...) "
            "before torch.load"
        )
    module_setstate(state)  # nn.Module's own
    ddp._build_reducer()  # without a comm hook: torch's loaded DDP has none either
    ddp.reducer.install()
