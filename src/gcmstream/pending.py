"""Bounding the handshakes a server has pending at once (the adapters share this).

An unauthenticated peer costs a server one connection and its header buffer until the handshake
completes or times out. A flood of such peers is bounded here: at most ``limit`` are pending;
a new one beyond that drops the oldest (which, under a flood, is the one most likely to be an
attacker's, and dropping it keeps the server answering newcomers). Sans-IO: dropping is a
callback the adapter gives (abort a transport, close a stream).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ("DEFAULT_MAX_PENDING_HANDSHAKES", "PendingHandshakes", "check_pending_limit")

logger = logging.getLogger("gcmstream")

# A pending handshake holds 11.6 to 14.2 KB allocated by gcmstream (hybrid: the peer's header
# and Finished, our answer, the parsed header, the handshake's task and timer;
# tests/test_pending.py keeps it under 16 KiB; the event loop's socket state comes on top), so
# 256 bound a flood to about 4 MiB of it; past that the server sheds the oldest, not newcomers.
DEFAULT_MAX_PENDING_HANDSHAKES = 256

T = TypeVar("T")


def check_pending_limit(limit: int) -> int:
    """``max_pending_handshakes``: an int of at least 1."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"max_pending_handshakes must be an int >= 1, got {limit!r}")
    return limit


class PendingHandshakes(Generic[T]):
    """Connections whose handshake has not completed, oldest first."""

    def __init__(self, limit: int, drop: Callable[[T], object]) -> None:
        self.limit = check_pending_limit(limit)
        self._drop = drop
        self._pending: dict[T, None] = {}  # insertion order: the oldest first
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, connection: T) -> None:
        """A new connection starts its handshake; the oldest is dropped if the limit is reached."""
        while len(self._pending) >= self.limit:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self.dropped += 1
            logger.warning("%d handshakes pending (max_pending_handshakes): dropping the oldest", self.limit)
            self._drop(oldest)
        self._pending[connection] = None

    def done(self, connection: T) -> None:
        """The connection's handshake ended (completed, failed or dropped)."""
        self._pending.pop(connection, None)
