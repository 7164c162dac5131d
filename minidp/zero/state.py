"""ZeRO checkpoints: sharded optimizer state <-> torch's whole-tensor format, any world size.

Both stages save a plain ``torch.optim`` optimizer's format, loadable at any rank count.
:func:`consolidate` collects every rank's local state on one rank with
:func:`broadcast_object` (pickled, as ``broadcast_object_list``: trusted ranks only).
ZeRO-2 (rows of every parameter): :func:`gather_state` concatenates per-element state on
dim 0 (the rest, Adam's 0-d ``step``, is rank 0's); :func:`slice_state` cuts a tensor
shaped like the parameter to this rank's rows (0-d parameter: every key but ``"step"``).

Test: ``pytest tests/test_zero.py -k state_dict tests/test_zero2_state.py``
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import torch

from minidp.comm import broadcast
from minidp.zero.zero2_layout import Piece, as_rows


def broadcast_object(obj, src: int, group) -> object:
    """Return rank ``src``'s ``obj`` on every rank (``obj`` is ignored elsewhere)."""
    mine = group.rank() == src
    data = pickle.dumps(obj) if mine else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    broadcast(size, group=group, group_src=src)  # src: a rank of the group
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if mine else None
    if buf is None:
        buf = torch.empty(int(size), dtype=torch.uint8)
    broadcast(buf, group=group, group_src=src)
    return obj if mine else pickle.loads(buf.numpy().tobytes())


def copy_options(src: list[dict], dst: list[dict]) -> None:
    """Copy every option but ``params`` from ``src`` groups to ``dst`` groups (same count)."""
    for s, d in zip(src, dst):
        d.update({k: v for k, v in s.items() if k != "params"})


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


def consolidate(opt, to: int) -> None:
    """Every rank's local optimizer state, kept on rank ``to`` (a collective)."""
    copy_options(opt.param_groups, opt.optim.param_groups)
    # A copy: the live state dict holds this rank's state tensors, which later steps update.
    mine = copy.deepcopy(opt.optim.state_dict())
    states = [broadcast_object(mine, r, opt.process_group) for r in range(opt.world_size)]
    opt._all_state_dicts = states if opt.rank == to else []


def check_consolidated(opt, who: str) -> None:
    """``state_dict()`` needs ``consolidate_state_dict`` first, on every rank."""
    if not getattr(opt, "_all_state_dicts", None):
        raise RuntimeError(
            f"{who}: expected consolidate_state_dict(to={opt.rank}) on every rank before "
            f"state_dict() on rank {opt.rank}, got no consolidated state here. Hint: call "
            "opt.consolidate_state_dict(to=0) on all ranks, then opt.state_dict() on rank 0"
        )


def check_groups(who: str, saved: list[dict], expected: list[int], hint: str = "") -> None:
    """The saved param_groups must hold as many parameters, group by group, as ours."""
    got = [len(g["params"]) for g in saved]
    if got != expected:
        raise ValueError(
            f"{who}: expected a state dict for groups of {expected} parameters, got {got}. "
            f"Hint: load a state dict saved from the same model and parameter groups{hint}"
        )


def gather_state(
    pieces: list[Piece], per_rank: list[dict], index: dict[int, int]
) -> dict[int, dict]:
    """Whole-tensor state by global index (``index``: ``id(param)`` -> it) from every rank's
    local ``state_dict()``; ``pieces`` in the local optimizers' parameter order."""
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


def _local_pieces(opt) -> list:
    """Pieces in the local optimizer's parameter order (the same on every rank)."""
    return [opt._where[id(p)][1] for pg in opt.param_groups for p in pg["params"]
            if p.requires_grad]  # fmt: skip


def full_state(opt, who: str) -> dict:
    """ZeRO-2's ``state_dict()``: the consolidated state, whole tensors (consolidating rank)."""
    check_consolidated(opt, who)
    all_params = [p for pg in opt.param_groups for p in pg["params"]]
    index = {id(p): i for i, p in enumerate(all_params)}
    state = gather_state(_local_pieces(opt), opt._all_state_dicts, index)
    return {"state": state, "param_groups": indexed_groups(opt.param_groups, lambda p: True)}


def load(opt, state_dict: dict, who: str) -> None:
    """ZeRO-2's ``load_state_dict``: each rank takes its rows of a state saved at any world size."""
    saved = state_dict["param_groups"]
    expected = [len(pg["params"]) for pg in opt.param_groups]
    check_groups(who, saved, expected, " (any world size will do)")
    all_params = [p for pg in opt.param_groups for p in pg["params"]]
    local = {id(piece.param): i for i, piece in enumerate(_local_pieces(opt))}
    state = {}
    for i, value in state_dict["state"].items():
        p = all_params[int(i)]
        if id(p) in local:
            state[local[id(p)]] = slice_state(opt._where[id(p)][1], opt.rank, value)
    copy_options(saved, opt.param_groups)
    local_groups = indexed_groups(opt.param_groups, lambda p: p.requires_grad)
    opt.optim.load_state_dict({"state": state, "param_groups": local_groups})
