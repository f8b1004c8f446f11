"""Helpers shared by the tests: deterministic channel ends.

A channel's keys come from fresh ephemeral keys, so a stream one end sent can be opened later
only by an end that repeats the same handshake. ``fixed_channel`` injects fixed salts and fixed
X25519 ephemeral keys (the test-only ``_salt``/``_ephemeral``), so a new end of the same role
always answers the same way: exactly what known-answer and tamper tests need.
"""

from __future__ import annotations

from typing import Any

from gcmstream import Channel, KeyExchange, Role
from gcmstream._fixed import fixed_channel as fixed_randomness_channel
from gcmstream.channel import self_connections_allowed
from gcmstream.handshake import FixedEphemeral
from gcmstream.testing import run_handshake

__all__ = (
    "FIXED_EPHEMERAL",
    "FIXED_SALTS",
    "fixed_channel",
    "fixed_pair",
    "handshake_bytes",
    "run_handshake",
)

FIXED_SALTS = {Role.INITIATOR: b"\x01" * 32, Role.RESPONDER: b"\x02" * 32}
FIXED_EPHEMERAL = {
    Role.INITIATOR: FixedEphemeral(x25519=bytes(range(1, 33))),
    Role.RESPONDER: FixedEphemeral(x25519=bytes(range(33, 65))),
}


def fixed_channel(key: bytes, role: Role, **options: Any) -> Channel:
    """A channel end with a fixed salt (option ``salt``, or the role's) and fixed X25519
    ephemeral key (X25519 suite)."""
    options.setdefault("salt", FIXED_SALTS[role])
    return fixed_randomness_channel(
        key, role=role, key_exchange=KeyExchange.X25519, ephemeral=FIXED_EPHEMERAL[role], **options
    )


def fixed_pair(key: bytes, **options: Any) -> tuple[Channel, Channel]:
    """(initiator, responder), handshake done, both deterministic."""
    initiator = fixed_channel(key, Role.INITIATOR, **options)
    responder = fixed_channel(key, Role.RESPONDER, **options)
    run_handshake(initiator, responder)
    assert initiator.handshake_complete() and responder.handshake_complete()
    return initiator, responder


def handshake_bytes(initiator: Channel, responder: Channel) -> tuple[bytes, bytes]:
    """Run the handshake and return what each side sent before its records: (the initiator's
    header and Finished, the responder's header and Finished). Works outside tests too (at
    import), where the conftest fixture does not apply."""
    with self_connections_allowed():
        responder.initial_data()
        hello = initiator.initial_data()
        responder.opener.receive_data(hello)
        answer = responder.data_to_send()
        initiator.opener.receive_data(answer)
        finished = initiator.data_to_send()
        responder.opener.receive_data(finished)
        assert initiator.handshake_complete() and responder.handshake_complete()
    return hello + finished, answer
