"""Wrong on purpose: saves and restores the weights but not the optimizer's state."""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save(model.state_dict(), path)
    barrier(group)
    fresh_model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
