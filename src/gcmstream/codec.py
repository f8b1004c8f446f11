"""The sans-IO record codec: Sealer (plaintext in, records out), Opener (records in, plaintext
out) and Channel (a Sealer and an Opener keyed for the two directions of one connection).
Each lives in its own module (``sealer``, ``opener``, ``channel``; the header's parts in
``header``); this one gathers them.

No awaits, no event loop, no sockets: adapters move bytes, this package decides what they mean.

Memory: the Opener receives into a fixed RecordRing (allocated when the first record's bytes
arrive, so idle connections hold none) and decrypts each record in place, or reads records
that arrive whole in immutable input where they lie. The Sealer encrypts into its own output
buffer, allocated on first use and reused while nobody holds its output.

View lifetimes: a memoryview returned by ``Opener.peek``/``read_view`` is valid until the next
read-side call on the opener (feeding it more input does not disturb it); one returned by a
Sealer call is valid until the next Sealer call. The object releases that view at its next call,
so stale use raises ValueError instead of reading reused memory (slices you made of it are not
tracked: copy what you keep).
"""

from __future__ import annotations

from .channel import Channel, ChannelPhase
from .opener import Opener, Phase
from .sealer import Sealer

__all__ = ("Channel", "ChannelPhase", "Opener", "Phase", "Sealer")
