"""Cheat 5, calling the library's answer: minidp's own all_gather instead of a ring."""

import minidp.comm


def all_gather(tensor_list, tensor, group):
    minidp.comm.all_gather(tensor_list, tensor, group)
