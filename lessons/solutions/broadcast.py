"""Reference solution: broadcast — minidp's textbook binomial tree (read it in
``minidp/comm/textbook.py``; lesson 9 prints it).

Check: ``python -m minidp exercise check broadcast --path lessons/solutions/broadcast.py``
"""

import torch

from minidp.comm import textbook


def broadcast(tensor: torch.Tensor, src: int, group) -> None:
    textbook.broadcast(tensor, src, group)
