"""Cheat 5, calling the library's answer: the textbook broadcast from minidp.comm."""

from minidp.comm import textbook


def broadcast(tensor, src, group):
    textbook.broadcast(tensor, src, group)
