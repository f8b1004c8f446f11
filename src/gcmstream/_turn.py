"""One caller at a time: how Sealer and Opener refuse a second thread loudly.

Each object holds a ``Turn``: a one-token deque. A public call takes the token with ``pop()``
and gives it back with ``append()`` when it returns or raises. Both are single operations on
the deque (under CPython's GIL, and under its own lock on free-threaded builds), and neither
reallocates (a list would free and remake its item array each time), so of two threads that
try at once exactly one gets the token; the other raises ConcurrencyError before touching any
state. Internal calls never take the token again: public methods call private ones. The hot
calls (``seal``, ``readinto``, ``read``, feeding) inline the pop and append rather than enter
the context manager, which costs two more Python calls.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType

from .errors import ConcurrencyError

__all__ = ("Turn",)


class Turn:
    """The token of one object; ``with turn:`` holds it for one call."""

    __slots__ = ("token", "what")

    def __init__(self, what: str) -> None:
        self.token: deque[None] = deque((None,))
        self.what = what

    def busy(self) -> ConcurrencyError:
        """The error for a call that found the token taken."""
        return ConcurrencyError(
            f"{self.what} is in use by another thread: use one per thread, or hand it over between calls"
        )

    def __enter__(self) -> None:
        try:
            self.token.pop()
        except IndexError:
            raise self.busy() from None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.token.append(None)
