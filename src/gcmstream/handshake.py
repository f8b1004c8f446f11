"""The channel handshake's cryptography (docs/FORMAT.md 5.2): ephemeral key shares, the hybrid
shared secret, the key schedule over the transcript, and the Finished MACs. Sans-IO, no state
beyond the ephemeral private keys of one handshake, which the Channel drops when it ends.

Every primitive is cryptography's: X25519, ML-KEM-768, HKDF-SHA256, HMAC-SHA256.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric import mlkem, x25519
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import HandshakeError
from .format import (
    FIELD_HEADER,
    FINISHED_SIZE,
    HEADER_SIZE,
    MAX_IDENTITY_SIZE,
    SHA256,
    FieldType,
    KeyExchange,
    StreamHeader,
    context_digest,
)

__all__ = (
    "CHANNEL_FIELDS",
    "FINISHED_SIZE",
    "MAX_IDENTITY_SIZE",
    "ChannelKeys",
    "FixedEphemeral",
    "InitiatorShares",
    "channel_keys",
    "finished_mac",
    "handshake_sizes",
    "respond",
)

X25519_SIZE = 32
MLKEM768_PUBLIC_SIZE = 1184
MLKEM768_CIPHERTEXT_SIZE = 1088
CHANNEL_FIELDS = frozenset({FieldType.X25519_SHARE, FieldType.MLKEM768_SHARE, FieldType.IDENTITY})
_LABEL_CHANNEL = b"gcmstream/2 channel"


@dataclass(frozen=True)
class FixedEphemeral:
    """Test-only: fixed ephemeral values, so known-answer vectors can be reproduced. Never use
    outside tests: fixed ephemeral keys give no forward secrecy at all.

    ``x25519``: the 32-byte X25519 private key (either side). ``mlkem_seed``: the initiator's
    64-byte ML-KEM-768 seed. ``mlkem_encapsulation``: the responder's (shared secret,
    ciphertext), made once against the initiator's public key (encapsulation is randomized)."""

    x25519: bytes = field(repr=False)
    mlkem_seed: bytes | None = field(default=None, repr=False)
    mlkem_encapsulation: tuple[bytes, bytes] | None = field(default=None, repr=False)


def _share(header: StreamHeader, kind: FieldType, size: int, what: str) -> bytes:
    value = header.field(kind)
    if value is None or len(value) != size:
        found = "missing" if value is None else f"{len(value)} bytes"
        raise HandshakeError(f"the peer's {what} must be {size} bytes, found {found}")
    return value


def _x25519(private: x25519.X25519PrivateKey, public: bytes) -> bytes:
    try:
        return private.exchange(x25519.X25519PublicKey.from_public_bytes(public))
    except ValueError:  # a low-order point: the shared secret would be all zero
        raise HandshakeError("the peer's X25519 share is not a usable public key") from None


def _check_exchange(header: StreamHeader, exchange: KeyExchange, role: str) -> None:
    expected = {FieldType.X25519_SHARE}
    if exchange is KeyExchange.MLKEM768_X25519:
        expected.add(FieldType.MLKEM768_SHARE)
    present = {
        kind for kind in header.field_types if kind in (FieldType.X25519_SHARE, FieldType.MLKEM768_SHARE)
    }
    if present != expected:
        raise HandshakeError(f"the {role}'s key shares do not match its key exchange {exchange.name}")


class InitiatorShares:
    """The initiator's ephemeral keys: its share goes in its header, the responder's completes it."""

    def __init__(self, exchange: KeyExchange, fixed: FixedEphemeral | None = None) -> None:
        self.exchange = exchange
        self._x25519 = (
            x25519.X25519PrivateKey.from_private_bytes(fixed.x25519)
            if fixed is not None
            else x25519.X25519PrivateKey.generate()
        )
        self._mlkem: mlkem.MLKEM768PrivateKey | None = None
        if exchange is KeyExchange.MLKEM768_X25519:
            seed = fixed.mlkem_seed if fixed is not None else None
            self._mlkem = (
                mlkem.MLKEM768PrivateKey.from_seed_bytes(seed)
                if seed
                else mlkem.MLKEM768PrivateKey.generate()
            )

    def __repr__(self) -> str:  # never show key material
        return f"<InitiatorShares {self.exchange.name}>"

    def fields(self) -> list[tuple[int, bytes]]:
        fields: list[tuple[int, bytes]] = [
            (FieldType.X25519_SHARE, self._x25519.public_key().public_bytes_raw())
        ]
        if self._mlkem is not None:
            fields.append((FieldType.MLKEM768_SHARE, self._mlkem.public_key().public_bytes_raw()))
        return fields

    def shared_secret(self, responder: StreamHeader) -> bytes:
        """The combined shared secret from the responder's header: ML-KEM's first, then X25519's."""
        _check_exchange(responder, self.exchange, "responder")
        dh = _x25519(self._x25519, _share(responder, FieldType.X25519_SHARE, X25519_SIZE, "X25519 share"))
        if self._mlkem is None:
            return dh
        ciphertext = _share(
            responder, FieldType.MLKEM768_SHARE, MLKEM768_CIPHERTEXT_SIZE, "ML-KEM-768 ciphertext"
        )
        try:
            kem = self._mlkem.decapsulate(ciphertext)
        except ValueError:
            raise HandshakeError("the responder's ML-KEM-768 ciphertext is malformed") from None
        return kem + dh


def respond(
    initiator: StreamHeader, fixed: FixedEphemeral | None = None
) -> tuple[list[tuple[int, bytes]], bytes]:
    """The responder's key-share fields and the combined shared secret, from the initiator's
    header (whose key exchange was accepted already). The responder's ephemeral keys exist only
    inside this call."""
    exchange = initiator.key_exchange
    _check_exchange(initiator, exchange, "initiator")
    private = (
        x25519.X25519PrivateKey.from_private_bytes(fixed.x25519)
        if fixed is not None
        else x25519.X25519PrivateKey.generate()
    )
    dh = _x25519(private, _share(initiator, FieldType.X25519_SHARE, X25519_SIZE, "X25519 share"))
    fields: list[tuple[int, bytes]] = [(FieldType.X25519_SHARE, private.public_key().public_bytes_raw())]
    if exchange is not KeyExchange.MLKEM768_X25519:
        return fields, dh
    public = _share(initiator, FieldType.MLKEM768_SHARE, MLKEM768_PUBLIC_SIZE, "ML-KEM-768 public key")
    if fixed is not None and fixed.mlkem_encapsulation is not None:
        kem, ciphertext = fixed.mlkem_encapsulation
    else:
        try:
            kem, ciphertext = mlkem.MLKEM768PublicKey.from_public_bytes(public).encapsulate()
        except ValueError:
            raise HandshakeError("the initiator's ML-KEM-768 public key is malformed") from None
    fields.append((FieldType.MLKEM768_SHARE, ciphertext))
    return fields, kem + dh


@dataclass(frozen=True)
class ChannelKeys:
    """What both ends derive from one handshake (docs/FORMAT.md 5.2)."""

    initiator_to_responder: bytes
    responder_to_initiator: bytes
    initiator_finished: bytes
    responder_finished: bytes

    def __repr__(self) -> str:  # never show key material
        return "<ChannelKeys>"


def channel_keys(
    key: bytes, shared_secret: bytes, initiator_header: bytes, responder_header: bytes, context: bytes
) -> ChannelKeys:
    """HKDF-Extract(salt = the pre-shared key, ikm = the shared secret), expanded over the label,
    the context's digest and the transcript hash (both whole headers), to four 32-byte values.
    The Finished MACs are computed here too: HMAC-SHA256(finished key, transcript hash)."""
    transcript = hashlib.sha256(initiator_header + responder_header).digest()
    info = _LABEL_CHANNEL + context_digest(context) + transcript
    okm = HKDF(algorithm=SHA256, length=128, salt=key, info=info).derive(shared_secret)
    return ChannelKeys(
        initiator_to_responder=okm[0:32],
        responder_to_initiator=okm[32:64],
        initiator_finished=finished_mac(okm[64:96], transcript),
        responder_finished=finished_mac(okm[96:128], transcript),
    )


def finished_mac(finished_key: bytes, transcript: bytes) -> bytes:
    return hmac.digest(finished_key, transcript, "sha256")


def handshake_sizes(exchange: KeyExchange, identity_sizes: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Bytes each side sends before its first record: (initiator, responder), for headers
    without other fields (docs/FORMAT.md 5.2). ``identity_sizes``: each side's identity length."""
    header = HEADER_SIZE + FIELD_HEADER.size + X25519_SIZE
    initiator = responder = header + FINISHED_SIZE
    if exchange is KeyExchange.MLKEM768_X25519:
        initiator += FIELD_HEADER.size + MLKEM768_PUBLIC_SIZE
        responder += FIELD_HEADER.size + MLKEM768_CIPHERTEXT_SIZE
    for index, size in enumerate(identity_sizes):
        if size:
            if index == 0:
                initiator += FIELD_HEADER.size + size
            else:
                responder += FIELD_HEADER.size + size
    return initiator, responder
