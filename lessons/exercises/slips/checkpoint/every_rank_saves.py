"""every rank saves

The stub asks rank 0 alone to save: the ranks hold the same state (DDP keeps them
identical), so one copy is the checkpoint — W ranks writing one file at once write W copies
(on a shared filesystem, over each other). Save under `if group.rank() == 0:`.
"""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    barrier(group)  # the slip: every rank saved before this barrier
    state = torch.load(path, map_location="cpu", weights_only=True)
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer.load_state_dict(state["optimizer"])
