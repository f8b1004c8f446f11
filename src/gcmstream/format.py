"""Wire format constants, the stream header and the key schedule (docs/FORMAT.md is normative).

Nothing here does I/O or keeps state between calls except :class:`TrafficKeys`, which is the
AEAD key, nonce base and sequence position of one direction under one key generation.
"""

from __future__ import annotations

import enum
import hmac
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from .errors import KeyCommitmentError, UnsupportedBufferError, UnsupportedFormatError

__all__ = (
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "FLAG_FINAL",
    "FLAG_KEY_UPDATE",
    "HARD_MAX_RECORD_SIZE",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_CONTEXT_SIZE",
    "MAX_HARD_BYTES",
    "MAX_HARD_RECORDS",
    "RECORD_HEADER_SIZE",
    "SALT_SIZE",
    "TAG_SIZE",
    "VERSION",
    "Buffer",
    "KeyLimits",
    "Role",
    "StreamHeader",
    "Suite",
    "TrafficKeys",
    "byte_view",
    "channel_secret",
    "check_header_start",
    "check_context",
    "check_record_size",
    "generate_key",
    "make_header",
    "parse_header",
    "verify_header",
)

Buffer = bytes | bytearray | memoryview


def byte_view(data: Buffer, *, writable: bool = False) -> memoryview:
    """``data`` as a flat view of unsigned bytes (another format is cast, not copied).
    UnsupportedBufferError for a buffer that is not contiguous, or read-only when
    ``writable``."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise UnsupportedBufferError("the buffer is not contiguous")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if writable and view.readonly:
        raise UnsupportedBufferError("the buffer is read-only: plaintext cannot be written into it")
    return view


MAGIC = b"GCMS"
VERSION = 1
SALT_SIZE = 32
COMMITMENT_SIZE = 32
HEADER_PREFIX = struct.Struct(">4sBBBBI")  # magic, version, suite, role, reserved, record size
HEADER_SIZE = HEADER_PREFIX.size + SALT_SIZE + COMMITMENT_SIZE  # 76
RECORD_HEADER = struct.Struct(">BI")  # flags, ciphertext length (tag included)
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 5
_NONCE_LOW = struct.Struct(">Q")  # a nonce's low 8 bytes: IV XOR sequence number
TAG_SIZE = 16
NONCE_SIZE = 12

FLAG_FINAL = 0x01
FLAG_KEY_UPDATE = 0x02
KNOWN_FLAGS = FLAG_FINAL | FLAG_KEY_UPDATE

# 64 KiB: from this size up, the ~2 us of Python per record vanishes next to AES-GCM and the
# copy a socket makes anyway; smaller records lose up to 4x (benchmarks/README.md), larger
# ones quadruple a connection's ring (256 KiB here). age and DARE use 64 KiB; TLS 16 KiB.
DEFAULT_RECORD_SIZE = 64 * 1024
# A reader accepts records up to 1 MiB unless told otherwise: larger records only cost memory.
DEFAULT_MAX_RECORD_SIZE = 1024 * 1024
# Hard cap on the record size field, as gRPC ALTS caps frames at 16 MiB.
HARD_MAX_RECORD_SIZE = 16 * 1024 * 1024
# Seconds a channel waits for the peer's stream header before giving up on it (adapters, CLI).
DEFAULT_HANDSHAKE_TIMEOUT = 30.0
# Context is never sent; it only feeds HKDF's info. Bounded so it cannot be a memory lever.
MAX_CONTEXT_SIZE = 64 * 1024

_LABEL_STREAM = b"gcmstream/1 stream"
_LABEL_CHANNEL = b"gcmstream/1 channel"
_LABEL_KEY = b"gcmstream/1 key"
_LABEL_IV = b"gcmstream/1 iv"
_LABEL_UPDATE = b"gcmstream/1 key update"


class Suite(enum.IntEnum):
    """Cipher suite byte of the header; chosen by the key length, as AESGCM does."""

    AES_128_GCM = 1
    AES_256_GCM = 2

    @property
    def key_size(self) -> int:
        return 16 if self is Suite.AES_128_GCM else 32

    @classmethod
    def for_key(cls, key: Buffer) -> Suite:
        if not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"key must be bytes-like, not {type(key).__name__}")
        if len(key) == 16:
            return cls.AES_128_GCM
        if len(key) == 32:
            return cls.AES_256_GCM
        raise ValueError(f"key must be 16 or 32 bytes (AES-128-GCM or AES-256-GCM), got {len(key)}")


class Role(enum.IntEnum):
    """Who wrote a header: a one-way stream, or one end of a duplex channel."""

    ONE_WAY = 0
    INITIATOR = 1
    RESPONDER = 2

    @property
    def peer(self) -> Role:
        if self is Role.INITIATOR:
            return Role.RESPONDER
        if self is Role.RESPONDER:
            return Role.INITIATOR
        return Role.ONE_WAY


def generate_key(bit_length: int = 128) -> bytes:
    """A new random key: 128 bits for AES-128-GCM (default) or 256 bits for AES-256-GCM."""
    if bit_length not in (128, 256):
        raise ValueError(f"bit_length must be 128 or 256, got {bit_length}")
    return AESGCM.generate_key(bit_length)


MAX_HARD_RECORDS = 1 << 31
MAX_HARD_BYTES = 1 << 38


@dataclass(frozen=True)
class KeyLimits:
    """How much one key generation may protect.

    The writer starts a key update (KEY_UPDATE flag) once either ``update_after_*`` limit would
    be reached. Independently, neither side ever passes ``hard_*``: a writer with automatic
    updates off raises LimitReachedError instead, a reader treats a peer that passes them as
    malformed. Defaults: TLS 1.3 allows 2^24.5 full records per AES-GCM key (RFC 8446 5.5);
    draft-irtf-cfrg-aead-limits bounds one key to about 2^34.5 blocks (2^38.5 bytes) for a
    2^-60 confidentiality margin, counting one block per record, its AAD block and its last
    partial block. We update at 2^24 records or 2^36 bytes (64 GiB) and stop hard at 2^31
    records or 2^38 bytes (256 GiB): 3 * 2^31 + 2^34 blocks is about 2^34.4. Limits can be
    lowered (tests use tiny ones), never raised past these maxima.
    """

    update_after_records: int = 1 << 24
    update_after_bytes: int = 1 << 36
    hard_records: int = MAX_HARD_RECORDS
    hard_bytes: int = MAX_HARD_BYTES

    def __post_init__(self) -> None:
        if min(self.update_after_records, self.update_after_bytes) < 1:
            raise ValueError("key update limits must be at least 1")
        if self.update_after_records > self.hard_records or self.update_after_bytes > self.hard_bytes:
            raise ValueError("key update limits must not exceed the hard limits")
        if self.hard_records > MAX_HARD_RECORDS or self.hard_bytes > MAX_HARD_BYTES:
            raise ValueError(
                f"hard limits cannot exceed {MAX_HARD_RECORDS} records or {MAX_HARD_BYTES} bytes per key "
                "(the AES-GCM confidentiality bound of draft-irtf-cfrg-aead-limits)"
            )


@dataclass(frozen=True)
class StreamHeader:
    """The parsed fields of a 76-byte stream header."""

    suite: Suite
    role: Role
    record_size: int
    salt: bytes
    commitment: bytes
    raw: bytes


def check_context(context: Buffer) -> bytes:
    if not isinstance(context, bytes | bytearray | memoryview):
        raise TypeError(f"context must be bytes-like, not {type(context).__name__}")
    if len(context) > MAX_CONTEXT_SIZE:
        raise ValueError(f"context of {len(context)} bytes exceeds {MAX_CONTEXT_SIZE} bytes")
    return bytes(context)


def check_record_size(record_size: int, name: str = "record_size") -> int:
    if not isinstance(record_size, int) or not 1 <= record_size <= HARD_MAX_RECORD_SIZE:
        raise ValueError(f"{name} must be an int from 1 to {HARD_MAX_RECORD_SIZE}, got {record_size!r}")
    return record_size


def _stream_keys(key: Buffer, prefix_and_salt: bytes, salt: bytes, context: bytes) -> tuple[bytes, bytes]:
    """(commitment, stream secret) for one header: HKDF-SHA256 over the key."""
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=COMMITMENT_SIZE + 32,
        salt=salt,
        info=_LABEL_STREAM + prefix_and_salt + context,
    ).derive(bytes(key))
    return okm[:COMMITMENT_SIZE], okm[COMMITMENT_SIZE:]


def make_header(
    key: Buffer, role: Role, record_size: int, context: Buffer, salt: bytes | None = None
) -> tuple[bytes, bytes]:
    """A new header for ``key`` and its stream secret: (header bytes, secret)."""
    suite = Suite.for_key(key)
    check_record_size(record_size)
    ctx = check_context(context)
    if salt is None:
        salt = os.urandom(SALT_SIZE)
    elif len(salt) != SALT_SIZE:
        raise ValueError(f"salt must be {SALT_SIZE} bytes, got {len(salt)}")
    prefix = HEADER_PREFIX.pack(MAGIC, VERSION, suite, role, 0, record_size) + salt
    commitment, secret = _stream_keys(key, prefix, salt, ctx)
    return prefix + commitment, secret


def check_header_start(start: Buffer) -> None:
    """Reject a stream by its first bytes (magic, version) before the whole header arrives,
    so garbage or another format is named as such rather than as a truncation."""
    start = bytes(start[: len(MAGIC) + 1])
    magic = start[: len(MAGIC)]
    if magic != MAGIC[: len(magic)]:
        raise UnsupportedFormatError(f"not a gcmstream stream: starts with {magic!r}, expected {MAGIC!r}")
    if len(start) > len(MAGIC) and start[len(MAGIC)] != VERSION:
        raise UnsupportedFormatError(
            f"format version {start[len(MAGIC)]} is not supported (this reads version {VERSION})"
        )


def parse_header(raw: Buffer) -> StreamHeader:
    """Parse the fields of a header without checking its commitment (no key needed)."""
    raw = bytes(raw)
    if len(raw) != HEADER_SIZE:
        raise UnsupportedFormatError(f"stream header must be {HEADER_SIZE} bytes, got {len(raw)}")
    magic, version, suite, role, reserved, record_size = HEADER_PREFIX.unpack_from(raw)
    if magic != MAGIC:
        raise UnsupportedFormatError(f"not a gcmstream stream: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise UnsupportedFormatError(
            f"format version {version} is not supported (this reads version {VERSION})"
        )
    if suite not in Suite.__members__.values():
        raise UnsupportedFormatError(f"cipher suite {suite} is not supported (expected 1 or 2)")
    if role not in Role.__members__.values():
        raise UnsupportedFormatError(f"role {role} is not defined (expected 0, 1 or 2)")
    if reserved != 0:
        raise UnsupportedFormatError(f"reserved header byte is {reserved}, expected 0")
    if not 1 <= record_size <= HARD_MAX_RECORD_SIZE:
        raise UnsupportedFormatError(f"record size {record_size} is outside 1..{HARD_MAX_RECORD_SIZE}")
    off = HEADER_PREFIX.size
    return StreamHeader(
        suite=Suite(suite),
        role=Role(role),
        record_size=record_size,
        salt=raw[off : off + SALT_SIZE],
        commitment=raw[off + SALT_SIZE :],
        raw=raw,
    )


def verify_header(key: Buffer, header: StreamHeader, context: Buffer) -> bytes:
    """Check the header's key commitment in constant time; return its stream secret."""
    suite = Suite.for_key(key)
    if suite != header.suite:
        # The key length is the caller's choice, the suite the writer's: say which is which.
        raise KeyCommitmentError(f"stream uses {header.suite.name} but the key given is for {suite.name}")
    ctx = check_context(context)
    prefix_and_salt = header.raw[: HEADER_SIZE - COMMITMENT_SIZE]
    commitment, secret = _stream_keys(key, prefix_and_salt, header.salt, ctx)
    if not hmac.compare_digest(commitment, header.commitment):
        raise KeyCommitmentError(
            "stream header does not match this key and context "
            "(wrong key, wrong context, or an altered header)"
        )
    return secret


def channel_secret(key: Buffer, sender_header: bytes, receiver_header: bytes, context: Buffer) -> bytes:
    """Secret of one channel direction: bound to both headers, so to both fresh salts and roles."""
    ctx = check_context(context)
    s_salt = sender_header[HEADER_PREFIX.size : HEADER_PREFIX.size + SALT_SIZE]
    r_salt = receiver_header[HEADER_PREFIX.size : HEADER_PREFIX.size + SALT_SIZE]
    return HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=s_salt + r_salt,
        info=_LABEL_CHANNEL + sender_header + receiver_header + ctx,
    ).derive(bytes(key))


def _expand(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=label).derive(secret)


class TrafficKeys:
    """AEAD and nonce base of one key generation in one direction.

    nonce(seq) = iv XOR seq (seq as a 96-bit big-endian integer). seq restarts at 0 with each
    generation, and each generation has a different key, so no (key, nonce) pair repeats.
    """

    __slots__ = (
        "_iv_low",
        "_nonce",
        "aead",
        "decrypt_into",
        "generation",
        "iv",
        "nonce_parts",
        "secret",
        "suite",
    )

    def __init__(self, secret: bytes, suite: Suite, generation: int = 0) -> None:
        self.secret = secret
        self.suite = suite
        self.generation = generation
        self.aead = AESGCM(_expand(secret, _LABEL_KEY, suite.key_size))
        iv = _expand(secret, _LABEL_IV, NONCE_SIZE)
        self.iv = int.from_bytes(iv, "big")
        # seq < 2**64 only touches the low 8 bytes: the hot path patches those in place
        self._nonce = bytearray(iv)
        self._iv_low = int.from_bytes(iv[4:], "big")
        # For record loops that patch the nonce inline, made once rather than per loop:
        # ``pack_into(buffer, 4, iv_low ^ seq)`` makes ``buffer`` nonce(seq), as nonce_into does.
        self.nonce_parts: tuple[bytearray, Callable[[Buffer, int, int], None], int] = (
            self._nonce,
            _NONCE_LOW.pack_into,
            self._iv_low,
        )
        self.decrypt_into = self.aead.decrypt_into

    def nonce(self, seq: int) -> bytes:
        return (self.iv ^ seq).to_bytes(NONCE_SIZE, "big")

    def nonce_into(self, seq: int) -> bytearray:
        """nonce(seq) in a buffer this object reuses: valid until the next call. One int is
        the only allocation, which matters once per record."""
        _NONCE_LOW.pack_into(self._nonce, 4, self._iv_low ^ seq)
        return self._nonce

    def next(self) -> TrafficKeys:
        """The next generation: secret' = HKDF-Expand(secret, "gcmstream/1 key update")."""
        return TrafficKeys(_expand(self.secret, _LABEL_UPDATE, 32), self.suite, self.generation + 1)

    def __repr__(self) -> str:  # never show key material
        return f"<TrafficKeys {self.suite.name} generation={self.generation}>"
