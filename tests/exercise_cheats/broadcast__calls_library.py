"""Cheat 5, calling the library's answer: the textbook broadcast from minidp.comm."""

from minidp.textbook import collectives


def broadcast(tensor, src, group):
    collectives.broadcast(tensor, src, group)
