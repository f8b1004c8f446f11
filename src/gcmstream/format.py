"""Wire format constants, the stream header and the key schedule (docs/FORMAT.md is normative).

Nothing here does I/O or keeps state between calls except :class:`TrafficKeys`, which holds the
AEAD key and nonce base of one direction under one key generation (the sequence position is
``records.RecordLayer``'s).
"""

from __future__ import annotations

import enum
import functools
import os
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

# the record sizes and the context bound: their one copy is in _numbers (for --help, without
# cryptography); they are this module's names too
from ._numbers import DEFAULT_MAX_RECORD_SIZE as DEFAULT_MAX_RECORD_SIZE
from ._numbers import DEFAULT_RECORD_SIZE as DEFAULT_RECORD_SIZE
from ._numbers import HARD_MAX_RECORD_SIZE as HARD_MAX_RECORD_SIZE
from ._numbers import MAX_CONTEXT_SIZE as MAX_CONTEXT_SIZE
from .errors import (
    ArmoredInputError,
    KeyCommitmentError,
    MalformedHeaderError,
    ProtocolError,
    RecordTooLargeError,
    RoleMismatchError,
    UnknownFieldError,
    UnknownKeyError,
    UnsupportedBufferError,
    UnsupportedFormatError,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Literal

__all__ = (
    "DEFAULT_KEY_LIMITS",
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "FINISHED_SIZE",
    "FLAG_FINAL",
    "FLAG_KEY_UPDATE",
    "HARD_MAX_RECORD_SIZE",
    "HEADER_FAULTS",
    "HEADER_FIXED_SIZE",
    "HEADER_SIZE",
    "KEY_ID_SIZE",
    "MAGIC",
    "MAX_CONTEXT_SIZE",
    "MAX_FIELDS_SIZE",
    "MAX_HARD_BYTES",
    "MAX_HARD_RECORDS",
    "MAX_HEADER_SIZE",
    "MAX_IDENTITY_SIZE",
    "MAX_STANZA_FIELDS_SIZE",
    "RECORD_HEADER_SIZE",
    "SALT_SIZE",
    "SALT_SLICE",
    "TAG_SIZE",
    "VERSION",
    "Buffer",
    "FieldType",
    "HeaderStart",
    "KeyExchange",
    "KeyLimits",
    "KeyRing",
    "Keys",
    "Role",
    "StreamHeader",
    "Suite",
    "TrafficKeys",
    "as_key_ring",
    "byte_view",
    "check_context",
    "check_fields_length",
    "check_header_start",
    "check_identity",
    "check_record_size",
    "check_role",
    "context_digest",
    "encode_fields",
    "find_key",
    "generate_key",
    "header_fault",
    "key_id",
    "make_header",
    "parse_fields",
    "parse_header",
    "parse_header_start",
    "record_size_fault",
    "sealed_with",
    "sha256",
    "verify_commitment",
    "verify_header",
)

Buffer = bytes | bytearray | memoryview


def byte_view(data: Buffer, *, writable: bool = False) -> memoryview:
    """``data`` as a flat view of unsigned bytes (another format is cast, not copied).
    UnsupportedBufferError for a buffer that is not contiguous, or read-only when
    ``writable``; TypeError, said in words, for what is no buffer (a str: text is encoded
    first; memoryview's own "a bytes-like object is required" spoke of its internals)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(_not_bytes(data)) from None
    if not view.c_contiguous:
        raise UnsupportedBufferError("the buffer is not contiguous")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if writable and view.readonly:
        raise UnsupportedBufferError("the buffer is read-only: plaintext cannot be written into it")
    return view


def _not_bytes(data: object) -> str:
    found = type(data).__name__
    if isinstance(data, str):
        return (
            "expected bytes (bytes, bytearray, memoryview), not text (str): encode it first, as text.encode()"
        )
    return f"expected bytes (bytes, bytearray, memoryview), not {found}"


MAGIC = b"GCMS"
VERSION = 2
SALT_SIZE = 32
KEY_ID_SIZE = 16
COMMITMENT_SIZE = 32
# magic, version, role, suite, key exchange, record size, key ID, salt, length of the fields
HEADER_FIXED = struct.Struct(">4sBBBBI16s32sH")
HEADER_FIXED_SIZE = HEADER_FIXED.size  # 62
SALT_SLICE = slice(28, 28 + SALT_SIZE)  # where the salt lies in every header
FIELD_HEADER = struct.Struct(">HH")  # field type, value length
# Bound on the typed fields: the largest today is an ML-KEM-768 public key (1,184 bytes).
MAX_FIELDS_SIZE = 4096
# Bound for a reader given identities or a passphrase: recipient stanzas need more room (a hybrid
# stanza is 1,172 bytes), up to what the 16-bit fields length can say (docs/FORMAT.md 4.4).
MAX_STANZA_FIELDS_SIZE = 0xFFFF
HEADER_SIZE = HEADER_FIXED_SIZE + COMMITMENT_SIZE  # 94: a header without fields (one-way streams)
MAX_HEADER_SIZE = HEADER_SIZE + MAX_FIELDS_SIZE
FINISHED_SIZE = 32  # a channel's key confirmation, HMAC-SHA256 over the transcript
FIELD_CRITICAL_LIMIT = 0x8000  # field types below this are critical: a reader must understand them
RECORD_HEADER = struct.Struct(">BI")  # flags, ciphertext length (tag included)
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 5
_NONCE_LOW = struct.Struct(">Q")  # a nonce's low 8 bytes: IV XOR sequence number
TAG_SIZE = 16
NONCE_SIZE = 12

FLAG_FINAL = 0x01
FLAG_KEY_UPDATE = 0x02
KNOWN_FLAGS = FLAG_FINAL | FLAG_KEY_UPDATE


# The hash every HKDF here uses: one instance (it holds no state), not one per derivation.
SHA256 = hashes.SHA256()

_LABEL_KEY_ID = b"gcmstream/2 key id"
_LABEL_HEADER = b"gcmstream/2 header"
_LABEL_KEY = b"gcmstream/2 key"
_LABEL_IV = b"gcmstream/2 iv"
_LABEL_UPDATE = b"gcmstream/2 key update"


# what a key given as a string is told (a key file's line pasted into Sealer(...))
_STR_KEY = {
    str: ": a key file's line is read by gcmstream.keyfile.parse_key(line), a key file by read_key_file(path)"
}


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
            # a key file's line pasted as a string is the likely str (never quoted: a secret)
            raise TypeError(f"key must be bytes-like, not {type(key).__name__}{_STR_KEY.get(type(key), '')}")
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


DEFAULT_KEY_LIMITS = KeyLimits()
"""The defaults, one shared value (frozen) rather than one per Sealer and Opener: a pending
handshake's connection holds one of each (tests/test_pending.py)."""


class KeyExchange(enum.IntEnum):
    """Header byte 7: how a channel's ends agree on fresh secrets (docs/FORMAT.md 5.2).

    One-way streams have none. A channel's default is the hybrid: ML-KEM-768 and X25519 both,
    so its keys hold while either does; X25519 alone gives smaller headers."""

    NONE = 0
    X25519 = 1
    MLKEM768_X25519 = 2


class FieldType(enum.IntEnum):
    """Typed header fields (docs/FORMAT.md 4.2). Types below 0x8000 are critical."""

    X25519_SHARE = 0x0001
    MLKEM768_SHARE = 0x0002
    IDENTITY = 0x0003
    # Optional: every record but FINAL is full and every N-th carries KEY_UPDATE (uint32 N),
    # so a seekable reader finds any record by arithmetic (docs/FORMAT.md 4.3).
    FIXED_LAYOUT = 0x8004
    # 0x0010-0x001F: one-way streams sealed to recipients or a passphrase (gcmstream.recipients)
    RECIPIENT_STANZAS = 0x0010
    PASSPHRASE_STANZA = 0x0011


# The one verdict on each header check of docs/FORMAT.md 8.1: every reader (Opener, so the
# pipelines, the adapters and open_file, and the CLI above them) raises the class this table
# gives, and the CLI maps classes to exit statuses (cli.EXIT_CODES). Magic and version wrong
# (H1, H2): another format or a newer one. Magic and version right but the rest broken (H3..H7,
# H13): damage. A critical field the reader does not know under a valid commitment (H14): a
# writer holding the key used a feature this reader lacks, so unsupported, not damage.
HEADER_FAULTS: Mapping[str, type[ProtocolError]] = {
    "H1": UnsupportedFormatError,
    "H2": UnsupportedFormatError,
    "H3": MalformedHeaderError,
    "H4": MalformedHeaderError,
    "H5": MalformedHeaderError,
    "H6": MalformedHeaderError,
    "H7": MalformedHeaderError,
    "H8": RecordTooLargeError,
    "H9": RoleMismatchError,
    "H10": UnknownKeyError,
    "H11": KeyCommitmentError,
    "H12": KeyCommitmentError,
    "H13": MalformedHeaderError,
    "H14": UnknownFieldError,
}


def header_fault(rule: str, message: str) -> ProtocolError:
    """The error for header check ``rule`` (HEADER_FAULTS), carrying the rule's name. H8's
    RecordTooLargeError takes sizes: see ``record_size_fault``."""
    error = HEADER_FAULTS[rule](message)
    error.rule = rule
    return error


def record_size_fault(size: int, limit: int) -> RecordTooLargeError:
    """Check H8: the announced record size passes the reader's ``max_record_size``."""
    error = RecordTooLargeError("announced record size", size, limit)
    error.rule = "H8"
    return error


def key_id(key: Buffer) -> bytes:
    """The key's public 16-byte identifier: HKDF(key, info="gcmstream/2 key id"). It names the
    key in every header; it reveals nothing about the key (HKDF is a PRF), but it does let an
    observer see that two streams use the same key."""
    Suite.for_key(key)
    return HKDF(algorithm=SHA256, length=KEY_ID_SIZE, salt=None, info=_LABEL_KEY_ID).derive(bytes(key))


class KeyRing:
    """Several keys, found by their key ID. The first is the primary: it seals and initiates.
    Readers and responders accept a header under any key in the ring, so a key can be rotated
    (new primary first, the old one kept for a while) without cutting anybody off.

    ``keys`` is a list of keys, or a mapping from a name to a key or a list of keys
    (``KeyRing({"alice": k1, "bob": [k2_new, k2_old]})``, the first key overall is the
    primary): a key's name is the identity of the peer this end shares it with. A channel, on
    either side, requires a peer that proved a named key to claim that name (its local_id) and
    refuses a missing or other claim (PeerIdentityError): with named keys an identity is
    authenticated, not just a claim (docs/FORMAT.md 5.2, K5). A key held by several parties
    authenticates "one of them" only (a mesh where every node holds every key: nothing between
    nodes). One key cannot have two names."""

    __slots__ = ("_given_names", "_keys", "_names", "_order")

    def __init__(
        self,
        keys: Iterable[Buffer]
        | Mapping[str, Buffer | Sequence[Buffer]]
        | Mapping[bytes, Buffer | Sequence[Buffer]],
    ) -> None:
        self._keys: dict[bytes, bytes] = {}
        self._names: dict[bytes, bytes] = {}  # as sent on the wire (UTF-8), for K5
        self._given_names: dict[bytes, str | bytes] = {}  # as the caller wrote them, for name()
        self._order: list[bytes] = []
        named = isinstance(keys, Mapping)
        pairs = (
            [(name, key) for name, value in keys.items() for key in _key_list(value)]
            if isinstance(keys, Mapping)
            else [(None, key) for key in keys]
        )
        for name, key in pairs:
            ident = key_id(key)
            if named:
                raw = check_identity(name, "a key's name")
                if self._names.get(ident, raw) != raw:
                    raise ValueError("one key cannot have two names in a KeyRing")
                self._names[ident] = raw
                self._given_names[ident] = name if isinstance(name, str) else raw
            if ident not in self._keys:
                self._keys[ident] = bytes(key)
                self._order.append(ident)
        if not self._order:
            raise ValueError("a KeyRing needs at least one key")

    @property
    def primary(self) -> bytes:
        return self._keys[self._order[0]]

    @property
    def primary_id(self) -> bytes:
        """The primary key's key ID, derived once with the ring (a channel names it in every
        header it makes: not an HKDF per connection)."""
        return self._order[0]

    def primary_only(self) -> KeyRing:
        """A ring of the primary key alone, unnamed, its key ID taken from this ring, not
        derived again: what an initiator accepts its responder's answer under."""
        ring = KeyRing.__new__(KeyRing)
        ident = self._order[0]
        ring._keys = {ident: self._keys[ident]}
        ring._names, ring._given_names, ring._order = {}, {}, [ident]
        return ring

    @property
    def key_ids(self) -> tuple[bytes, ...]:
        return tuple(self._order)

    def get(self, ident: bytes) -> bytes | None:
        """The key with this key ID, or None."""
        return self._keys.get(bytes(ident))

    def name(self, ident: bytes) -> str | bytes | None:
        """The name of the key with this key ID as it was given (a str stays a str), or None
        (unnamed, or not held). :meth:`identity` gives it as the peer sends it."""
        return self._given_names.get(bytes(ident))

    def identity(self, ident: bytes) -> bytes | None:
        """The name of the key with this key ID as its holder sends it (UTF-8 bytes, its
        ``local_id`` on the wire), or None (unnamed, or not held)."""
        return self._names.get(bytes(ident))

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:  # key IDs and names are public; keys never shown
        shown = (
            f"{self._names[ident].decode('utf-8', 'replace')}={ident.hex()[:8]}"
            if ident in self._names
            else ident.hex()[:8]
            for ident in self._order
        )
        return f"<KeyRing {', '.join(shown)}>"


def _key_list(value: Buffer | Sequence[Buffer]) -> Sequence[Buffer]:
    if isinstance(value, list | tuple):
        return value
    return [value]  # type: ignore[list-item]  # (a Buffer: bytes, bytearray, memoryview)


MAX_IDENTITY_SIZE = 255


def check_identity(value: str | bytes | None, name: str) -> bytes:
    """An identity (a ``local_id``, ``peer_id`` or key name) as bytes: UTF-8 for text, 1 to
    ``MAX_IDENTITY_SIZE`` bytes."""
    if not isinstance(value, str | bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be str or bytes, got {type(value).__name__}")
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if not 1 <= len(raw) <= MAX_IDENTITY_SIZE:
        raise ValueError(f"{name} must be 1 to {MAX_IDENTITY_SIZE} bytes, got {len(raw)}")
    return raw


Keys = Buffer | KeyRing


def as_key_ring(key: Keys) -> KeyRing:
    return key if isinstance(key, KeyRing) else KeyRing([key])


@dataclass(frozen=True)
class HeaderStart:
    """The fixed part of a header (its first 62 bytes), checked for range, not yet verified."""

    role: Role
    suite: Suite
    key_exchange: KeyExchange
    record_size: int
    key_id: bytes
    salt: bytes
    fields_length: int

    @property
    def size(self) -> int:
        """Bytes of the whole header: fixed part, fields, commitment."""
        return HEADER_FIXED_SIZE + self.fields_length + COMMITMENT_SIZE


@dataclass(frozen=True)
class StreamHeader:
    """The parsed fields of a stream header."""

    role: Role
    suite: Suite
    key_exchange: KeyExchange
    record_size: int
    key_id: bytes
    salt: bytes
    #: each field as (type, start, end): its value is ``raw[start:end]``. The header is held
    #: once, in ``raw``; values are sliced when asked for (an unconfirmed peer costs one copy).
    field_spans: tuple[tuple[int, int, int], ...]
    commitment: bytes
    raw: bytes

    @property
    def fields(self) -> tuple[tuple[int, bytes], ...]:
        """Every field as (type, value), in order."""
        return tuple((kind, self.raw[start:end]) for kind, start, end in self.field_spans)

    @property
    def field_types(self) -> tuple[int, ...]:
        return tuple(kind for kind, _, _ in self.field_spans)

    def field(self, field_type: int) -> bytes | None:
        for kind, start, end in self.field_spans:
            if kind == field_type:
                return self.raw[start:end]
        return None


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


def encode_fields(fields: Iterable[tuple[int, bytes]], max_size: int = MAX_FIELDS_SIZE) -> bytes:
    """Fields in canonical form: strictly increasing types, each value under 64 KiB, all of
    them at most ``max_size`` bytes."""
    out = bytearray()
    last = -1
    for kind, value in fields:
        if not last < kind < 0x10000 or len(value) > 0xFFFF:
            raise ValueError("header fields must have increasing types and values under 64 KiB")
        out += FIELD_HEADER.pack(kind, len(value)) + value
        last = kind
    if len(out) > max_size:
        raise ValueError(f"header fields of {len(out)} bytes exceed {max_size} bytes")
    return bytes(out)


def sha256(data: Buffer) -> bytes:
    """SHA-256 of ``data`` by cryptography, as every other primitive here: hashlib would load
    Python's own OpenSSL (``_hashlib``, 3.7 MiB of RSS) beside cryptography's."""
    digest = hashes.Hash(SHA256)
    digest.update(bytes(data))
    return digest.finalize()


def context_digest(context: Buffer) -> bytes:
    """SHA-256 of a context, which the key schedule hashes into HKDF's info: the contexts of a
    process are few and public, so each is hashed once, not three times per handshake."""
    return _context_digest(bytes(context))


@functools.lru_cache(maxsize=64)
def _context_digest(context: bytes) -> bytes:
    return sha256(context)


def _header_keys(key: Buffer, body: Buffer, salt: bytes, context: bytes) -> tuple[bytes, bytes]:
    """(commitment, stream secret) of a header whose bytes before the commitment are ``body``."""
    okm = _header_kdf(body, salt, context, COMMITMENT_SIZE + 32).derive(bytes(key))
    return okm[:COMMITMENT_SIZE], okm[COMMITMENT_SIZE:]


def _header_kdf(body: Buffer, salt: bytes, context: bytes, length: int) -> HKDF:
    """The HKDF of a header's commitment and stream secret: its first ``length`` bytes (the
    commitment is the first 32 whatever the length). HKDF's info holds hashes, so it stays
    short (84 bytes) whatever the fields and context."""
    info = _LABEL_HEADER + sha256(body) + context_digest(context)
    return HKDF(algorithm=SHA256, length=length, salt=salt, info=info)


def make_header(
    key: Buffer,
    role: Role,
    record_size: int,
    context: Buffer,
    salt: bytes | None = None,
    *,
    key_exchange: KeyExchange = KeyExchange.NONE,
    fields: Iterable[tuple[int, bytes]] = (),
    max_fields_size: int = MAX_FIELDS_SIZE,
    ident: bytes | None = None,
) -> tuple[bytes, bytes]:
    """A new header for ``key`` and its stream secret: (header bytes, secret). ``ident``: the
    key's ID where the caller has it (a KeyRing's, or the verified header that named the key),
    so that it is not derived again per connection; else ``key_id(key)``."""
    suite = Suite.for_key(key)
    check_record_size(record_size)
    ctx = check_context(context)
    if salt is None:
        salt = os.urandom(SALT_SIZE)
    elif len(salt) != SALT_SIZE:
        raise ValueError(f"salt must be {SALT_SIZE} bytes, got {len(salt)}")
    encoded = encode_fields(fields, max_fields_size)
    body = (
        HEADER_FIXED.pack(
            MAGIC, VERSION, role, suite, key_exchange, record_size, ident or key_id(key), salt, len(encoded)
        )
        + encoded
    )
    commitment, secret = _header_keys(key, body, salt, ctx)
    return body + commitment, secret


def check_header_start(start: Buffer) -> None:
    """Reject a stream by its first bytes (magic, version) before the fixed part arrives, so
    garbage or another format is named as such rather than as a truncation (checks H1, H2)."""
    start = bytes(start[: len(MAGIC) + 1])
    magic = start[: len(MAGIC)]
    if magic != MAGIC[: len(magic)]:
        if start.startswith(b"-----"):  # armor.BEGIN_LINE's start: every PEM's, never binary
            armored = ArmoredInputError(
                "the input is armored text ('-----BEGIN ...', gcmstream encrypt -a): this reader "
                "takes the binary form (random access needs a binary file to seek in); "
                "'gcmstream decrypt' and gcmstream.armor.dearmor read armor"
            )
            armored.rule = "H1"
            raise armored
        raise header_fault(
            "H1",
            # The input's own bytes are not shown: they may be plaintext or a key given here
            # by mistake (a new user found 4 characters of a key file in this message).
            f'not a gcmstream stream: it does not start with the 4 bytes "{MAGIC.decode()}" '
            "(gcmstream's magic)",
        )
    if len(start) > len(MAGIC) and start[len(MAGIC)] != VERSION:
        version = start[len(MAGIC)]
        dropped = " (version 1 was never released and is no longer read)" if version == 1 else ""
        raise header_fault(
            "H2", f"format version {version} is not supported (this reads version {VERSION}){dropped}"
        )


def parse_header_start(raw: Buffer, max_fields_size: int = MAX_FIELDS_SIZE) -> HeaderStart:
    """Check the fixed part (checks H1..H7 of docs/FORMAT.md 8.1) without a key. Fields
    longer than ``max_fields_size`` are refused (a reader of recipient stanzas allows more)."""
    raw = bytes(raw[:HEADER_FIXED_SIZE])
    check_header_start(raw)  # H1, H2 first: a short start of another format is that format's
    if len(raw) != HEADER_FIXED_SIZE:
        raise header_fault("H3", f"a header starts with {HEADER_FIXED_SIZE} fixed bytes, got {len(raw)}")
    _, _, role, suite, exchange, record_size, ident, salt, fields_length = HEADER_FIXED.unpack(raw)
    if role not in Role.__members__.values():
        raise header_fault("H3", f"role {role} is not defined (expected 0, 1 or 2)")
    if suite not in Suite.__members__.values():
        raise header_fault("H4", f"cipher suite {suite} is not supported (expected 1 or 2)")
    if exchange not in KeyExchange.__members__.values():
        raise header_fault("H5", f"key exchange {exchange} is not supported (expected 0, 1 or 2)")
    if (exchange == KeyExchange.NONE) != (role == Role.ONE_WAY):
        raise header_fault("H5", f"key exchange {exchange} does not go with role {Role(role).name}")
    if not 1 <= record_size <= HARD_MAX_RECORD_SIZE:
        raise header_fault("H6", f"record size {record_size} is outside 1..{HARD_MAX_RECORD_SIZE}")
    start = HeaderStart(
        Role(role), Suite(suite), KeyExchange(exchange), record_size, ident, salt, fields_length
    )
    check_fields_length(start, max_fields_size)
    return start


def check_fields_length(start: HeaderStart, max_fields_size: int) -> None:
    """Check H7: the fields fit the reader's bound. The Opener runs it after H8..H11, so that a
    key given for a file sealed to recipients is the wrong key (H10) whatever its stanzas' size."""
    if start.fields_length > max_fields_size:
        raise header_fault(
            "H7", f"header fields of {start.fields_length} bytes exceed {max_fields_size} bytes"
        )


def check_role(start: HeaderStart, expected: Role) -> None:
    """Check H9: the header's role is the one this reader reads (a file's reader: ONE_WAY), for
    the Opener and for the command line's unverified look at a file's header alike."""
    if start.role != expected:
        reason = " (a stream reflected back to its sender?)" if start.role == expected.peer else ""
        raise header_fault("H9", f"peer header has role {start.role.name}, expected {expected.name}{reason}")


def parse_fields(data: bytes) -> tuple[tuple[int, bytes], ...]:
    """Split the fields area (check H12): whole fields, strictly increasing types."""
    return tuple((kind, data[start:end]) for kind, start, end in _field_spans(data, 0, len(data)))


def sealed_with(fields: Iterable[tuple[int, bytes]]) -> Literal["key", "recipients", "passphrase"]:
    """ "key", "recipients" or "passphrase": what a one-way header's fields say sealed its
    stream (4.4: a stanza field, or none for a key). Unverified when read before the
    commitment: it words a message (what to give instead), it decides nothing."""
    kinds = {kind for kind, _ in fields}
    if FieldType.RECIPIENT_STANZAS in kinds:
        return "recipients"
    return "passphrase" if FieldType.PASSPHRASE_STANZA in kinds else "key"


def _field_spans(data: bytes, pos: int, stop: int) -> tuple[tuple[int, int, int], ...]:
    """(type, start, end) of each field in ``data[pos:stop]`` (check H12)."""
    spans = []
    last = -1
    while pos < stop:
        if stop - pos < FIELD_HEADER.size:
            raise header_fault("H13", "header fields end inside a field header")
        kind, length = FIELD_HEADER.unpack_from(data, pos)
        pos += FIELD_HEADER.size
        if length > stop - pos:
            raise header_fault("H13", f"header field 0x{kind:04x} runs past the end of the fields")
        if kind <= last:
            raise header_fault("H13", f"header field 0x{kind:04x} is out of order or repeated")
        spans.append((kind, pos, pos + length))
        pos += length
        last = kind
    return tuple(spans)


def parse_header(
    raw: Buffer,
    known_fields: Iterable[int] = (),
    max_fields_size: int = MAX_FIELDS_SIZE,
    start: HeaderStart | None = None,
) -> StreamHeader:
    """Parse a whole header without checking its commitment (no key needed). A critical field
    type outside ``known_fields`` raises UnknownFieldError. ``start``: the fixed part of this
    ``raw`` as ``parse_header_start`` gave it already (with this ``max_fields_size`` checked)."""
    raw = bytes(raw)
    if start is None:
        start = parse_header_start(raw, max_fields_size)
    if len(raw) != start.size:
        raise header_fault("H13", f"stream header must be {start.size} bytes, got {len(raw)}")
    end = HEADER_FIXED_SIZE + start.fields_length
    spans = _field_spans(raw, HEADER_FIXED_SIZE, end)
    known = set(known_fields)
    for kind, _, _ in spans:
        if kind < FIELD_CRITICAL_LIMIT and kind not in known:
            raise header_fault(
                "H14", f"header has critical field 0x{kind:04x}, which this reader does not know"
            )
    return StreamHeader(
        role=start.role,
        suite=start.suite,
        key_exchange=start.key_exchange,
        record_size=start.record_size,
        key_id=start.key_id,
        salt=start.salt,
        field_spans=spans,
        commitment=raw[end:],
        raw=raw,
    )


def find_key(keys: KeyRing, start: HeaderStart) -> bytes:
    """The key a header names (check H10), and its suite (H11)."""
    key = keys.get(start.key_id)
    if key is None:
        raise header_fault("H10", f"the stream's key ID {start.key_id.hex()} names no key held here")
    suite = Suite.for_key(key)
    if suite != start.suite:  # only a writer that lies about its key's size gets here
        raise header_fault("H11", f"stream uses {start.suite.name} but its key is for {suite.name}")
    return key


def verify_commitment(key: Buffer, raw: bytes, context: Buffer) -> bytes:
    """Check the commitment of a whole header ``raw`` in constant time (check H12); return its
    stream secret. The suite and key ID were checked already (``find_key``)."""
    body = raw[: len(raw) - COMMITMENT_SIZE]
    salt = raw[SALT_SLICE]
    context = check_context(context)
    try:  # compared in cryptography's Rust: hmac.compare_digest would load _hashlib (3.7 MiB)
        _header_kdf(body, salt, context, COMMITMENT_SIZE).verify(bytes(key), raw[len(body) :])
    except InvalidKey:
        raise header_fault(
            "H12",
            "stream header does not match this key and context "
            "(wrong key, wrong context, or an altered header)",
        ) from None
    return _header_keys(key, body, salt, context)[1]


def verify_header(key: Buffer, header: StreamHeader, context: Buffer) -> bytes:
    """Check the header's key commitment in constant time; return its stream secret."""
    suite = Suite.for_key(key)
    if suite != header.suite:
        # The key length is the caller's choice, the suite the writer's: say which is which.
        raise header_fault("H11", f"stream uses {header.suite.name} but the key given is for {suite.name}")
    return verify_commitment(key, header.raw, context)


def _expand(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDFExpand(algorithm=SHA256, length=length, info=label).derive(secret)


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
        """The nonce of record ``seq``, ``iv XOR seq`` (docs/FORMAT.md): the definition as it
        reads, kept for the tests and the vector generators that check ``nonce_into`` (the
        per-record path, which allocates nothing) against it."""
        return (self.iv ^ seq).to_bytes(NONCE_SIZE, "big")

    def nonce_into(self, seq: int) -> bytearray:
        """nonce(seq) in a buffer this object reuses: valid until the next call. One int is
        the only allocation, which matters once per record."""
        _NONCE_LOW.pack_into(self._nonce, 4, self._iv_low ^ seq)
        return self._nonce

    def next(self) -> TrafficKeys:
        """The next generation: secret' = HKDF-Expand(secret, "gcmstream/2 key update")."""
        return TrafficKeys(_expand(self.secret, _LABEL_UPDATE, 32), self.suite, self.generation + 1)

    def __repr__(self) -> str:  # never show key material
        return f"<TrafficKeys {self.suite.name} generation={self.generation}>"
