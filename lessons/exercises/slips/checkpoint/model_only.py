"""optimizer state not restored

The weights came back but the optimizer's momentum did not: save and load
optimizer.state_dict() too, or the resumed run takes different steps.
"""

import torch

from minidp.comm import barrier


def checkpoint(model, optimizer, fresh_model, fresh_optimizer, path, group):
    if group.rank() == 0:
        torch.save(model.state_dict(), path)
    barrier(group)
    fresh_model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
