"""The errors minidp's collectives raise instead of hanging or returning garbage.

All subclass ``RuntimeError`` (what ``torch.distributed`` raises), so ``except
RuntimeError`` keeps working; each names the rank, the collective and the peer.
"""

from __future__ import annotations


class CollectiveError(RuntimeError):
    """A collective could not complete on this rank."""


class PeerError(CollectiveError):
    """A peer rank died, exited or closed its connection in the middle of a collective."""


class CollectiveTimeout(CollectiveError):
    """A peer did not send (or receive) within the group's timeout: it stalled or desynced."""


class MismatchError(CollectiveError):
    """Ranks called collectives that do not match (shape, dtype, op, kind or order)."""
