"""Cheat 5, calling the library's answer: minidp's own reduce_scatter instead of a ring."""

from minidp.comm import reduce_scatter as library_reduce_scatter


def reduce_scatter(output, input_list, group):
    library_reduce_scatter(output, input_list, "sum", group)
