"""The Sealer: plaintext in, stream header and records out. Sans-IO, one direction.

Each call first plans the flags of every record it will make (``RecordLayer.plan_flags``: key updates,
FINAL, the hard per-key limits), refusing the whole call before sealing anything if a record
would pass a limit; then it seals with exactly those flags. Output lands in a reusable buffer
(allocated on first use, revoked at the next call) unless it is larger than four records.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._turn import Turn
from .errors import NotReadyError, StreamClosedError, UsageError
from .format import (
    DEFAULT_KEY_LIMITS,
    DEFAULT_RECORD_SIZE,
    MAX_HEADER_SIZE,
    MAX_STANZA_FIELDS_SIZE,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    KeyLimits,
    KeyRing,
    Keys,
    Role,
    Suite,
    TrafficKeys,
    byte_view,
    check_record_size,
    make_header,
)
from .header import HeaderSpec
from .recipients import DEFAULT_WORK_FACTOR, FILE_KEY_SIZE, Recipient, seal_stanzas
from .records import RecordLayer, records_per_generation

__all__ = ("Sealer",)

_OVERHEAD = RECORD_HEADER_SIZE + TAG_SIZE
_OUTPUT_RECORDS = 4  # the reusable output buffer grows to hold this many full records
# what the reusable buffers start with: little more than a small message, so a connection that
# exchanged one keeps memory near what it sealed (SECURITY.md "Memory per connection")
_MIN_OUTPUT = 256


class Sealer:
    """Seals plaintext into records. One direction, one stream.

    ``seal(data)`` returns the stream header (first time) and every complete record that
    ``data`` fills; a partial record waits in a pending buffer until more data, ``flush()``
    or ``close()`` (FINAL). Each returned view is valid until the next call (module docs of
    ``gcmstream.codec``); call ``detach_output()`` when something else (a transport) keeps
    referring to it, or pass ``reuse_output=False`` to get fresh memory for every output (for
    transports that may keep what they were given, such as anyio streams on asyncio).

    Keyed by exactly one of: ``key`` (a pre-shared key or KeyRing), ``recipients`` (public
    keys: a random file key is wrapped for each; ``tag_recipients=True`` lets each stanza say
    whom it is for) or ``passphrase`` (scrypt at ``work_factor``, log2 of N). The last two
    are for one-way streams (docs/FORMAT.md 4.4). ``header_spec`` (``gcmstream.header.HeaderSpec``)
    adds typed header fields and, for known-answer test vectors only, fixes the salt and the
    randomness. A channel's sealer is made by ``Sealer.unkeyed`` and keyed by its handshake.
    """

    _records: RecordLayer | None  # None until keyed (a channel's, by install_secret)

    def __init__(
        self,
        key: Keys | None = None,
        *,
        recipients: Iterable[Recipient] | None = None,
        passphrase: str | bytes | None = None,
        tag_recipients: bool = False,
        work_factor: int = DEFAULT_WORK_FACTOR,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
        header_spec: HeaderSpec | None = None,
    ) -> None:
        spec = header_spec or HeaderSpec()
        fields: list[tuple[int, bytes]] = []
        if (key is not None) + (recipients is not None) + (passphrase is not None) != 1:
            raise TypeError("a Sealer takes exactly one of key, recipients or passphrase")
        if key is None:
            key = spec.random_bytes(FILE_KEY_SIZE)
            fields = seal_stanzas(
                key,
                recipients=recipients,
                passphrase=passphrase,
                tag_recipients=tag_recipients,
                work_factor=work_factor,
                random_bytes=spec.random_bytes,
            )
        if isinstance(key, KeyRing):
            key = key.primary  # a ring seals under its primary key; readers find it by its ID
        self._setup(Suite.for_key(key), record_size, limits, auto_key_update, reuse_output)
        self.header, secret = make_header(
            key,
            Role.ONE_WAY,
            record_size,
            context,
            spec.salt,  # None but for known-answer vectors: a fresh random salt
            fields=[*fields, *spec.fields],
            max_fields_size=MAX_STANZA_FIELDS_SIZE,
        )
        self._header_sent = False
        self._records = self._new_layer(secret)

    @classmethod
    def unkeyed(
        cls,
        suite: Suite,
        *,
        record_size: int = DEFAULT_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
    ) -> Sealer:
        """A sealer with no key and no header yet: a channel's, which sends the handshake's
        headers itself and keys this sealer by ``install_secret`` once the handshake is
        confirmed (``ready`` is False and sealing raises NotReadyError until then)."""
        sealer = cls.__new__(cls)
        sealer._setup(suite, record_size, limits, auto_key_update, reuse_output)
        sealer.header = b""
        sealer._header_sent = True
        return sealer

    def _setup(
        self,
        suite: Suite,
        record_size: int,
        limits: KeyLimits | None,
        auto_key_update: bool,
        reuse_output: bool,
    ) -> None:
        """What every sealer starts with, keyed or not."""
        self.suite = suite
        self._reuse_output = reuse_output
        self.record_size = check_record_size(record_size)
        self._limits = limits or DEFAULT_KEY_LIMITS
        self._records = None
        self._auto = auto_key_update
        self._pending: bytearray | None = None
        self._pending_len = 0
        self._out: bytearray | None = None
        self._lent: memoryview | None = None
        self._closed = False
        self._update_requested = False
        self._turn = Turn("this Sealer")  # one thread at a time (_turn.py)

    def __repr__(self) -> str:
        return (
            f"<Sealer {self.suite.name} record_size={self.record_size} "
            f"records={self.records_sealed} closed={self._closed}>"
        )

    @property
    def closed(self) -> bool:
        """True once the FINAL record was sealed."""
        return self._closed

    @property
    def ready(self) -> bool:
        """True once records can be sealed (a channel's sealer waits for the peer's header)."""
        return self._records is not None

    @property
    def pending(self) -> int:
        """Plaintext bytes waiting for a full record, ``flush()`` or ``close()``."""
        return self._pending_len

    @property
    def records_sealed(self) -> int:
        return self._records.records if self._records is not None else 0

    @property
    def bytes_sealed(self) -> int:
        return self._records.total_bytes if self._records is not None else 0

    @property
    def key_generation(self) -> int:
        """How many key updates this stream made. Public (documented in the API reference) for
        diagnostics and for tests that pin when keys change; nothing inside gcmstream reads it."""
        return self._records.keys.generation if self._records is not None else 0

    def install_secret(self, secret: bytes, suite: Suite | None = None) -> None:
        """Key a channel's sealer once its handshake is confirmed (``Channel`` calls this), under
        ``suite`` (the key the handshake used: a responder's ring may hold several). Only
        once: keying it again would restart the sequence under a key already used.

        It takes no turn: it runs inside the opener's call that confirmed the peer's Finished,
        and a seal() racing it on another thread sees either no key (NotReadyError) or the
        whole RecordLayer, which one assignment installs."""
        if self._records is not None:
            raise UsageError("this sealer is already keyed")
        if suite is not None:
            self.suite = suite
        self._records = self._new_layer(secret)

    def _new_layer(self, secret: bytes) -> RecordLayer:
        return RecordLayer(TrafficKeys(secret, self.suite), self._limits, self.record_size)

    def seal(self, data: Buffer, *, flush: bool = False, final: bool = False) -> memoryview:
        """Seal ``data``. The rest of a record waits for more data unless ``flush=True`` (seal it
        now as a short record) or ``final=True`` (seal it, or an empty record, as FINAL)."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            if flush and not final and not self._pending_len:
                single = self._seal_single(data)
                if single is not None:
                    return single
            return self._seal(data, flush, final)
        finally:
            token.append(None)

    def flush(self) -> memoryview:
        """Seal pending plaintext as a short record now (and the header, if not yet sent)."""
        with self._turn:
            return self._flush()

    def _seal_single(self, data: Buffer) -> memoryview | None:
        """The message path of ``seal(data, flush=True)``: nothing pending, the header sent,
        ``data`` one plain record far from every limit. None (nothing changed) otherwise."""
        records = self._records
        if isinstance(data, memoryview):
            if data.ndim != 1 or data.itemsize != 1 or not data.c_contiguous:
                return None  # len() would count items, not bytes: the general path casts
        elif type(data) is not bytes and type(data) is not bytearray:
            return None  # (another buffer type: the general path makes a byte view of it)
        size = len(data)
        if (
            records is None
            or self._closed
            or not self._header_sent
            or not 0 < size <= self.record_size
            or not records.far_from_limits(1, self._update_requested)
        ):
            return None
        if self._lent is not None:
            self._revoke()
        out = self._output(size + _OVERHEAD)
        return self._lend(out, records.seal_one(data, size, out))

    def _seal(self, data: Buffer, flush: bool, final: bool) -> memoryview:
        self._revoke()
        records = self._ready("seal")
        src = byte_view(data)
        size = self.record_size
        total = self._pending_len + len(src)
        sizes = [size] * (total // size)
        if ((final or flush) and total % size) or (final and not sizes):
            sizes.append(total % size)
        flags = self._plan(records, sizes, final)
        out = self._output(
            len(sizes) * _OVERHEAD + sum(sizes) + (0 if self._header_sent else len(self.header))
        )
        pos = self._put_header(out)
        taken = 0
        if self._pending_len and sizes:  # the first record completes what was pending
            length = sizes[0]
            pending = self._pending_view(length)
            taken = length - self._pending_len
            pending[self._pending_len : length] = src[:taken]
            self._pending_len = 0
            first_flags = flags[:1] if flags is not None else None
            pos = self._seal_records(out, pos, pending, 0, sizes[:1], first_flags, final and len(sizes) == 1)
            sizes = sizes[1:]
            flags = flags[1:] if flags is not None else None
        pos = self._seal_records(out, pos, src, taken, sizes, flags, final)
        taken += sum(sizes)
        if taken < len(src):  # the rest of a record: keep it until more data or a flush
            end = self._pending_len + len(src) - taken
            self._pending_view(end)[self._pending_len : end] = src[taken:]
            self._pending_len = end
        if final:
            self._closed = True
        return self._lend(out, pos)

    def _flush(self) -> memoryview:
        self._revoke()
        records = self._ready("flush")
        length = self._pending_len
        sizes = [length] if length > 0 or self._update_requested else []
        # A requested key update whose record would carry the pending bytes past the old key's
        # byte limit goes first as an empty record, so update_key() + flush() always moves on.
        if self._update_requested and records.key_bytes + length > self._limits.hard_bytes:
            sizes = [0, length]
        flags = self._plan(records, sizes, False)
        out = self._output(len(sizes) * _OVERHEAD + length + (0 if self._header_sent else len(self.header)))
        pos = self._put_header(out)
        if sizes:
            self._pending_len = 0
            pending = self._pending_view(length)
            # (a split's empty record reads nothing: the pending bytes start at 0 either way)
            pos = self._seal_records(out, pos, pending, 0, sizes, flags, False)
        return self._lend(out, pos)

    def close(self) -> memoryview:
        """Seal pending plaintext and the FINAL record. Later seals raise StreamClosedError."""
        return self.seal(b"", final=True)

    def update_key(self) -> None:
        """Make the next record carry KEY_UPDATE; ``flush()`` sends it even with no data
        (``seal(b"", flush=True)`` does not: it seals nothing)."""
        with self._turn:
            self._update_requested = True

    def detach_output(self) -> None:
        """The last returned output is now owned elsewhere: never write into its memory again."""
        self._lent = None
        self._out = None

    def take_header(self) -> bytes:
        """Return the header for sending now; later output will not repeat it."""
        with self._turn:
            if self._header_sent:
                raise StreamClosedError("the stream header was already taken")
            self._header_sent = True
            return self.header

    def hand_off_places(self) -> tuple[bytes, TrafficKeys, int] | None:
        """For sealing a whole stream's records by their places elsewhere (``gcmstream.files``'
        parallel encryption): the header, the first key generation's keys and N, the records
        per key generation that full records give (``records_per_generation``, FORMAT.md 4.3).
        This Sealer is then closed (later seals raise StreamClosedError), so it can never
        seal a record at a place another sealer used. None, with nothing changed, when the
        places would not be those this Sealer gives: its header was taken or something sealed,
        pending or requested, automatic key update off, or a full record past ``hard_bytes``."""
        with self._turn:
            records = self._records
            if (
                records is None
                or self._closed
                or self._header_sent
                or records.records
                or self._pending_len
                or self._update_requested
                or not self._auto
                or self.record_size > self._limits.hard_bytes
            ):
                return None
            self._closed = self._header_sent = True
            return self.header, records.keys, records_per_generation(self.record_size, self._limits)

    # -- internals ---------------------------------------------------------------------------

    def _ready(self, verb: str) -> RecordLayer:
        if self._closed:
            raise StreamClosedError(f"cannot {verb}: the FINAL record was already sealed")
        if self._records is None:
            raise NotReadyError("cannot seal before the channel handshake is complete")
        return self._records

    def _plan(self, records: RecordLayer, sizes: list[int], final: bool) -> list[int] | None:
        """The flags of each record to seal (LimitReachedError if one would pass a hard
        limit), or None for the common case: all plain, FINAL on the last if ``final``."""
        if records.far_from_limits(len(sizes), self._update_requested):
            return None
        return records.plan_flags(
            sizes, final=final, update_requested=self._update_requested, auto_update=self._auto
        )

    def _seal_records(
        self,
        out: memoryview,
        pos: int,
        src: memoryview,
        start: int,
        sizes: list[int],
        flags: list[int] | None,
        final: bool,
    ) -> int:
        """Seal records of ``src`` from ``start`` into ``out`` at ``pos`` (``RecordLayer.seal_run``);
        return the end."""
        records = self._records
        if records is None:  # unreachable: _ready() checked; kept for the type checker
            raise NotReadyError("cannot seal before the channel handshake is complete")
        pos, updated = records.seal_run(out, pos, src, start, sizes, flags, final)
        if updated:
            self._update_requested = False
        return pos

    def _revoke(self) -> None:
        if self._lent is not None:
            self._lent.release()
            self._lent = None

    def _pending_view(self, need: int = 0) -> memoryview:
        """The pending-record buffer, holding at least ``need`` bytes. It starts small and
        doubles up to one record, so connections that send small messages stay small."""
        pending = self._pending
        if pending is None or len(pending) < need:
            size = max(need, _MIN_OUTPUT, 2 * len(pending) if pending is not None else 0)
            grown = bytearray(min(size, self.record_size))
            if pending is not None:
                grown[: self._pending_len] = pending[: self._pending_len]
            pending = self._pending = grown
        return memoryview(pending)

    def _output(self, size: int) -> memoryview:
        """Memory for ``size`` bytes of output. The reusable buffer starts small and doubles up
        to four full records, so a connection that sends small messages stays small; output
        larger than that gets one exact buffer of its own."""
        out = self._out
        if self._reuse_output and size and (out is None or size > len(out)):
            capacity = MAX_HEADER_SIZE + _OUTPUT_RECORDS * (self.record_size + _OVERHEAD)
            if size <= capacity:
                grown = max(size, 2 * len(out) if out is not None else _MIN_OUTPUT)
                out = self._out = bytearray(min(grown, capacity))
        if out is not None and size <= len(out):
            return memoryview(out)
        return memoryview(bytearray(size))

    def _put_header(self, out: memoryview) -> int:
        if self._header_sent:
            return 0
        self._header_sent = True
        out[: len(self.header)] = self.header
        return len(self.header)

    def _lend(self, out: memoryview, end: int) -> memoryview:
        result = out[:end]
        out.release()
        if self._out is not None and result.obj is self._out:
            self._lent = result  # our reusable memory: revoke this view at the next call
        return result
