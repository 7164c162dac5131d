"""Reference solution: reduce-scatter — minidp's textbook version (read it in
``minidp/comm/textbook.py``; lesson 8 prints it).

Check: ``python -m minidp exercise check reduce_scatter --path lessons/solutions/reduce_scatter.py``
"""

import torch

from minidp.comm import textbook


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], group) -> None:
    textbook.reduce_scatter(output, input_list, "sum", group)
