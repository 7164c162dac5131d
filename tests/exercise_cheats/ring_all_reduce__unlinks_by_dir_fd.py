"""Deletes a file of the package by a name relative to an open folder (``dir_fd``), the way
``shutil.rmtree`` removes entries: the name alone looks like a file in the working
directory. (The name does not exist: were the guard blind to it, the unlink would fail.)"""

import os

import torch

import minidp

_folder = os.open(os.path.dirname(minidp.__file__), os.O_RDONLY)
os.unlink("no-such-module-of-minidp.py", dir_fd=_folder)


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    return tensor
