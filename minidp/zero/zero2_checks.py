"""What ``Zero2Optimizer`` checks, so a wrong loop fails clearly instead of silently.

* :func:`check_elementwise` — at construction: the optimizer steps each element on its own.
* :func:`check_ready`, :func:`check_storage` — at ``step()``: every bucket reduced, the last
  backward outside ``no_sync()``, no full ``.grad`` from others (DDP around the model would
  average twice), no unfrozen parameter without hooks, each shard still a parameter's view.

Test: ``pytest tests/test_zero2.py -k clear_error tests/test_zero2_train.py``
"""

from __future__ import annotations

import torch

from minidp.fsdp.dtensor import DTensor

# torch's optimizers that step each element on its own, so stepping a shard of rows is
# stepping those rows of the whole; a subclass's own step() may take a norm (LARS).
ELEMENTWISE = tuple(
    getattr(torch.optim, name)
    for name in "SGD Adam AdamW Adagrad Adadelta Adamax ASGD NAdam RAdam RMSprop Rprop".split()
)


def check_elementwise(who: str, optimizer_class) -> None:
    """Refuse an optimizer whose step() is not one of torch's element-wise ones."""
    if optimizer_class.step in {c.step for c in ELEMENTWISE}:
        return
    raise ValueError(
        f"{who}: expected an optimizer that updates each element on its own "
        f"({', '.join(c.__name__ for c in ELEMENTWISE)}, or a subclass that keeps their "
        f"step()), got {optimizer_class.__name__}, whose step() may take norms or means over "
        "a whole tensor (Adafactor's factored moments, a LARS-style trust ratio): on this "
        "rank's rows alone they would be wrong, silently. Hint: use minidp.fully_shard, "
        "whose DTensor shards make such reductions global (or refuse them, as FSDP2's do)"
    )


def check_ready(opt, who: str) -> None:
    """Every bucket reduced, no gradient left local, and no full ``.grad`` written by others."""
    if opt._local:
        raise RuntimeError(
            f"{who}: expected the last backward before step() to run outside no_sync(), got "
            f"{len(opt._local)} parameters whose gradients were only accumulated locally, "
            "never reduced across ranks. Hint: run the last micro-batch's backward outside "
            "no_sync() (or after set_requires_gradient_sync(True))"
        )
    missing = [b for b in opt.buckets if not b.reduced or b.seen]
    if missing:
        names = [tuple(piece.param.shape) for piece in missing[0].pieces]
        raise RuntimeError(
            f"{who}: expected every trainable parameter to get a gradient before step(), "
            f"but {len(missing)} of {len(opt.buckets)} buckets were not reduced (the "
            f"first holds parameters of shapes {names}). Hint: call backward() first, "
            "and keep parameters that take no part in the loss frozen (requires_grad=False)"
        )
    for i, p in enumerate(opt.params):
        if p.grad is not None and not isinstance(p.grad, DTensor):
            raise RuntimeError(
                f"{who}: expected each .grad to be freed at step() (this optimizer reduce-"
                "scatters each gradient during backward and frees it), got a full gradient "
                f"of shape {tuple(p.grad.shape)} on trainable parameter {i} of shape "
                f"{tuple(p.shape)}: something else also reduces the gradients — most "
                "likely DistributedDataParallel wrapped around the model, which would "
                "average them a second time. Hint: do not wrap the model in DDP: "
                f"{who} does DDP's gradient reduction itself"
            )
    hooked = {id(p) for p in opt.params}
    for pg in opt.param_groups:
        for p in pg["params"]:
            if id(p) not in hooked and p.requires_grad and p.grad is not None:
                raise RuntimeError(
                    f"{who}: expected parameters frozen at construction to stay frozen, got "
                    f"a gradient on the parameter of shape {tuple(p.shape)}, unfrozen since: "
                    "it has no hooks or shard here, so it would never be reduced or stepped. "
                    f"Hint: build the {who} while it is trainable (freeze it afterwards: that "
                    "is followed), or remove_hooks() and build a new one"
                )


def check_storage(opt, who: str) -> None:
    """Each shard must still be a view of its parameter: ``p.data = t`` elsewhere breaks it."""
    for piece in (piece for b in opt.buckets for piece in b.pieces):
        p = piece.param
        if piece.shard.untyped_storage().data_ptr() != p.untyped_storage().data_ptr():
            raise RuntimeError(
                f"{who}: expected each parameter to keep the storage it had at "
                f"construction, but the parameter of shape {tuple(p.shape)} was replaced "
                "outside the optimizer (p.data = ...), so this rank's shard and its "
                "optimizer state point at the old values. Hint: copy new values in place "
                f"(p.copy_(t) or model.load_state_dict), or build a new {who}"
            )


def check_first_gradient(who: str, bucket, p) -> None:
    """Refuse a second gradient for ``p`` while its bucket waits for the others."""
    if id(p) in bucket.seen:
        raise RuntimeError(
            f"{who}: expected one gradient per parameter per backward, got a second one "
            f"for the parameter of shape {tuple(p.shape)} before its bucket was "
            f"reduce-scattered ({len(bucket.seen)} of {len(bucket.pieces)} parameters "
            "arrived): an earlier backward did not reach every trainable parameter. "
            "Hint: every backward must use every trainable parameter; freeze the others "
            "(requires_grad=False)"
        )
