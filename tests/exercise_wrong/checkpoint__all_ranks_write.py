"""Wrong on purpose (rank-0 duty): every rank writes the checkpoint, then they meet."""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(state, path)
    barrier(group)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    fresh_model.load_state_dict(loaded["model"])
    fresh_optimizer.load_state_dict(loaded["optimizer"])
