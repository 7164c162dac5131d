"""ZeRO-1: each rank keeps the optimizer state of only its share of the parameters.

Use it like ``torch.distributed.optim.ZeroRedundancyOptimizer``, beside DDP::

    model = minidp.DistributedDataParallel(net)
    opt = minidp.ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
    loss_fn(model(x), y).backward()      # DDP: every rank gets the whole averaged gradient
    opt.step()                           # update my share, then broadcast it to the others

Every DDP rank computes the same update, so all keeping Adam's state is redundant. Rank
``r`` steps only the parameters it owns (``partition.partition_parameters``, torch's rule)
with the real optimizer (``self.optim``), then every owner broadcasts its parameters, all
in flight together (``comm.broadcast_many``). ``Joinable``, as torch's, for uneven inputs.

Against torch (``tests/test_zero.py``): ``torch.equal`` to torch's optimizer + DDP after
every step at 2, 3 and 4 ranks. Traffic: DDP's plus ``(W-1)/W`` of the parameters per rank.
The book (``minidp/textbook/zero.py``) leaves out Join, checkpoints and bucket views.

Run: ``python lessons/19_zero1.py``; test: ``pytest tests/test_zero.py
tests/test_zero1_interface.py tests/test_zero1_join.py``
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from minidp.comm import group as groups
from minidp.comm.broadcasts import broadcast_many
from minidp.zero import checks
from minidp.zero.bucket_view import build_buckets, trainable_mask
from minidp.zero.partition import partition_parameters
from minidp.zero.state import (
    check_consolidated,
    check_groups,
    consolidate,
    copy_options,
    indexed_groups,
)

WHO = "ZeroRedundancyOptimizer"


class ZeroRedundancyOptimizer(torch.optim.Optimizer, Joinable):
    """Shard ``optimizer_class``'s state across the ranks of ``process_group`` (ZeRO-1).

    Args:
        params: parameters or parameter groups, the same on every rank.
        optimizer_class: e.g. ``torch.optim.AdamW``; built on this rank's share only.
        process_group: the data-parallel group; ``None``: the current/default group.
        parameters_as_bucket_view: owners' parameters as views of one tensor (``bucket_view.py``).
        overlap_with_ddp: only ``False``; ``True`` raises (``checks.check_no_overlap``; on
            gloo in torch's words, as its ``hook_with_zero_step`` refuses it there).
        **defaults: the optimizer's options (``lr=...``).

    Attributes:
        optim: the local optimizer (this rank's parameters and state).
    """

    def __init__(
        self,
        params: Iterable,
        optimizer_class: type[torch.optim.Optimizer],
        process_group: Any = None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        **defaults: Any,
    ) -> None:
        checks.check_optimizer_class(WHO, optimizer_class)  # a refusal leaves params unread
        params = checks.param_list(WHO, params)
        checks.check_no_overlap(WHO, overlap_with_ddp, process_group)
        self._initialized = False
        super().__init__(params, defaults)
        Joinable.__init__(self)  # the join config: off until a Join context sets it
        checks.check_dense(WHO, self._all_params)
        self.process_group = groups.resolve(process_group)
        self.rank, self.world_size = self.process_group.rank(), self.process_group.size()
        checks.verify_same_parameters(WHO, self.process_group, self.param_groups)
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._buckets: list[tuple[int, torch.Tensor]] = []  # (owner, flat bucket), if views
        self._partition()
        self.optim = optimizer_class(self._partitions[self.rank], **defaults)
        copy_options(self.optim.param_groups, self.param_groups)  # the class's own defaults
        self._build_buckets()
        self._all_state_dicts: list[dict] = []
        self._initialized = True

    # -- who owns what --------------------------------------------------------------
    @property
    def _all_params(self) -> list[torch.Tensor]:
        """Every parameter, in group order: a list, as torch's attribute of this name is."""
        return [p for g in self.param_groups for p in g["params"]]

    def _partition(self) -> None:
        self._partitions = partition_parameters(self.param_groups, self.world_size)
        self._owner = {
            p: r for r, gs in enumerate(self._partitions) for g in gs for p in g["params"]
        }
        self._layout = _fingerprint(self.param_groups)

    def owned_parameters(self, rank: int | None = None) -> list[torch.Tensor]:
        """The parameters ``rank`` (default: this one) updates, in its optimizer's order."""
        rank = self.rank if rank is None else rank
        return [p for g in self._partitions[rank] for p in g["params"]]

    def add_param_group(self, param_group: dict) -> None:
        """Add a group on every rank; old parameters keep their owners (the rule is greedy)."""
        super().add_param_group(param_group)
        if self._initialized:
            self._partition()
            self.optim.add_param_group(self._partitions[self.rank][-1])
            self._build_buckets()  # the new parameters join their owners' buckets

    def _build_buckets(self) -> None:
        """With ``parameters_as_bucket_view``: (re)point the parameters into flat buckets."""
        if self.parameters_as_bucket_view:
            owned = [self.owned_parameters(r) for r in range(self.world_size)]
            self._buckets = build_buckets(owned)
        self._trainable = trainable_mask(self._all_params)

    # -- the step ---------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step this rank's share with the local optimizer, then broadcast every share."""
        # Under Join: "I am still training" (a no-op unless this is the first joinable).
        Join.notify_join_context(self)
        if _fingerprint(self.param_groups) != self._layout:
            raise RuntimeError(
                f"{WHO}: expected the parameter groups built at construction, but they were "
                "changed outside the optimizer (a parameter added, removed or reshaped), so the "
                "shards are out of date. Hint: use add_param_group(...) on every rank, or "
                "build a new optimizer"
            )
        checks.check_dense_grads(WHO, self._all_params)
        if trainable_mask(self._all_params) != self._trainable:
            self._build_buckets()  # a frozen parameter must leave its bucket (and vice versa)
        copy_options(self.param_groups, self.optim.param_groups)  # e.g. an LR scheduler's lr
        if closure is None:
            loss = self.optim.step(**kwargs)
        else:
            with torch.enable_grad():
                loss = self.optim.step(closure=closure, **kwargs)
        copy_options(self.optim.param_groups, self.param_groups)
        self._broadcast_shards()
        return loss

    def _broadcast_shards(self) -> None:
        """Each owner sends its updated parameters to all, in one ``broadcast_many`` (torch's
        layout: a broadcast per parameter, or per bucket with ``parameters_as_bucket_view``)."""
        if self.parameters_as_bucket_view:  # the parameters alias the buckets
            tensors, owners = [b for _, b in self._buckets], [o for o, _ in self._buckets]
        else:
            tensors, owners = [], []
            for owner in range(self.world_size):  # frozen ones too, as torch: a user may
                params = self.owned_parameters(owner)  # have set a .grad the owner stepped on
                tensors += [p.detach() for p in params]
                owners += [owner] * len(params)
        broadcast_many(tensors, owners, self.process_group)

    # -- uneven inputs: torch's Join ----------------------------------------------------
    def join_hook(self, **kwargs: Any) -> JoinHook:
        """The hook ``Join`` runs on a rank that ran out of inputs (no options, like torch)."""
        return _ZeroJoinHook(self)

    @property
    def join_device(self) -> torch.device:
        """Where Join's own "still training?" all-reduces run: the parameters' device."""
        return self._all_params[0].device

    @property
    def join_process_group(self) -> Any:
        """The group Join counts the ranks still training in: this optimizer's."""
        return self.process_group

    # -- checkpoints --------------------------------------------------------------------
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect every rank's optimizer state on rank ``to`` (call on every rank)."""
        consolidate(self, to)

    def state_dict(self) -> dict:
        """The whole optimizer's state, in torch's format (after ``consolidate_state_dict``)."""
        check_consolidated(self, WHO)
        index = {p: i for i, p in enumerate(self._all_params)}
        state = {}
        for rank, local in enumerate(self._all_state_dicts):
            for local_i, p in enumerate(self.owned_parameters(rank)):
                if local_i in local["state"]:
                    state[index[p]] = local["state"][local_i]
        groups_out = indexed_groups(self.param_groups, lambda p: True)
        return {"state": dict(sorted(state.items())), "param_groups": groups_out}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()``: each rank keeps only the state of parameters it owns."""
        saved = state_dict["param_groups"]
        check_groups(WHO, saved, [len(g["params"]) for g in self.param_groups])
        all_params = self._all_params
        local_index = {p: i for i, p in enumerate(self.owned_parameters())}
        state = {}
        for i, value in state_dict["state"].items():
            p = all_params[int(i)]
            if self._owner[p] == self.rank:  # a copy: the caller's dict may be live state
                state[local_index[p]] = copy.deepcopy(value)
        copy_options(saved, self.param_groups)
        local_groups = []
        for g, local in zip(self.param_groups, self.optim.param_groups):
            entry = {k: v for k, v in g.items() if k != "params"}
            entry["params"] = [local_index[p] for p in local["params"]]
            local_groups.append(entry)
        self.optim.load_state_dict({"state": state, "param_groups": local_groups})


class _ZeroJoinHook(JoinHook):
    """A joined rank still steps (on the gradients it holds, as torch's) and broadcasts."""

    def __init__(self, zero: ZeroRedundancyOptimizer) -> None:
        super().__init__()
        self.zero = zero

    def main_hook(self) -> None:
        self.zero.step()


def _fingerprint(param_groups: list[dict]) -> list[list[tuple]]:
    return [[(id(p), tuple(p.shape)) for p in g["params"]] for g in param_groups]
