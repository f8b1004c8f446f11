"""Tink's AES-GCM-HKDF streaming AEAD, read and written by gcmstream (docs/TINK.md).

A Tink ciphertext is ``header || segment_0 || ... || segment_{n-1}``: the header is one length
byte, a random salt (the derived key's size) and a random 7-byte nonce prefix; every segment is
``ciphertext_segment_size`` bytes but the first (shorter by the header) and the last (1 to
``ciphertext_segment_size`` bytes, at least the 16-byte tag). Each segment is AES-GCM under the
key ``HKDF(hash, ikm=key_value, salt=salt, info=associated_data)``, with the nonce
``prefix || index || last`` (``records.TinkSegments``, the only code that seals or opens one)
and no associated data of its own.

:class:`TinkSealer` and :class:`TinkOpener` are sans-IO, as gcmstream's Sealer and Opener:
``seal``/``close`` return the bytes to write; ``receive_data``/``receive_eof`` take the bytes
read, and ``readinto``/``read``/``read_view`` return only plaintext of segments that have
authenticated. :func:`read_tink_keyset` reads Tink's JSON cleartext keyset (what ``tinkey``
and ``cleartext_keyset_handle`` write).

What Tink's format does not give, and gcmstream's does (SECURITY.md): no key commitment (a
ciphertext can be made to open under two keys), no key ID (a reader tries each key of its
keyset on the first segment), and no end marker beyond the last segment's nonce flag.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import os
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, Final, NoReturn, SupportsIndex, TypeGuard

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._turn import Turn
from .errors import (
    AuthenticationError,
    BufferFullError,
    GcmStreamError,
    KeyFileError,
    LimitReachedError,
    MalformedHeaderError,
    OutOfRangeError,
    ProtocolError,
    StreamBrokenError,
    StreamClosedError,
    TruncatedStreamError,
)
from .format import TAG_SIZE, Buffer, Suite, byte_view
from .records import TinkSegments

__all__ = (
    "TINK_KEY_TYPE_URL",
    "TinkHash",
    "TinkHeader",
    "TinkKeyset",
    "TinkOpener",
    "TinkPhase",
    "TinkSealer",
    "TinkStreamingKey",
    "as_tink_keyset",
    "read_tink_keyset",
    "refuse_beside_tink",
    "tink_decrypt",
    "tink_encrypt",
)

TINK_KEY_TYPE_URL: Final = "type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey"
NONCE_PREFIX_SIZE: Final = 7
# a keyset file larger than this is not a keyset: refused before it is parsed
MAX_KEYSET_SIZE: Final = 1 << 20


class TinkHash(enum.IntEnum):
    """The HKDF hashes Tink offers for this key type, by their value in Tink's ``HashType``."""

    SHA1 = 1
    SHA256 = 3
    SHA512 = 4

    def algorithm(self) -> hashes.HashAlgorithm:
        if self is TinkHash.SHA1:
            return hashes.SHA1()  # noqa: S303 (Tink offers HKDF-SHA1; HKDF needs no collision resistance)
        return hashes.SHA256() if self is TinkHash.SHA256 else hashes.SHA512()


class TinkStreamingKey:
    """One ``AesGcmHkdfStreamingKey``: the key value and its three parameters, checked as Tink
    checks them (``derived_key_size`` 16 or 32, ``key_value`` at least that long and at least
    16 bytes, ``ciphertext_segment_size`` above the header plus the tag and below 2^31).
    ``key_id`` is the keyset's ID for it (None for raw parameters). The repr never shows the
    key value."""

    __slots__ = ("ciphertext_segment_size", "derived_key_size", "hkdf_hash", "key_id", "key_value")

    def __init__(
        self,
        key_value: bytes,
        *,
        derived_key_size: int = 16,
        hkdf_hash: TinkHash = TinkHash.SHA256,
        ciphertext_segment_size: int = 4096,
        key_id: int | None = None,
    ) -> None:
        if not isinstance(key_value, bytes):
            raise TypeError(f"key_value must be bytes, got {type(key_value).__name__}")
        if derived_key_size not in (16, 32):
            raise ValueError(f"derived_key_size must be 16 or 32, got {derived_key_size!r}")
        if len(key_value) < max(16, derived_key_size):
            raise ValueError(
                f"key_value must be at least {max(16, derived_key_size)} bytes for derived_key_size "
                f"{derived_key_size}, got {len(key_value)}"
            )
        hkdf_hash = TinkHash(hkdf_hash)
        header = _header_size_for(derived_key_size)
        if isinstance(ciphertext_segment_size, bool) or not isinstance(ciphertext_segment_size, int):
            raise TypeError("ciphertext_segment_size must be an int")
        if not header + TAG_SIZE < ciphertext_segment_size < 1 << 31:
            raise ValueError(
                f"ciphertext_segment_size must be above {header + TAG_SIZE} (header and tag) and "
                f"below 2^31, got {ciphertext_segment_size}"
            )
        self.key_value = key_value
        self.derived_key_size = derived_key_size
        self.hkdf_hash = hkdf_hash
        self.ciphertext_segment_size = ciphertext_segment_size
        self.key_id = key_id

    def __repr__(self) -> str:
        return (
            f"TinkStreamingKey(key_id={self.key_id!r}, derived_key_size={self.derived_key_size}, "
            f"hkdf_hash={self.hkdf_hash.name}, ciphertext_segment_size={self.ciphertext_segment_size})"
        )

    @property
    def header_size(self) -> int:
        return _header_size_for(self.derived_key_size)

    def segments(self, salt: bytes, nonce_prefix: bytes, associated_data: bytes) -> TinkSegments:
        """The segment cipher of one stream: HKDF of the key value with the stream's salt and
        the associated data as info, Tink's derivation."""
        derived = HKDF(
            algorithm=self.hkdf_hash.algorithm(),
            length=self.derived_key_size,
            salt=salt,
            info=associated_data,
        ).derive(self.key_value)
        return TinkSegments(AESGCM(derived), nonce_prefix)


def _header_size_for(derived_key_size: int) -> int:
    """1 length byte, the salt, the nonce prefix: 24 or 40 bytes."""
    return 1 + derived_key_size + NONCE_PREFIX_SIZE


class TinkKeyset:
    """The AES-GCM-HKDF streaming keys of a Tink keyset: ``primary`` seals, and a reader tries
    every key (the primary first) on the first segment, as Tink does."""

    __slots__ = ("keys", "primary")

    def __init__(self, keys: Sequence[TinkStreamingKey], primary: TinkStreamingKey | None = None) -> None:
        if not keys:
            raise ValueError("a keyset needs at least one key")
        self.primary = keys[0] if primary is None else primary
        self.keys = (self.primary, *(key for key in keys if key is not self.primary))

    def __repr__(self) -> str:
        return f"TinkKeyset(primary={self.primary.key_id!r}, keys={[key.key_id for key in self.keys]!r})"


def as_tink_keyset(keys: TinkKeyset | TinkStreamingKey) -> TinkKeyset:
    if isinstance(keys, TinkKeyset):
        return keys
    if isinstance(keys, TinkStreamingKey):
        return TinkKeyset([keys])
    raise TypeError(f"expected a TinkKeyset or TinkStreamingKey, got {type(keys).__name__}")


# -- the keyset file ------------------------------------------------------------------------


def read_tink_keyset(text: str | bytes) -> TinkKeyset:
    """Parse Tink's JSON cleartext keyset. Its enabled ``AesGcmHkdfStreamingKey`` entries
    become the keyset, the primary first; KeyFileError (naming the reason, never a key) for
    anything else: malformed JSON or protobuf, an encrypted keyset (it needs a KMS), a key of
    another type, no enabled primary."""
    document = _keyset_document(text)
    entries = document.get("key")
    primary_id = document.get("primaryKeyId")
    if not isinstance(entries, list) or not entries:
        raise KeyFileError("not a Tink JSON keyset: no 'key' list")
    keys: list[TinkStreamingKey] = []
    primary: TinkStreamingKey | None = None
    if not _is_key_id(primary_id):
        raise KeyFileError(
            f"the keyset's primaryKeyId {primary_id!r} is not a key ID (an integer below 2^32)"
        )
    for entry in entries:
        key = _keyset_entry(entry)
        if key is None:
            continue
        keys.append(key)
        if key.key_id == primary_id:
            if primary is not None:
                raise KeyFileError(f"the keyset has two enabled keys with the primary's ID {primary_id}")
            primary = key
    if primary is None:
        raise KeyFileError(f"the keyset's primary key {primary_id!r} is not an enabled key of the keyset")
    return TinkKeyset(keys, primary)


def _keyset_document(text: str | bytes) -> dict[str, Any]:
    """The keyset file's JSON object, bounded and checked before it is read as a keyset."""
    if len(text) > MAX_KEYSET_SIZE:
        raise KeyFileError(f"a Tink keyset is at most {MAX_KEYSET_SIZE} bytes, this is {len(text)}")
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nesting
        raise KeyFileError(f"not a Tink JSON keyset: {type(exc).__name__} at the JSON level") from None
    if not isinstance(document, dict):
        raise KeyFileError("not a Tink JSON keyset: the top level is not an object")
    if "encryptedKeyset" in document:
        raise KeyFileError(
            "an encrypted Tink keyset: it is sealed by a KMS key, which gcmstream cannot reach; "
            "export it as a cleartext keyset (tinkey convert-keyset --out-format json)"
        )
    return document


def _is_key_id(value: object) -> TypeGuard[int]:
    """Tink's key IDs are uint32."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32


def _keyset_entry(entry: Any) -> TinkStreamingKey | None:
    """One entry of the keyset's 'key' list: its key, or None when it is not enabled."""
    if not isinstance(entry, dict):
        raise KeyFileError("a keyset entry is not an object")
    key_id, status, data = entry.get("keyId"), entry.get("status"), entry.get("keyData")
    if not _is_key_id(key_id) or not isinstance(data, dict):
        raise KeyFileError("a keyset entry lacks its keyId (an integer below 2^32) or keyData")
    type_url = data.get("typeUrl")
    if type_url != TINK_KEY_TYPE_URL:
        raise KeyFileError(
            f"key {key_id} is a {type_url!r}: gcmstream reads only AesGcmHkdfStreamingKey keysets"
        )
    if status != "ENABLED":
        if status in ("DISABLED", "DESTROYED"):
            return None
        raise KeyFileError(f"key {key_id} has the unknown status {status!r}")
    if data.get("keyMaterialType") != "SYMMETRIC" or entry.get("outputPrefixType") != "RAW":
        raise KeyFileError(f"key {key_id}: a streaming key is SYMMETRIC with output prefix RAW")
    value = data.get("value")
    if not isinstance(value, str):
        raise KeyFileError(f"key {key_id} has no value")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"key {key_id}: its value is not base64") from None
    try:
        return _streaming_key(raw, key_id)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"key {key_id}: {exc}") from None


def _streaming_key(serialized: bytes, key_id: int) -> TinkStreamingKey:
    """An ``AesGcmHkdfStreamingKey`` protobuf: version (1), params (2: ciphertext segment size
    1, derived key size 2, HKDF hash 3), key value (3). Fields it does not know are skipped, as
    protobuf parsers do."""
    fields = dict(_protobuf_fields(serialized))
    version = fields.get(1, 0)
    if version != 0:
        raise ValueError(f"key version {version!r} is not 0")
    params = fields.get(2, b"")
    key_value = fields.get(3, b"")
    if not isinstance(params, bytes) or not isinstance(key_value, bytes):
        raise ValueError("malformed key protobuf")
    parameters = dict(_protobuf_fields(params))
    segment, derived, hash_type = parameters.get(1, 0), parameters.get(2, 0), parameters.get(3, 0)
    if not (isinstance(segment, int) and isinstance(derived, int) and isinstance(hash_type, int)):
        raise ValueError("malformed key parameters")
    if hash_type not in set(TinkHash):
        raise ValueError(f"HKDF hash type {hash_type} is not one Tink offers here (SHA1, SHA256, SHA512)")
    return TinkStreamingKey(
        key_value,
        derived_key_size=derived,
        hkdf_hash=TinkHash(hash_type),
        ciphertext_segment_size=segment,
        key_id=key_id,
    )


def _protobuf_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes;
    fixed-size fields skipped; every length checked against what is left."""
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("malformed protobuf: field number 0")
        if wire_type == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            if length > end - pos:
                raise ValueError("malformed protobuf: a length past the end")
            yield number, data[pos : pos + length]
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            if pos > end:
                raise ValueError("malformed protobuf: a fixed field past the end")
        else:
            raise ValueError(f"malformed protobuf: wire type {wire_type}")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise ValueError("malformed protobuf: a varint past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise ValueError("malformed protobuf: a varint over 10 bytes")


# -- sealing --------------------------------------------------------------------------------


class TinkSealer:
    """Seals one Tink stream under ``key`` (a keyset's primary) with ``associated_data``.

    ``seal(data)`` returns the ciphertext ready so far (the header first); the last segment is
    held back until ``close()``, because Tink marks the last segment in its nonce and a full
    segment may turn out to be the last. A returned view stays valid until the next call.
    One thread at a time (ConcurrencyError, as the Sealer), and it cannot be copied or pickled:
    a copy would seal from the same segment index under the same key and nonce prefix.
    """

    __slots__ = (
        "__weakref__",  # the file engine remembers a failed sealer (files._fatal)
        "_closed",
        "_first",
        "_header",
        "_held",
        "_held_len",
        "_index",
        "_out",
        "_sealed_bytes",
        "_segments",
        "_size",
        "_turn",
        "_wire",
        "suite",
    )

    def __init__(self, key: TinkKeyset | TinkStreamingKey, associated_data: Buffer = b"") -> None:
        key = as_tink_keyset(key).primary
        salt = os.urandom(key.derived_key_size)
        prefix = os.urandom(NONCE_PREFIX_SIZE)
        self._segments = key.segments(salt, prefix, bytes(associated_data))
        self._header: bytes | None = bytes([key.header_size]) + salt + prefix
        self._wire = key.ciphertext_segment_size
        self._size = key.ciphertext_segment_size - TAG_SIZE  # a middle segment's plaintext
        self._first = self._size - key.header_size  # the first is shorter by the header
        self._held = bytearray(self._size)
        self._held_len = 0
        self._index = 0
        self._out = bytearray()
        self._closed = False
        self._turn = Turn("this TinkSealer")
        self._sealed_bytes = 0
        # the segments' AEAD, named as gcmstream's suites (connection statistics)
        self.suite = Suite.AES_128_GCM if key.derived_key_size == 16 else Suite.AES_256_GCM

    def __repr__(self) -> str:
        return f"<TinkSealer segments={self._index} closed={self._closed}>"

    def __copy__(self) -> TinkSealer:
        raise TypeError("a TinkSealer cannot be copied: the copy would reuse its segment nonces")

    def __deepcopy__(self, memo: object) -> TinkSealer:
        raise TypeError("a TinkSealer cannot be copied: the copy would reuse its segment nonces")

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError("a TinkSealer cannot be pickled: the copy would reuse its segment nonces")

    @property
    def segments_sealed(self) -> int:
        return self._index

    # -- the names gcmstream's Sealer has, so that every surface drives either ----------------

    @property
    def records_sealed(self) -> int:
        """Segments sealed (the name the adapters and the file engine read)."""
        return self._index

    @property
    def bytes_sealed(self) -> int:
        """Plaintext bytes sealed into segments so far (held bytes not yet)."""
        return self._sealed_bytes

    @property
    def record_size(self) -> int:
        """Plaintext bytes of a full segment (segment 0 holds the header's size less)."""
        return self._size

    @property
    def pending(self) -> int:
        """Plaintext bytes held for the next segment (or the last: sealed by ``close()``)."""
        return self._held_len

    @property
    def closed(self) -> bool:
        return self._closed

    def flush(self) -> memoryview:
        """Nothing: Tink's segments are full but the last, so held bytes wait for a full
        segment or ``close()`` (a short middle segment would not be Tink's format)."""
        if self._closed:
            raise StreamClosedError("flush() after close(): the Tink stream is ended")
        return memoryview(b"")

    def detach_output(self) -> None:
        """The last returned output is now owned elsewhere (a transport still holds it): the
        next call writes into fresh memory."""
        self._out = bytearray()

    def _sealable(self, total: int) -> int:
        """Segments that ``total`` plaintext bytes (held and new) complete, keeping at least
        one byte back for the last segment."""
        capacity = self._first if self._index == 0 else self._size
        if total <= capacity:
            return 0
        return 1 + (total - capacity - 1) // self._size

    def seal(self, data: Buffer, *, flush: bool = False, final: bool = False) -> memoryview:
        """Seal ``data``: returns the header (first call) and every segment now known not to
        be the last. LimitReachedError, with nothing sealed, if the stream would pass 2^32
        segments (the nonce's index field). The keywords are Sealer's: ``flush`` seals nothing
        more (see :meth:`flush`); ``final`` ends the stream as ``close()`` does."""
        with self._turn:
            if final:
                head = bytes(self._seal(data))  # (close() reuses the output buffer)
                return memoryview(head + bytes(self._close()))
            return self._seal(data)

    def _seal(self, data: Buffer) -> memoryview:
        if self._closed:
            raise StreamClosedError("seal() after close(): the Tink stream is ended")
        view = byte_view(data)
        if view.obj is self._out:  # this sealer's own earlier output: sealing overwrites it
            view = memoryview(bytes(view))
        first_index = self._index
        sealable = self._sealable(self._held_len + len(view))
        if self._index + sealable + 1 > TinkSegments.MAX_SEGMENTS:  # and one left for the last
            raise LimitReachedError(
                "a Tink stream holds at most 2^32 segments: nothing of this call was sealed; close() it"
            )
        header = self._header or b""
        out = self._output(len(header) + sealable * self._wire)
        out[: len(header)] = header
        self._header = None
        written = len(header)
        capacity = self._first if self._index == 0 else self._size
        if self._held_len:
            take = min(capacity - self._held_len, len(view))
            self._held[self._held_len : self._held_len + take] = view[:take]
            self._held_len += take
            view = view[take:]
            if not view:  # the held segment may still be the last
                return out[:written]  # (nothing sealed: header at most)
            self._segments.seal(
                self._index,
                False,
                memoryview(self._held)[:capacity],
                out[written : written + capacity + TAG_SIZE],
            )
            written += capacity + TAG_SIZE
            self._index += 1
            self._held_len = 0
            capacity = self._size
        if self._index == 0 and len(view) > capacity:  # the short first segment
            self._segments.seal(0, False, view[:capacity], out[written : written + capacity + TAG_SIZE])
            written += capacity + TAG_SIZE
            self._index = 1
            view = view[capacity:]
            capacity = self._size
        if len(view) > capacity:  # middle segments straight from ``data``, one kept back
            run = (len(view) - 1) // capacity * capacity
            written += self._segments.seal_run(self._index, view[:run], capacity, out[written:])
            self._index += run // capacity
            view = view[run:]
        self._held[: len(view)] = view
        self._held_len = len(view)
        self._sealed_bytes += written - len(header) - (self._index - first_index) * TAG_SIZE
        return out[:written]

    def close(self) -> memoryview:
        """Seal what is held as the last segment (an empty stream is the header and one empty
        last segment) and end the stream; a later ``seal``/``close`` raises
        StreamClosedError."""
        with self._turn:
            return self._close()

    def _close(self) -> memoryview:
        if self._closed:
            raise StreamClosedError("close() twice: the Tink stream is ended")
        header = self._header or b""
        size = len(header) + self._held_len + TAG_SIZE
        out = self._output(size)
        out[: len(header)] = header
        self._segments.seal(
            self._index, True, memoryview(self._held)[: self._held_len], out[len(header) : size]
        )
        self._index += 1
        self._sealed_bytes += self._held_len
        self._held[:] = bytes(len(self._held))
        self._held_len = 0
        self._header = None
        self._closed = True
        return out

    def _output(self, size: int) -> memoryview:
        # a fresh buffer when it must grow: a view returned earlier may still be held
        if len(self._out) < size:
            self._out = bytearray(size)
        return memoryview(self._out)[:size]


# -- opening --------------------------------------------------------------------------------


class TinkHeader:
    """What a Tink stream's header and segment 0 told a reader: the key that authenticated
    it (``key.key_id``: the keyset's ID, or None) and the sizes it gives."""

    __slots__ = ("key",)

    def __init__(self, key: TinkStreamingKey) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"TinkHeader({self.key!r})"

    @property
    def record_size(self) -> int:
        """Plaintext bytes of a full segment."""
        return self.key.ciphertext_segment_size - TAG_SIZE


class TinkPhase(enum.Enum):
    """Where a TinkOpener is: reading the header, opening segments, at the authenticated
    end, or failed for good."""

    HEADER = "header"
    SEGMENTS = "segments"
    DONE = "done"
    FAILED = "failed"


class TinkOpener:
    """Opens one Tink stream with ``keys`` (a keyset: the keys whose header length the stream's
    header byte names are tried on segment 0, as Tink does) and ``associated_data``.

    Feed it with ``receive_data`` and ``receive_eof``; take plaintext with ``readinto``,
    ``read`` or ``read_view``, which return None while more input is needed and an empty
    result at the end. Only plaintext of segments that authenticated is returned. A stream
    that fails raises AuthenticationError (a segment did not authenticate: tampered, reordered,
    a wrong key or associated data; ``record_number`` is the segment's index),
    TruncatedStreamError (input ended before the last segment) or MalformedHeaderError, and
    every later read raises StreamBrokenError. Tink's format marks the end only in the last
    segment's nonce, so the last full segment waits until more input or the end arrives.

    Input: ``bytes`` pieces of 64 KiB or more are kept by reference and opened in place (no
    copy); smaller pieces and other buffers are copied into one buffer, so input costs about
    its size however it is cut. Unread input is bounded: ``receive_data`` raises
    BufferFullError while twice the largest segment the stream may use (at least 1 MiB) is
    already held; read, then feed again. One thread at a time (ConcurrencyError, as the
    Opener).
    """

    __slots__ = (
        "__weakref__",  # the file engine remembers a failed opener (files._fatal)
        "_associated_data",
        "_available",
        "_chosen",
        "_deferred",
        "_eof",
        "_error",
        "_failed_keys",
        "_index",
        "_keys",
        "_offset",
        "_opened_bytes",
        "_phase",
        "_pieces",
        "_plain",
        "_plain_end",
        "_plain_start",
        "_scratch",
        "_segments",
        "_truncated",
        "_turn",
        "_wire",
    )

    def __init__(self, keys: TinkKeyset | TinkStreamingKey, associated_data: Buffer = b"") -> None:
        self._keys = as_tink_keyset(keys)
        self._associated_data = bytes(associated_data)
        self._phase = TinkPhase.HEADER
        # unread input: whole pieces, the first read from ``_offset`` on; a small piece is
        # appended to the last one when that is a bytearray of ours
        self._pieces: deque[bytes | bytearray] = deque()
        self._offset = 0
        self._available = 0
        self._eof = False
        self._error: GcmStreamError | None = None
        # a segment's error found after earlier segments of the same call opened: raised by
        # the next read, once their plaintext has been returned (one slot)
        self._deferred: ProtocolError | None = None
        self._index = 0
        self._segments: TinkSegments | None = None
        self._chosen: TinkStreamingKey | None = None
        self._failed_keys: list[TinkStreamingKey] = []  # segment 0 did not open under them
        self._truncated = False  # one of them opened segment 0 as a middle one at the end
        self._wire = 0  # the chosen key's ciphertext segment size
        self._plain = bytearray()
        self._plain_start = self._plain_end = 0
        self._turn = Turn("this TinkOpener")
        self._opened_bytes = 0
        self._scratch: bytearray | None = None  # get_buffer's receive buffer

    def __repr__(self) -> str:
        return f"<TinkOpener phase={self._phase.value} segments={self._index}>"

    def __copy__(self) -> TinkOpener:
        raise TypeError("a TinkOpener cannot be copied: two copies would release one stream twice")

    def __deepcopy__(self, memo: object) -> TinkOpener:
        raise TypeError("a TinkOpener cannot be copied: two copies would release one stream twice")

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError("a TinkOpener cannot be pickled")

    @property
    def phase(self) -> TinkPhase:
        return self._phase

    @property
    def segments_opened(self) -> int:
        return self._index

    @property
    def key(self) -> TinkStreamingKey | None:
        """The keyset's key the stream opened under, once its first segment authenticated."""
        return self._chosen

    @property
    def at_eof(self) -> bool:
        """The last segment authenticated and every plaintext byte has been read."""
        return self._phase is TinkPhase.DONE and self._plain_start == self._plain_end

    # -- the names gcmstream's Opener has, so that every surface drives either --------------
    # (aio's SecureStreamReader, the pipelines' loop and the file engine call these)

    @property
    def records_opened(self) -> int:
        """Segments authenticated so far."""
        return self._index

    @property
    def bytes_opened(self) -> int:
        """Plaintext bytes of the segments authenticated so far."""
        return self._opened_bytes

    @property
    def failed(self) -> bool:
        """True once an error was found (raised already, or waiting for the next read)."""
        return self._error is not None or self._deferred is not None

    @property
    def broken(self) -> bool:
        """True once an error was raised: every later read raises StreamBrokenError."""
        return self._phase is TinkPhase.FAILED

    @property
    def wants_data(self) -> bool:
        """True while input can be taken (before the end of input and any failure)."""
        return not self._eof and self._phase is not TinkPhase.FAILED

    @property
    def header(self) -> TinkHeader | None:
        """What the stream's header and segment 0 told, once segment 0 authenticated."""
        key = self._chosen
        return None if key is None else TinkHeader(key)

    @property
    def header_missing(self) -> int:
        """0: Tink's header is read with segment 0, so a reader has nothing to ask for ahead of
        the segments (gcmstream's Opener answers the bytes its header still needs)."""
        return 0

    @property
    def record_missing(self) -> int:
        """Bytes still to arrive of the segment being received (0 at a segment boundary), so
        that an adapter choosing its read size can end its reads on segment boundaries."""
        if self._phase is not TinkPhase.SEGMENTS or not self._available:
            return 0
        return -self._available % self._wire

    @property
    def final_length(self) -> int:
        """-1: Tink's last segment ends at the end of input, so nothing can follow it (the
        file engine's trailing-data rule never applies)."""
        return -1

    def header_verified(self) -> bool:
        """True once segment 0 authenticated under a key of the keyset (opened into the
        opener's buffer, for the next read); False while more input is needed. Raises the
        stream's error."""
        with self._turn:
            self._check()
            if self._phase is TinkPhase.HEADER:
                try:
                    self._open_buffered()
                except ProtocolError as exc:
                    raise self._fail(exc) from exc
            return self._phase is not TinkPhase.HEADER

    def receive_some(self, data: Buffer) -> int:
        """Take all of ``data`` (a Tink stream ends only at the end of input: nothing is
        left over); the count taken."""
        self.receive_data(data)
        return len(byte_view(data))

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A receive buffer to fill (then ``buffer_updated``); its bytes are copied in."""
        if self._scratch is None:
            self._scratch = bytearray(max(self._keys.primary.ciphertext_segment_size, 1 << 16))
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` of the buffer ``get_buffer`` gave were filled."""
        if self._scratch is None or not 0 <= nbytes <= len(self._scratch):
            raise OutOfRangeError(f"buffer_updated({nbytes}) without a buffer that large")
        self.receive_data(bytes(memoryview(self._scratch)[:nbytes]))

    def peek(self) -> memoryview | None:
        """Authenticated plaintext ready now, not consumed (``consume`` takes it); None while
        more input is needed; empty at the authenticated end. Valid until the next call."""
        with self._turn:
            self._check()
            return self._ready()

    def consume(self, nbytes: int) -> None:
        """Mark ``nbytes`` of the last ``peek()`` as read."""
        with self._turn:
            self._consume_plain(nbytes)

    def _consume_plain(self, nbytes: int) -> None:
        if not 0 <= nbytes <= self._plain_end - self._plain_start:
            available = self._plain_end - self._plain_start
            raise OutOfRangeError(f"cannot consume {nbytes} bytes: {available} available")
        self._plain_start += nbytes

    def find(self, sub: Buffer) -> int:
        """Index of ``sub`` in the plaintext ``peek()`` returned, or -1."""
        if self._plain_start == self._plain_end:
            return -1
        index = self._plain.find(sub, self._plain_start, self._plain_end)
        return index - self._plain_start if index >= 0 else -1

    # -- input ------------------------------------------------------------------------------

    def _input_bound(self) -> int:
        """Unread input that may be held: twice the largest segment the stream may use."""
        if self._chosen is not None:
            wire = self._wire
        else:
            wire = max(key.ciphertext_segment_size for key in self._keys.keys)
        return max(2 * wire, _MIN_INPUT_BOUND)

    def receive_data(self, data: Buffer) -> None:
        """Take ciphertext; never raises a ProtocolError (it waits for the next read).
        BufferFullError, taking nothing, while the unread input already held reaches the
        bound (see the class docstring)."""
        with self._turn:
            if self._eof:
                raise StreamClosedError("receive_data() after receive_eof()")
            size = len(data)
            if self._phase is TinkPhase.FAILED or not size:
                return
            if self._available >= self._input_bound():
                raise BufferFullError(
                    f"{self._available} bytes of unread input are held: read before feeding more"
                )
            pieces = self._pieces
            if isinstance(data, bytes) and size >= _BY_REFERENCE:
                pieces.append(data)  # immutable: opened in place
            elif pieces and isinstance(pieces[-1], bytearray) and len(pieces[-1]) < _BY_REFERENCE:
                pieces[-1] += data  # no view of it is held between calls
            else:
                pieces.append(bytearray(data))
            self._available += size

    def receive_eof(self) -> None:
        with self._turn:
            self._eof = True

    def _peek(self, size: int) -> memoryview:
        """The next ``size`` input bytes in one view: a slice of a piece when they lie in one
        (no copy), else joined (a segment split between pieces). Valid until input changes."""
        first = self._pieces[0]
        offset = self._offset
        if len(first) - offset >= size:
            return memoryview(first)[offset : offset + size]
        joined = bytearray(size)
        filled = 0
        for piece in self._pieces:
            view = memoryview(piece)[offset:]
            offset = 0
            count = min(size - filled, len(view))
            joined[filled : filled + count] = view[:count]
            filled += count
            if filled == size:
                break
        return memoryview(joined)

    def _consume(self, size: int) -> None:
        self._available -= size
        pieces = self._pieces
        offset = self._offset + size
        while pieces and offset >= len(pieces[0]):
            offset -= len(pieces.popleft())
        self._offset = offset

    # -- output -----------------------------------------------------------------------------

    def readinto(self, buffer: Buffer) -> int | None:
        """Plaintext into ``buffer``: the count, 0 at the end (or for an empty buffer), None
        while more input is needed."""
        with self._turn:
            self._check()
            out = byte_view(buffer, writable=True)
            if not len(out):
                return 0
            if self._plain_start < self._plain_end:
                return self._copy_out(out)
            try:
                self._raise_deferred()
                written = 0
                if self._phase is TinkPhase.HEADER:
                    if not self._open_first():
                        return None
                    written = self._copy_out(out)
                    if self._plain_start < self._plain_end:  # ``out`` is full
                        return written
                written += self._open(out[written:], already=written)
                if written == 0 and not self._done():  # the next segment is larger than ``out``
                    if not self._open_buffered():
                        return None
                    return self._copy_out(out)
            except ProtocolError as exc:
                raise self._fail(exc) from exc
            return written if written or self._done() else None

    def read(self, max_bytes: int = -1) -> bytes | None:
        """Up to ``max_bytes`` plaintext bytes (-1: what is ready), ``b""`` at the end, None
        while more input is needed."""
        view = self.read_view(max_bytes)
        return None if view is None else bytes(view)

    def read_view(self, max_bytes: int = -1) -> memoryview | None:
        """As :meth:`read`, a view into the opener's buffer, valid until the next call."""
        with self._turn:
            self._check()
            if max_bytes == 0:
                return memoryview(b"")
            view = self._ready()
            if view is None or not view:
                return view
            if 0 <= max_bytes < len(view):
                view = view[:max_bytes]
            self._plain_start += len(view)
            return view

    def _ready(self) -> memoryview | None:
        """Authenticated plaintext ready now (opening what input allows), not consumed; None
        while more input is needed; empty at the authenticated end."""
        if self._plain_start == self._plain_end:
            try:
                self._raise_deferred()
                if not self._open_buffered():
                    return None
            except ProtocolError as exc:
                raise self._fail(exc) from exc
            if self._plain_start == self._plain_end:
                return memoryview(b"")  # the end (an empty last segment)
        return memoryview(self._plain)[self._plain_start : self._plain_end]

    def _check(self) -> None:
        if self._error is not None:
            raise StreamBrokenError(self._error) from self._error

    def _raise_deferred(self) -> None:
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._phase = TinkPhase.FAILED
        self._error = error
        self._pieces.clear()
        self._available = self._offset = 0
        self._plain[:] = bytes(len(self._plain))
        self._plain_start = self._plain_end = 0
        return error

    def _copy_out(self, out: memoryview) -> int:
        count = min(len(out), self._plain_end - self._plain_start)
        out[:count] = memoryview(self._plain)[self._plain_start : self._plain_start + count]
        self._plain_start += count
        return count

    def _done(self) -> bool:
        return self._phase is TinkPhase.DONE

    def _open_buffered(self) -> bool:
        """Open ready segments (segment 0 first, with the header) into the opener's own buffer,
        which has room for at least one segment; False when none is ready and the stream has
        not ended."""
        start = 0
        if self._phase is TinkPhase.HEADER:
            if not self._open_first():
                return False
            start = self._plain_end  # segment 0's plaintext, then what else is ready
        if self._phase is TinkPhase.SEGMENTS:
            room = max(self._wire, 65536)
            if len(self._plain) < start + room:  # a new buffer: a view returned earlier may be held
                grown = bytearray(start + room)
                grown[:start] = self._plain[:start]
                self._plain = grown
            count = self._open(memoryview(self._plain)[start : start + room], already=start)
            self._plain_start, self._plain_end = 0, start + count
        return self._plain_end > 0 or self._done()

    def _open(self, out: memoryview, *, already: int = 0) -> int:
        """Open the ready segments after segment 0 into ``out``. A failing segment raises at
        once if no plaintext was opened before it in this call (``already``: bytes the caller
        has opened in it), else its error is deferred to the next read, after the plaintext
        that did authenticate is returned."""
        segments = self._segments
        wire, size = self._wire, self._wire - TAG_SIZE
        written = 0
        while self._phase is TinkPhase.SEGMENTS and segments is not None:
            try:
                # a run of middle segments inside the first piece, with input after the run
                first = self._pieces[0] if self._pieces else b""
                run = min(
                    (len(first) - self._offset) // wire,
                    (self._available - 1) // wire,
                    (len(out) - written) // size,
                )
                if run > 1:
                    start = self._offset
                    opened = segments.open_run(
                        self._index, memoryview(first)[start : start + run * wire], wire, out[written:]
                    )
                    self._consume(opened * wire)
                    self._index += opened
                    written += opened * size
                    if opened < run:
                        raise AuthenticationError(self._index)
                    continue
                step = self._next_segment()
                if step is None:
                    break
                seg_wire, last = step
                if seg_wire - TAG_SIZE > len(out) - written:
                    break
                self._open_one(segments, seg_wire, last, out[written : written + seg_wire - TAG_SIZE])
                written += seg_wire - TAG_SIZE
            except ProtocolError as exc:
                if not written + already:
                    raise
                self._deferred = exc
                break
        self._opened_bytes += written
        return written

    def _next_segment(self) -> tuple[int, bool] | None:
        """(ciphertext size, is last) of the next segment if it can be opened now."""
        wire = self._wire
        if self._available > wire:
            return wire, False
        if not self._eof:
            return None
        if self._available < TAG_SIZE:
            raise TruncatedStreamError(
                f"the Tink stream ends {self._available} bytes into segment {self._index}, before its tag"
            )
        return self._available, True

    def _open_one(self, segments: TinkSegments, wire: int, last: bool, out: memoryview) -> None:
        ciphertext = self._peek(wire)
        try:
            segments.open(self._index, last, ciphertext, out)
        except InvalidTag:
            raise self._segment_error(segments, self._index, last, ciphertext) from None
        self._consume(wire)
        self._index += 1
        if last:
            self._phase = TinkPhase.DONE

    @staticmethod
    def _segment_error(
        segments: TinkSegments, index: int, last: bool, ciphertext: memoryview
    ) -> ProtocolError:
        """Why segment ``index`` failed: a stream cut right after a middle segment (its last
        segment opens as a middle one: truncated), else tampered or the wrong key."""
        if last and segments.authenticates(index, False, ciphertext):
            return TruncatedStreamError(
                f"the Tink stream ends after segment {index}, which is not its last segment"
            )
        return AuthenticationError(index)

    def _open_first(self) -> bool:
        """Read the header and open segment 0 into the opener's buffer under a key that
        authenticates it; False while more input is needed. The candidate keys (those whose
        header length the header's first byte names) are tried from the smallest segment size
        up, each as soon as its own segment 0 is complete, so a stream under a small-segment
        key is read as it comes beside a key of large segments, and nothing is allocated for a
        key the stream has not reached."""
        found = self._header_candidates()
        if found is None:
            return False
        length, candidates = found
        header = bytes(self._peek(length))
        salt, prefix = header[1:-NONCE_PREFIX_SIZE], header[-NONCE_PREFIX_SIZE:]
        body = self._available - length
        for key in sorted(candidates, key=lambda key: key.ciphertext_segment_size):
            if any(key is failed for failed in self._failed_keys):
                continue
            wire = key.ciphertext_segment_size - length
            if body <= wire and not self._eof:
                return False  # its segment 0 is not complete yet, nor any larger key's
            if self._try_first(key, length, salt, prefix, min(body, wire), last=body <= wire):
                return True
        if self._truncated:
            raise TruncatedStreamError("the Tink stream ends after segment 0, which is not its last segment")
        raise AuthenticationError(0)

    def _header_candidates(self) -> tuple[int, list[TinkStreamingKey]] | None:
        """The header's length and the keys that make such a header, once the header and a
        tag's worth of segment 0 are in; None while more input is needed."""
        if not self._available:
            if self._eof:
                raise TruncatedStreamError("the Tink stream is empty: no header")
            return None
        length = self._peek(1)[0]
        candidates = [key for key in self._keys.keys if key.header_size == length]
        if not candidates:
            sizes = sorted({key.header_size for key in self._keys.keys})
            raise MalformedHeaderError(
                f"the Tink header's length byte is {length}, and no key of this keyset makes such a "
                f"header (theirs are {sizes} bytes): sealed with another key, or damaged"
            )
        if self._available < length + TAG_SIZE:
            if self._eof:
                raise TruncatedStreamError(
                    f"the Tink stream ends after {self._available} bytes, inside its header or first segment"
                )
            return None
        return length, candidates

    def _try_first(
        self, key: TinkStreamingKey, length: int, salt: bytes, prefix: bytes, wire: int, *, last: bool
    ) -> bool:
        """Open segment 0 (``wire`` bytes after the header) under ``key`` into the opener's
        buffer; on success the stream's key is chosen."""
        size = wire - TAG_SIZE
        if len(self._plain) < size:
            self._plain = bytearray(size)
        segments = key.segments(salt, prefix, self._associated_data)
        ciphertext = self._peek(length + wire)[length:]
        try:
            segments.open(0, last, ciphertext, memoryview(self._plain)[:size])
        except InvalidTag:
            self._failed_keys.append(key)
            self._truncated = self._truncated or (last and segments.authenticates(0, False, ciphertext))
            return False
        self._consume(length + wire)
        self._segments, self._chosen, self._failed_keys = segments, key, []
        self._wire, self._index = key.ciphertext_segment_size, 1
        self._phase = TinkPhase.DONE if last else TinkPhase.SEGMENTS
        self._plain_start, self._plain_end = 0, size
        self._opened_bytes += size
        return True


# Pieces of input at least this large, when ``bytes``, are kept by reference; smaller ones are
# copied together. And the least unread input an opener accepts before BufferFullError.
_BY_REFERENCE = 64 * 1024
_MIN_INPUT_BOUND = 1 << 20


# -- the surfaces' rule -----------------------------------------------------------------------


def refuse_beside_tink(given: Sequence[str]) -> None:
    """The one rule of every surface given ``tink=`` (a keyset or key): it is all the keying,
    and ``context`` is Tink's associated data; any other option given beside it (``given``:
    their names) is a TypeError naming them, as gcmstream's own options are refused beside
    ``config=``."""
    if given:
        raise TypeError(
            f"{', '.join(sorted(given))} cannot be given with tink= (Tink's format takes its keyset "
            "and the context, its associated data, only)"
        )


# -- whole messages -------------------------------------------------------------------------


def tink_encrypt(
    key: TinkKeyset | TinkStreamingKey, plaintext: Buffer, associated_data: Buffer = b""
) -> bytes:
    """One Tink ciphertext of ``plaintext`` (the keyset's primary key)."""
    sealer = TinkSealer(key, associated_data)
    return bytes(sealer.seal(plaintext)) + bytes(sealer.close())


def tink_decrypt(
    keys: TinkKeyset | TinkStreamingKey, ciphertext: Buffer, associated_data: Buffer = b""
) -> bytes:
    """The plaintext of one whole Tink ciphertext, or the error of the first bad segment."""
    opener = TinkOpener(keys, associated_data)
    opener.receive_data(ciphertext)
    opener.receive_eof()
    parts = []
    while (view := opener.read_view()) is not None and len(view):
        parts.append(bytes(view))
    if not opener.at_eof:
        raise TruncatedStreamError("gcmstream bug: a whole Tink ciphertext left unread")
    return b"".join(parts)
