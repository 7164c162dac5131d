"""Wrong on purpose (subgroup): the all-reduce is called without group=, so it runs on the
default group — which is not the group the function was given."""

import torch

from minidp.comm import all_reduce


def average_metric(values, group):
    pair = torch.tensor([values.double().sum().item(), float(values.numel())], dtype=torch.float64)
    all_reduce(pair)
    return (pair[0] / pair[1]).item()
