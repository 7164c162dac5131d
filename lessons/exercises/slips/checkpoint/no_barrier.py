"""checkpoint loaded before the save finished

A rank read the OLD checkpoint: it loaded while rank 0 was still saving. Put a barrier
between the save and the load (minidp.comm.barrier(group)), on every rank — rank 0 included,
after its save.
"""

import torch


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer.load_state_dict(state["optimizer"])
