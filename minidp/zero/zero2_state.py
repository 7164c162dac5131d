"""ZeRO-2 checkpoints: per-rank row shards of optimizer state <-> torch's whole-tensor format.

A rank's local optimizer holds state for its rows of every trainable parameter (its
``Piece.shard``, shape ``(rows_r, *p.shape[1:])``). The saved format is the one a plain
``torch.optim`` optimizer (and torch's consolidated ``ZeroRedundancyOptimizer``) writes —
``{"state": {param index: {key: whole tensor or scalar}}, "param_groups": [...]}`` — so a
checkpoint does not depend on the world size: save at ``W`` ranks, load at ``W'``.

* :func:`gather_state` (on the saving rank): per-element state (a tensor shaped like the
  rank's shard; shards always have a dim 0) is concatenated over the ranks along dim 0;
  anything else (Adam's 0-d ``step``, ``None``) is the same on every rank: rank 0's.
* :func:`slice_state` (on every rank): a tensor shaped like the whole parameter is cut to
  this rank's rows. A 0-d parameter's state is also 0-d, so there the key decides: every
  key but ``"step"`` is per-element (true of SGD, Adam and AdamW).

* :func:`consolidate`, :func:`full_state`, :func:`load`: ``Zero2Optimizer``'s
  ``consolidate_state_dict``, ``state_dict`` and ``load_state_dict``, built on the two.

Test: ``pytest tests/test_zero2_state.py``
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from minidp.zero.objects import broadcast_object
from minidp.zero.zero2_layout import Piece, as_rows


def gather_state(
    pieces: list[Piece], per_rank: list[dict], index: dict[int, int]
) -> dict[int, dict]:
    """Whole-tensor state by global parameter index from every rank's local ``state_dict``.

    ``pieces``: in the local optimizers' parameter order (the same on every rank);
    ``index``: ``id(param)`` -> global index; ``per_rank[r]``: rank r's ``state_dict()``.
    """
    out: dict[int, dict] = {}
    for local_i, piece in enumerate(pieces):
        if local_i not in per_rank[0]["state"]:
            continue  # never stepped (no state yet): like torch, leave it out
        p, whole = piece.param, {}
        for key, value in per_rank[0]["state"][local_i].items():
            if torch.is_tensor(value) and value.dim() > 0:
                rows = [per_rank[r]["state"][local_i][key] for r in range(len(per_rank))]
                whole[key] = torch.cat(rows, dim=0).reshape(p.shape)
            else:
                whole[key] = value  # (e.g. ``step``) equal on every rank
        out[index[id(p)]] = whole
    return dict(sorted(out.items()))


def slice_state(piece: Piece, rank: int, state: dict) -> dict:
    """This rank's rows of one parameter's whole-tensor state (a copy: the caller keeps theirs)."""
    p, start, stop = piece.param, *piece.ranges[rank]
    mine = {}
    for key, value in state.items():
        per_element = (
            torch.is_tensor(value)
            and tuple(value.shape) == tuple(p.shape)
            and (p.dim() > 0 or key != "step")
        )
        if per_element:
            mine[key] = as_rows(value)[start:stop].clone()
        else:
            mine[key] = value.clone() if torch.is_tensor(value) else value
    return mine


def check_groups(who: str, saved: list[dict], expected: list[int]) -> None:
    """The saved param_groups must hold as many parameters, group by group, as ours."""
    got = [len(g["params"]) for g in saved]
    if got != expected:
        raise ValueError(
            f"{who}: expected a state dict for groups of {expected} parameters, got {got}. "
            "Hint: load a state dict saved from the same model and parameter groups (any "
            "world size will do)"
        )


def indexed_groups(param_groups: list[dict], keep: Callable[[torch.Tensor], bool]) -> list[dict]:
    """``param_groups`` in state-dict form: options, and ``params`` as running indices over
    the parameters ``keep`` selects (all: the saved format; trainable: the local one)."""
    out, start = [], 0
    for pg in param_groups:
        n = sum(1 for p in pg["params"] if keep(p))
        entry = {k: v for k, v in pg.items() if k != "params"}
        entry["params"] = list(range(start, start + n))
        start += n
        out.append(entry)
    return out


def copy_options(src: list[dict], dst: list[dict]) -> None:
    """Copy every option but ``params`` from ``src`` groups to ``dst`` groups (same count):
    how an LR scheduler's ``lr`` on the outer groups reaches the local optimizer, and back."""
    for s, d in zip(src, dst):
        d.update({k: v for k, v in s.items() if k != "params"})


def _local_pieces(opt) -> list:
    """Pieces in the local optimizer's parameter order (the same on every rank)."""
    return [opt._where[id(p)][1] for pg in opt.param_groups for p in pg["params"]
            if p.requires_grad]  # fmt: skip


def consolidate(opt, to: int) -> None:
    """Every rank's local optimizer state, kept on rank ``to`` (a collective)."""
    copy_options(opt.param_groups, opt.optim.param_groups)
    # A copy: the live state dict holds this rank's state tensors, which later steps update.
    mine = copy.deepcopy(opt.optim.state_dict())
    g = opt.process_group
    states = [broadcast_object(mine, r, g) for r in range(opt.world_size)]
    opt._all_state_dicts = states if opt.rank == to else []


def full_state(opt, who: str) -> dict:
    """The consolidated state in torch's whole-tensor format (on the consolidating rank)."""
    if not getattr(opt, "_all_state_dicts", None):
        raise RuntimeError(
            f"{who}: expected consolidate_state_dict(to={opt.rank}) on every rank before "
            f"state_dict() on rank {opt.rank}, got no consolidated state here. Hint: call "
            "opt.consolidate_state_dict(to=0) on all ranks, then opt.state_dict() on rank 0"
        )
    all_params = [p for pg in opt.param_groups for p in pg["params"]]
    index = {id(p): i for i, p in enumerate(all_params)}
    state = gather_state(_local_pieces(opt), opt._all_state_dicts, index)
    return {"state": state, "param_groups": indexed_groups(opt.param_groups, lambda p: True)}


def load(opt, state_dict: dict, who: str) -> None:
    """Each rank takes its own rows of a whole-tensor state saved at any world size."""
    saved = state_dict["param_groups"]
    check_groups(who, saved, [len(pg["params"]) for pg in opt.param_groups])
    all_params = [p for pg in opt.param_groups for p in pg["params"]]
    local = {id(piece.param): i for i, piece in enumerate(_local_pieces(opt))}
    state = {}
    for i, value in state_dict["state"].items():
        p = all_params[int(i)]
        if id(p) in local:
            state[local[id(p)]] = slice_state(opt._where[id(p)][1], opt.rank, value)
    for mine, theirs in zip(opt.param_groups, saved):
        mine.update({k: v for k, v in theirs.items() if k != "params"})
    local_groups = indexed_groups(opt.param_groups, lambda p: p.requires_grad)
    opt.optim.load_state_dict({"state": state, "param_groups": local_groups})
