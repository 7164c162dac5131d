"""loaded without map_location

A checkpoint remembers the device each tensor was on: loaded on every rank of a GPU job
without map_location, every rank puts its copy on cuda:0 (or fails where there is no
GPU). Name where it goes: torch.load(path, map_location="cpu", weights_only=True).
"""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    barrier(group)
    state = torch.load(path, weights_only=True)  # the slip: no map_location
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer.load_state_dict(state["optimizer"])
