"""Reference solution: all_gather — minidp's textbook ring (read it in
``minidp/comm/textbook.py``; lesson 9 prints it).

Check: ``python -m minidp exercise check all_gather --path lessons/solutions/all_gather.py``
"""

import torch

from minidp.comm import textbook


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group) -> None:
    textbook.all_gather(tensor_list, tensor, group)
