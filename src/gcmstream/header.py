"""The stream header, apart from the records: how a Sealer writes one (``HeaderSpec``) and how an
Opener reads and verifies a peer's (``HeaderReader``). Sans-IO.

A ``HeaderReader`` owns everything a header needs while it arrives: its receive buffer (the
62-byte fixed part, then exactly the announced size, at most ``MAX_HEADER_SIZE``, or 62 +
65,535 + 32 bytes for a reader of recipient stanzas), the keys (or the identities of an
``Unlocker``), the context, the role the peer must announce and the field types it knows. The
fixed part is checked as soon as it is whole (format, size, role, key ID), then the commitment
and the fields. The Opener writes input into ``writable()`` and calls ``commit``; once the
header verified, ``on_header`` returns the record secret of this direction, and the Opener
drops the reader and reads records.

A channel's reader (``gcmstream.channel``) is a subclass: its ``on_header`` runs the key
exchange and returns None, the peer's ``finished_size``-byte Finished is read into the same
buffer, and its ``on_finished`` confirms it and returns the secret.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, NoReturn

from .errors import KeyCommitmentError, OutOfRangeError, ProtocolError, TruncatedStreamError
from .format import (
    HEADER_FIXED_SIZE,
    MAGIC,
    MAX_FIELDS_SIZE,
    MAX_STANZA_FIELDS_SIZE,
    Buffer,
    HeaderStart,
    KeyRing,
    Keys,
    Role,
    StreamHeader,
    Suite,
    as_key_ring,
    check_context,
    check_fields_length,
    check_header_start,
    check_role,
    find_key,
    header_fault,
    key_id,
    parse_fields,
    parse_header,
    parse_header_start,
    record_size_fault,
    verify_commitment,
)
from .recipients import STANZA_FIELD_TYPES, Identity, Unlocker

__all__ = ("HeaderReader", "HeaderSpec")


@dataclass(frozen=True)
class HeaderSpec:
    """What a one-way Sealer's header carries besides its key, context and record size.

    ``fields``: typed header fields to add (docs/FORMAT.md 4.2), such as the file engine's
    ``FIXED_LAYOUT`` field. ``salt`` and ``random_bytes`` exist for known-answer test vectors
    only: ``salt`` (32 bytes) replaces the fresh random salt, and ``random_bytes(n)`` replaces
    ``os.urandom`` for the file key and the stanzas' randomness of a stream sealed to recipients
    or a passphrase. Never set them elsewhere: a repeated salt with the same key and context
    repeats every AES-GCM key and nonce of the stream (SECURITY.md, "What the caller must do").
    """

    fields: tuple[tuple[int, bytes], ...] = ()
    salt: bytes | None = None
    random_bytes: Callable[[int], bytes] = os.urandom


class HeaderReader:
    """Reads and verifies one peer's stream header for an Opener (the module docstring).

    Keyed by exactly one of: ``key`` (a pre-shared key or KeyRing), ``identities`` (at most 10,
    for a one-way stream sealed to recipients) or ``passphrase`` (docs/FORMAT.md 4.4). ``role``
    is the role the peer's header must announce (``Role.ONE_WAY`` for a one-way stream);
    ``known_fields``, the field types this reader understands besides the format's own.

    ``Opener(header_reader=...)`` takes one; ``Opener(key, ...)`` makes a one-way one itself.
    A subclass that reads more than the header (a channel's Finished) sets ``finished_size``
    and overrides ``on_header`` and ``on_finished``.
    """

    # Bytes that follow the header before records start (a channel's Finished); 0: none.
    finished_size: ClassVar[int] = 0

    __slots__ = (
        "_base",
        "_buf",
        "_context",
        "_got",
        "_key",
        "_keys",
        "_known_fields",
        "_max_fields_size",
        "_need",
        "_refused",
        "_role",
        "_start",
        "_unlocker",
        "header",
        "suite",
    )

    def __init__(
        self,
        key: Keys | None = None,
        *,
        identities: Iterable[Identity] | None = None,
        passphrase: str | bytes | None = None,
        context: Buffer = b"",
        role: Role = Role.ONE_WAY,
        known_fields: frozenset[int] = frozenset(),
    ) -> None:
        if (key is not None) + (identities is not None) + (passphrase is not None) != 1:
            raise TypeError("a header reader takes exactly one of key, identities or passphrase")
        # A reader of recipient stanzas holds an Unlocker instead of keys: it finds the file key
        # in the header (docs/FORMAT.md 4.4), whose suite is known only then.
        self._unlocker = Unlocker(identities, passphrase) if key is None else None
        if self._unlocker is not None and (role is not Role.ONE_WAY or self.finished_size):
            raise ValueError("identities and passphrases are for one-way streams")
        keys = as_key_ring(key) if key is not None else None
        self._keys: KeyRing | None = keys  # kept only until the fixed part named the key
        self.suite = Suite.for_key(keys.primary) if keys is not None else Suite.AES_256_GCM
        stanza_types = STANZA_FIELD_TYPES if self._unlocker is not None else frozenset()
        # shared, not a copy per reader, when there are no stanzas: one less set per connection
        self._known_fields = known_fields | stanza_types if stanza_types else known_fields
        # stanzas need more room than a key's header (docs/FORMAT.md 4.4)
        self._max_fields_size = MAX_STANZA_FIELDS_SIZE if self._unlocker is not None else MAX_FIELDS_SIZE
        self._context = check_context(context)
        self._role = role
        # the peer's header (its fixed part first, then exactly its size), and on a channel its
        # Finished: all an unconfirmed peer makes us hold
        self._buf = bytearray(HEADER_FIXED_SIZE)
        self._got = 0
        self._need = HEADER_FIXED_SIZE  # the whole header's size once its fixed part is read
        self._base = 0  # bytes received before the buffer (the header, while reading Finished)
        self._start: HeaderStart | None = None
        self._key = b""
        # a channel's refusal of the key ID, raised once the whole header arrived: the ring that
        # refused it, asked again then (an error kept meanwhile was most of what an
        # unknown key ID's pending connection held beyond a known one's, tests/test_pending.py)
        self._refused: KeyRing | None = None
        self.header: StreamHeader | None = None  # once it verified

    # -- what a channel's reader overrides -------------------------------------------------------

    def on_header(self, key: bytes, header: StreamHeader, secret: bytes) -> bytes | None:
        """The peer's header verified under ``key`` (its commitment gave ``secret``): return the
        record secret of this direction, or None when ``finished_size`` bytes follow."""
        return secret

    def on_finished(self, finished: bytes) -> bytes:
        """The peer's ``finished_size`` bytes arrived: confirm them and return the record secret."""
        raise ProtocolError("no Finished expected")  # unreachable: finished_size is 0

    # -- what the Opener calls -------------------------------------------------------------------

    @property
    def missing(self) -> int:
        """Bytes still needed to finish the header (and a Finished) as far as known now."""
        return self._need - self._got

    @property
    def received(self) -> int:
        """Header (and Finished) bytes received so far."""
        return self._base + self._got

    def writable(self) -> memoryview:
        """Where the next header bytes go: exactly what is missing, nothing of a record."""
        return memoryview(self._buf)[self._got : self._need]

    def commit(self, nbytes: int, max_record_size: int) -> bytes | None:
        """``nbytes`` were written at the start of ``writable()``. Returns the record secret once
        the header (and a Finished) verified, None while more is needed; raises the header's
        ProtocolError. ``max_record_size`` is the Opener's limit on the announced size (H8)."""
        if nbytes < 0 or self._got + nbytes > self._need:
            raise OutOfRangeError(f"buffer_updated({nbytes}) exceeds the view that was offered")
        before = self._got
        self._got += nbytes
        if self._start is None:
            if self._got == HEADER_FIXED_SIZE:
                self._read_start(max_record_size)
            elif before <= len(MAGIC):
                check_header_start(memoryview(self._buf)[: self._got])
        if self._start is None or self._got != self._need:
            return None
        if self.header is None:
            return self._read_header()
        return self.on_finished(bytes(self._buf))

    def truncation(self) -> str:
        """Why input that ended now is a truncation (the message of TruncatedStreamError)."""
        if self.finished_size and self._role is Role.RESPONDER and not self._base + self._got:
            # a client that got no byte of the server's answer cannot tell why: a server with
            # another key or context hangs up at its header, and so does one whose admission
            # (gcmstream.admission) refused or shed the connection under load, unanswered
            return (
                "the connection ended during the handshake before the server answered (0 bytes "
                "received): the server holds another key or context, or it refused the "
                "connection under load (too many pending handshakes, or too many from this "
                "address): try again later"
            )
        if self.finished_size:
            # never a peer with another key or context: a responder with one hangs up at the
            # header (0 bytes received: above), and this end refuses one's header itself
            # (KeyCommitmentError)
            received = self._base + self._got
            said = f"the peer cut the connection during the handshake ({received} bytes received"
            if self._role is Role.INITIATOR and self.header is not None:
                # a responder that answered: its initiator hangs up here when it refuses the answer
                return (
                    f"{said}, after this end's answer: the peer refused the answer (it expects "
                    "another identity or key exchange) or the connection was lost)"
                )
            return f"{said})"
        if self._got:
            return f"input ended inside the stream header ({self._got} of {self._need} bytes)"
        return "input ended before the stream header"

    def ended(self) -> ProtocolError:
        """The error of input that ended now, before the header (and a Finished) was whole:
        a truncation (``truncation()`` says where). A channel's initiator whose header a
        responder of this same process refused raises that refusal instead (``channel``)."""
        return TruncatedStreamError(self.truncation(), in_header=True)

    def close(self) -> None:
        """Drop the buffer and the key: the header failed, or its reader is done with it."""
        self._buf = bytearray()
        self._key = b""
        self._refused = None

    # -- the steps -------------------------------------------------------------------------------

    def _read_start(self, max_record_size: int) -> None:
        """The fixed part arrived: refuse what can be refused before reading more (checks
        H1..H11: format, sizes, role, key ID, suite), then wait for the rest of the header.
        H7 (the fields' bound) comes last: a key given for a file sealed to recipients is the
        wrong key (H10), not a header too long for a key's reader, however many its stanzas."""
        start = parse_header_start(self._buf, MAX_STANZA_FIELDS_SIZE)  # H7 below
        if start.record_size > max_record_size:
            raise record_size_fault(start.record_size, max_record_size)
        check_role(start, self._role)
        keys, self._keys = self._keys, None
        if self._unlocker is None:
            if keys is None:  # unreachable: the fixed part is read once
                raise ProtocolError("header already read")
            self._key = self._find_key(keys, start)
        check_fields_length(start, self._max_fields_size)
        self._start = start
        self._need = start.size
        whole = bytearray(start.size + self.finished_size)
        whole[:HEADER_FIXED_SIZE] = self._buf  # (a view of the old buffer may still exist)
        self._buf = whole

    def _find_key(self, keys: KeyRing, start: HeaderStart) -> bytes:
        """The key the header names. A channel's peer that names no key held here (or names one
        with another suite) is refused only once its whole header arrived, after the same
        commitment check against a stand-in key: refused at the fixed part, the hang-up's time
        and the unread rest (a reset) would tell a keyless prober which key IDs a server holds
        (SECURITY.md, "Post-quantum authentication"; tests/hostile/test_probe.py)."""
        try:
            return find_key(keys, start)
        except KeyCommitmentError:
            if not self.finished_size:  # a one-way stream: no prober to hide from
                raise
            self._refused = keys  # (a reference: the ring is the server's, shared)
            return bytes(start.suite.key_size)  # never verifies: the refusal is raised anyway

    def _read_header(self) -> bytes | None:
        key, self._key = self._key, b""
        raw = bytes(memoryview(self._buf)[: self._need])
        # from here the header is held once, as ``raw`` (``header.raw``, its fields sliced from
        # it when asked for): the receive buffer goes, or shrinks to the Finished still to come
        self._buf = bytearray(self.finished_size)
        self._base, self._got = self._got, 0
        self._need = self.finished_size
        unlocker, self._unlocker = self._unlocker, None
        if unlocker is not None:
            key = self._unlock(unlocker, raw)
        refused, self._refused = self._refused, None
        try:
            secret = verify_commitment(key, raw, self._context)
        except KeyCommitmentError:
            if unlocker is not None:  # H12 under the file key a stanza gave: not a wrong key
                raise header_fault("H12", unlocker.commitment_failure) from None
            if refused is None:
                raise
        if refused is not None:  # raised here, after the stand-in key's commitment check
            self._refuse(refused)
        # its fixed part was parsed and checked as it arrived (_read_start): not again
        header = parse_header(raw, self._known_fields, self._max_fields_size, self._start)
        self.header = header
        return self.on_header(key, header, secret)

    def _refuse(self, keys: KeyRing) -> NoReturn:
        """``find_key``'s refusal of the header's key ID (H10, H11), made now from the ring that
        refused it at the fixed part (``_find_key``)."""
        if self._start is not None:
            find_key(keys, self._start)  # raises: this ring refused this key ID
        raise ProtocolError("gcmstream bug: a refused key ID was found")  # unreachable

    def _unlock(self, unlocker: Unlocker, raw: bytes) -> bytes:
        """The file key of a header sealed to recipients or a passphrase; the commitment,
        checked next, then covers every stanza. The fields' structure only (H13) is checked
        here: an unknown critical type (H14) is judged after the commitment, as with a key, so
        that one added by someone without the file key is tampering, not "unsupported"."""
        start = self._start
        if start is None:  # unreachable: the fixed part came first
            raise ProtocolError("no stream header")
        fields = parse_fields(raw[HEADER_FIXED_SIZE : HEADER_FIXED_SIZE + start.fields_length])
        self.suite = start.suite
        file_key = unlocker.unlock(start.suite, fields)
        if key_id(file_key) != start.key_id:  # the identity fits: the header was altered
            refusal = KeyCommitmentError(
                "the file key a stanza holds is not the one the header names (altered header)"
            )
            refusal.rule = "S8"  # damage, not a wrong key (cli.EXIT_CODES)
            raise refusal
        return file_key
