"""Wrong on purpose, twice: returns the tensor unchanged (WRONG from world 2 on), and in
the first case with 4 ranks the process dies (as when gloo aborts it). The WRONG of the
earlier cases must still be reported, with its hint."""

import os


def ring_all_reduce(tensor, group):
    if group.size() == 4:
        os.abort()
    return tensor
