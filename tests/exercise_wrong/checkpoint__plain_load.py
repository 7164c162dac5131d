"""Wrong on purpose: the load does not say where the tensors go (no map_location)."""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    barrier(group)
    loaded = torch.load(path)
    fresh_model.load_state_dict(loaded["model"])
    fresh_optimizer.load_state_dict(loaded["optimizer"])
