"""Wrong on purpose: every rank loads right away, without waiting for rank 0's save."""

import torch


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer.load_state_dict(state["optimizer"])
