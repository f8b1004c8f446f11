"""One caller at a time: how Sealer and Opener refuse a second thread loudly.

Each object holds a ``Turn``: a one-token list. A public call takes the token with ``pop()``
and gives it back with ``append()`` when it returns or raises. Both are single operations on
the list (under CPython's GIL, and under its own lock on free-threaded builds), so of two
threads that try at once exactly one gets the token; the other raises ConcurrencyError before
touching any state. A one-item list keeps its one-slot item array through ``pop()`` and
``append()`` (it shrinks only below half its allocation), so the cycle allocates nothing; it
costs 64 bytes where a deque cost 760 (a deque's first block holds 64 slots), which counts
against what an unauthenticated peer makes a server hold: two Turns per connection (issue 21).
Internal calls never take the token again: public methods call private ones. The hot
calls (``seal``, ``readinto``, ``read``, feeding) inline the pop and append rather than enter
the context manager, which costs two more Python calls.
"""

from __future__ import annotations

from types import TracebackType

from .errors import ConcurrencyError

__all__ = ("Turn",)


class Turn:
    """The token of one object; ``with turn:`` holds it for one call."""

    __slots__ = ("token", "what")

    def __init__(self, what: str) -> None:
        self.token: list[None] = [None]
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
