"""Test-only: channel ends with fixed randomness, so known-answer vectors can be reproduced.

Never use outside tests: a fixed salt and fixed ephemeral keys give no forward secrecy at all.
Kept out of the public Channel constructor (review LOW-7) so no caller can pass them by accident.
"""

from __future__ import annotations

from typing import Any

from .channel import Channel
from .format import Keys
from .handshake import FixedEphemeral

__all__ = ("fixed_channel",)


class _FixedChannel(Channel):
    def __init__(
        self, key: Keys, salt: bytes | None, ephemeral: FixedEphemeral | None, **options: Any
    ) -> None:
        self._salt = salt
        self._ephemeral = ephemeral
        super().__init__(key, **options)


def fixed_channel(
    key: Keys, *, salt: bytes | None = None, ephemeral: FixedEphemeral | None = None, **options: Any
) -> Channel:
    """A Channel (``options`` as for its constructor) whose header salt and ephemeral keys are
    ``salt`` and ``ephemeral`` where given."""
    return _FixedChannel(key, salt, ephemeral, **options)
