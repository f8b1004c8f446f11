"""The record layer: one direction's keys, position, per-key limits and flag rules, and the only
code that seals or opens a record (the only caller of ``encrypt_into``/``decrypt_into`` for
records; ``tests/test_public_api.py`` greps the package for others).

The nonce of record ``seq`` under a key generation is ``iv XOR seq`` (``TrafficKeys``); it is
derived from the position, never stored, so the only way to reuse a nonce would be to move the
position backwards, which nothing here does. A direction advances by exactly one record per
sealed or opened record, and restarts at 0 only together with a new key generation. Only this
module's methods move it: the Sealer, the Opener and random access (``seekable``) read the
position through properties and call one method per path.

Each path exists once:

* open one record: ``RecordLayer.open_record`` (limits, nonce, tag, flag rules, key update,
  plaintext wiped on any failure); ``open_plain_bytes`` is its ``bytes``-returning form for a
  lone plain record, and refuses (None) anything it would not open the same way;
* open a run of whole plain records: ``RecordLayer.open_run``, the hot loop, called once per run;
* open a record, or a run of them, at a known place (random access, a file's parallel
  decryption): ``KeyChain.open_at``, ``KeyChain.open_run_at``;
* seal: ``RecordLayer.seal_one`` (one plain record) and ``RecordLayer.seal_run`` (records with
  the flags ``plan_flags`` gave); a run at a known place (a file's parallel encryption, whose
  places come from the fixed layout): ``KeyChain.seal_run_at``.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import (
    AuthenticationError,
    LimitReachedError,
    MalformedRecordError,
    ProtocolError,
    RecordTooLargeError,
    TrailingDataError,
)
from .format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    KNOWN_FLAGS,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    KeyLimits,
    TrafficKeys,
)

__all__ = ("KeyChain", "RecordLayer", "TinkSegments", "check_record_length", "records_per_generation")

_unpack_record_header = RECORD_HEADER.unpack_from
_pack_record_header = RECORD_HEADER.pack


def check_record_length(length: int, max_ciphertext: int, record_number: int) -> None:
    """Refuse record ``record_number``'s length field before anything is buffered for it: the
    one rule of every reader (the receive ring, held input, a file's walk), so that each names
    the record (counted from 0 in the stream) whichever way the input was split."""
    if length > max_ciphertext:
        raise RecordTooLargeError("record ciphertext", length, max_ciphertext)
    if length < TAG_SIZE:
        raise MalformedRecordError(
            f"record {record_number} has length {length}, shorter than the {TAG_SIZE}-byte tag",
            record_number=record_number,
        )


class RecordLayer:
    """Keys and position of one direction: ``seq`` records and ``key_bytes`` plaintext bytes
    under the current key generation (earlier generations' counted in ``records``/``bytes``),
    for records of up to ``record_size`` plaintext bytes."""

    __slots__ = (
        "_bytes_before",
        "_key_bytes",
        "_keys",
        "_plain_aad",
        "_records_before",
        "_seq",
        "limits",
        "max_ciphertext",
        "record_size",
    )

    def __init__(self, keys: TrafficKeys, limits: KeyLimits, record_size: int) -> None:
        self._keys = keys
        self.limits = limits
        self.record_size = record_size
        self.max_ciphertext = record_size + TAG_SIZE
        self._seq = 0
        self._key_bytes = 0
        self._records_before = 0
        self._bytes_before = 0
        self._plain_aad = (-1, b"")  # (length, header) of the last plain record a run opened

    def __repr__(self) -> str:  # never show key material
        return f"<RecordLayer generation={self._keys.generation} seq={self._seq}>"

    @property
    def keys(self) -> TrafficKeys:
        """The current key generation's keys."""
        return self._keys

    @property
    def seq(self) -> int:
        """Records under the current key generation."""
        return self._seq

    @property
    def key_bytes(self) -> int:
        """Plaintext bytes under the current key generation."""
        return self._key_bytes

    @property
    def records(self) -> int:
        """Records sealed or opened in this direction, all key generations together."""
        return self._records_before + self._seq

    @property
    def total_bytes(self) -> int:
        return self._bytes_before + self._key_bytes

    def _advance(self, size: int, flags: int) -> None:
        """Account for one record of ``size`` plaintext bytes carrying ``flags``."""
        if flags & FLAG_KEY_UPDATE:
            self._records_before += self._seq + 1
            self._bytes_before += self._key_bytes + size
            self._seq = self._key_bytes = 0
            self._keys = self._keys.next()
        else:
            self._seq += 1
            self._key_bytes += size

    # -- opening ---------------------------------------------------------------------------

    def _refuse_open(self) -> None:
        """Refuse (before decrypting) a record that would take the peer past a hard limit."""
        number = self.records
        if self._seq >= self.limits.hard_records:
            raise MalformedRecordError(
                f"record {number}: the peer passed the per-key record limit", record_number=number
            )
        raise MalformedRecordError(
            f"record {number}: the peer passed the per-key byte limit", record_number=number
        )

    def _flag_problem(self, flags: int, followed: bool) -> ProtocolError | None:
        """What an authenticated record's flags break (R3, R4, FORMAT.md 8.2), if anything."""
        number = self.records
        if flags & ~KNOWN_FLAGS:
            return MalformedRecordError(
                f"record {number} has unknown flags 0x{flags:02x}", record_number=number
            )
        if flags == FLAG_FINAL | FLAG_KEY_UPDATE:
            return MalformedRecordError(
                f"record {number} has both FINAL and KEY_UPDATE", record_number=number
            )
        if flags & FLAG_FINAL and followed:
            return TrailingDataError(f"data follows the FINAL record (record {number})", record_number=number)
        return None

    def open_record(
        self,
        flags: int,
        size: int,
        aad: Buffer,
        ciphertext: Buffer,
        plaintext: memoryview,
        followed: bool,
    ) -> bool:
        """Open the next record (``size`` plaintext bytes; its header ``aad`` carries ``flags``)
        into ``plaintext``, apply its flags and move on; True when it is FINAL. ``followed``:
        bytes are known to come after it (a FINAL record then fails). Raises, with
        ``plaintext`` wiped, for a passed limit (before decrypting), a failed tag or a broken
        flag rule."""
        seq = self._seq
        limits = self.limits
        if seq >= limits.hard_records or self._key_bytes + size > limits.hard_bytes:
            self._refuse_open()
        keys = self._keys
        try:
            keys.decrypt_into(keys.nonce_into(seq), ciphertext, aad, plaintext)
        except InvalidTag as exc:
            plaintext[:] = bytes(len(plaintext))  # never leave unauthenticated plaintext
            raise AuthenticationError(self.records) from exc
        if not flags:  # the per-record path: _advance inlined
            self._seq = seq + 1
            self._key_bytes += size
            return False
        problem = self._flag_problem(flags, followed)
        if problem is not None:
            plaintext[:] = bytes(len(plaintext))
            raise problem
        self._advance(size, flags)
        return bool(flags & FLAG_FINAL)

    def open_plain_bytes(self, flags: int, length: int, source: memoryview, pos: int) -> bytes | None:
        """The plaintext of the plain record at ``pos`` in ``source`` (its ``length`` checked by
        the caller) as new ``bytes`` (``AESGCM.decrypt`` makes them: no copy through a buffer),
        moving on by one. None, with nothing changed, for anything ``open_record`` would judge
        (flags, a limit, a failed tag): the caller then opens it that way."""
        seq = self._seq
        size = length - TAG_SIZE
        if flags or seq >= self.limits.hard_records or self._key_bytes + size > self.limits.hard_bytes:
            return None
        body = pos + RECORD_HEADER_SIZE
        keys = self._keys
        try:
            plaintext = keys.aead.decrypt(
                keys.nonce_into(seq), source[body : body + length], source[pos:body]
            )
        except InvalidTag:
            return None
        self._seq = seq + 1
        self._key_bytes += size
        return plaintext

    def open_run(
        self, source: memoryview, pos: int, stop: int, target: memoryview, got: int, max_records: int
    ) -> tuple[int, int, int]:
        """Open consecutive whole plain records of ``source`` from ``pos`` (up to ``stop``)
        straight into ``target`` from ``got``, at most ``max_records`` of them; return (the
        position after them, the new ``got``, records opened). Stops before anything else,
        leaving it to ``open_record``: a flag, an empty record, a record not whole before
        ``stop`` or too large for what is left of ``target``, a limit, a failed tag (its output
        wiped).

        The hot path: every per-record call and slice counts (~0.1 us each, against ~0.7 us
        for a 1 KiB ``decrypt_into``): the nonce is patched inline, the limits become two
        budgets, and the associated data of a plain record (flags 0 and its length) is rebuilt
        once per length rather than sliced from the input, which holds the same five bytes."""
        size = len(target)
        keys = self._keys
        decrypt_into = keys.decrypt_into
        nonce, pack_low, iv_low = keys.nonce_parts
        seq = self._seq
        limits = self.limits
        records_left = min(limits.hard_records - seq, max_records)
        bytes_left = limits.hard_bytes - self._key_bytes
        max_ciphertext = self.max_ciphertext
        unpack = _unpack_record_header
        aad_length, aad = self._plain_aad
        opened = 0
        try:
            while stop - pos >= RECORD_HEADER_SIZE and opened < records_left:
                flags, length = unpack(source, pos)
                body = pos + RECORD_HEADER_SIZE
                end = body + length
                count = length - TAG_SIZE
                if flags or end > stop or count > size - got or count > bytes_left:
                    break
                if length != aad_length:
                    if not TAG_SIZE < length <= max_ciphertext:
                        break
                    aad_length, aad = length, _pack_record_header(0, length)
                    self._plain_aad = (length, aad)
                out = target[got : got + count]
                pack_low(nonce, 4, iv_low ^ (seq + opened))
                try:
                    decrypt_into(nonce, source[body:end], aad, out)
                except InvalidTag:
                    out[:] = bytes(count)  # wiped; open_record opens it again and reports it
                    break
                opened += 1
                bytes_left -= count
                got += count
                pos = end
        finally:
            self._seq = seq + opened
            self._key_bytes = limits.hard_bytes - bytes_left
        return pos, got, opened

    # -- sealing ---------------------------------------------------------------------------

    def far_from_limits(self, records: int, update_requested: bool) -> bool:
        """True when ``records`` more records of up to ``record_size`` bytes stay below every
        update limit (so below the hard ones, which are at least as high): then they are all
        plain records, and planning them one by one would find nothing. The Sealer's per-call
        shortcut."""
        limits = self.limits
        return (
            not update_requested
            and self._seq + records + 1 < limits.update_after_records
            and self._key_bytes + (records + 1) * self.record_size < limits.update_after_bytes
        )

    def plan_flags(
        self, sizes: list[int], *, final: bool, update_requested: bool, auto_update: bool
    ) -> list[int]:
        """The flags of each record that sealing ``sizes`` from this position would make, or
        LimitReachedError (nothing sealed) if one of them would pass a hard limit.

        Pure: the Sealer checks a whole call with it before sealing anything, then seals with
        the flags it returned, so the check and the sealing cannot disagree. The last slot of
        a key is kept for a record that carries KEY_UPDATE (or FINAL): a plain record there
        would leave no way to move on to the next key."""
        limits = self.limits
        record_size = self.record_size
        seq, key_bytes, update = self._seq, self._key_bytes, update_requested
        last_index = len(sizes) - 1
        flags = []
        for index, length in enumerate(sizes):
            last = final and index == last_index
            due = not last and (
                update
                or (
                    auto_update
                    and (
                        seq + 1 >= limits.update_after_records
                        or key_bytes + length >= limits.update_after_bytes
                        # in time: the next full record must still fit under this key's hard limit
                        or key_bytes + length + record_size > limits.hard_bytes
                    )
                )
            )
            if (
                seq >= limits.hard_records
                or key_bytes + length > limits.hard_bytes
                or (seq + 1 >= limits.hard_records and not due and not last)
            ):
                raise LimitReachedError(
                    f"sealing would pass the hard limit of {limits.hard_records} records or "
                    f"{limits.hard_bytes} bytes per key; call update_key() first"
                )
            if due:
                flags.append(FLAG_KEY_UPDATE)
                seq, key_bytes, update = 0, 0, False
            else:
                flags.append(FLAG_FINAL if last else 0)
                seq, key_bytes = seq + 1, key_bytes + length
        return flags

    def seal_one(self, data: Buffer, size: int, out: memoryview) -> int:
        """Seal ``data`` (``size`` bytes, checked by the caller with ``far_from_limits``) as
        one plain record at the start of ``out``; return its wire length."""
        wire = size + RECORD_HEADER_SIZE + TAG_SIZE
        RECORD_HEADER.pack_into(out, 0, 0, size + TAG_SIZE)
        keys = self._keys
        nonce = keys.nonce_into(self._seq)
        self._seq += 1  # reserved before use: an interrupted call never leaves it reusable
        self._key_bytes += size
        keys.aead.encrypt_into(nonce, data, out[:RECORD_HEADER_SIZE], out[RECORD_HEADER_SIZE:wire])
        return wire

    def seal_run(
        self,
        out: memoryview,
        pos: int,
        src: memoryview,
        start: int,
        sizes: list[int],
        flags: list[int] | None,
        final: bool,
    ) -> tuple[int, bool]:
        """Seal consecutive records of ``src`` from ``start``, one per size, into ``out`` at
        ``pos`` with the planned ``flags`` (None: plain, FINAL on the last if ``final``);
        return the end and whether one of them carried KEY_UPDATE."""
        keys = self._keys
        encrypt_into = keys.aead.encrypt_into
        nonce, pack_low, iv_low = keys.nonce_parts
        pack_into = RECORD_HEADER.pack_into
        last = len(sizes) - 1
        taken = start
        updated = False
        aad_flag, aad_length, aad = -1, -1, b""  # a record's header is its associated data
        for index, length in enumerate(sizes):
            flag = flags[index] if flags is not None else FLAG_FINAL if final and index == last else 0
            chunk = src[taken : taken + length]
            taken += length
            body = pos + RECORD_HEADER_SIZE
            end = body + length + TAG_SIZE
            if flag != aad_flag or length != aad_length:  # full records share one header
                aad_flag, aad_length = flag, length
                aad = _pack_record_header(flag, length + TAG_SIZE)
            pack_into(out, pos, flag, length + TAG_SIZE)
            pack_low(nonce, 4, iv_low ^ self._seq)
            # The position moves on before the record is sealed (a nonce is reserved, then
            # used), so a call interrupted here (Ctrl-C) can lose a record, never reuse a nonce.
            seal_record = encrypt_into
            if flag & FLAG_KEY_UPDATE:
                self._advance(length, flag)  # this record is the old key's last
                encrypt_into = self._keys.aead.encrypt_into
                sealing_nonce, (nonce, pack_low, iv_low) = nonce, self._keys.nonce_parts
                updated = True
            else:  # _advance inlined: this is the per-record hot path
                self._seq += 1
                self._key_bytes += length
                sealing_nonce = nonce
            seal_record(sealing_nonce, chunk, aad, out[body:end])
            pos = end
        return pos, updated


def records_per_generation(record_size: int, limits: KeyLimits) -> int:
    """Records per key generation when every record is full: ``plan_flags``' automatic key
    update (FORMAT.md 6.3 rule 5) marks record ``seq`` when ``seq + 1 >= update_after_records``,
    ``(seq + 1) * size >= update_after_bytes`` or the next full record would pass
    ``hard_bytes``."""
    by_bytes = -(-limits.update_after_bytes // record_size)
    return max(1, min(limits.update_after_records, by_bytes, limits.hard_bytes // record_size))


class KeyChain:
    """The keys of any key generation of one direction, derived forward (FORMAT.md 5.4) from
    the nearest one kept: the last one used and one every ``CHECKPOINT`` generations, so a file
    with many key updates costs a few TrafficKeys, and a read far from the last one at most
    ``CHECKPOINT`` derivations. Random access opens records with it (``open_at``), a file's
    workers seal and open runs at their places (``seal_run_at``, ``open_run_at``). Not shared
    between threads (it caches keys as it goes): one per thread."""

    __slots__ = ("_checkpoints", "_last")

    CHECKPOINT = 1024

    def __init__(self, first: TrafficKeys) -> None:
        self._checkpoints = [first]  # generations 0, CHECKPOINT, 2 * CHECKPOINT, ...
        self._last = first

    def __call__(self, generation: int) -> TrafficKeys:
        keys = self._last
        if keys.generation == generation:
            return keys
        checkpoint = self._checkpoints[min(generation // self.CHECKPOINT, len(self._checkpoints) - 1)]
        if keys.generation > generation or checkpoint.generation > keys.generation:
            keys = checkpoint
        while keys.generation < generation:
            keys = keys.next()
            if keys.generation == len(self._checkpoints) * self.CHECKPOINT:
                self._checkpoints.append(keys)
        self._last = keys
        return keys

    def open_at(
        self, generation: int, seq: int, flags: int, wire: memoryview, out: memoryview, number: int
    ) -> None:
        """Open record ``number``, whose place gives its key ``generation``, ``seq`` and
        ``flags``, from ``wire`` (its header and ciphertext) into ``out`` (its plaintext size):
        the associated data is what its place requires, so a record moved, cut, altered or
        relabelled fails as AuthenticationError, with ``out`` wiped."""
        self.open_run_at(generation, seq, 1, len(out), flags, wire, out, number)

    def open_run_at(
        self,
        generation: int,
        seq: int,
        count: int,
        size: int,
        last_flags: int,
        wire: memoryview,
        out: memoryview,
        number: int,
    ) -> None:
        """Open ``count`` consecutive records of ``size`` plaintext bytes each, records
        ``number``.. under key ``generation`` from ``seq`` (plain but the last, which carries
        ``last_flags``), from ``wire`` (their headers and ciphertexts, back to back) into
        ``out`` (their plaintexts, back to back). Each stored header must equal the one its
        place requires and is the associated data, so a record moved, cut, altered or
        relabelled fails as AuthenticationError with its number, and all of ``out`` wiped.

        Thread-safe for distinct KeyChains (a file's parallel decryption): the nonce buffer
        is this call's own, never the TrafficKeys' shared one."""
        keys = self(generation)
        decrypt_into = keys.decrypt_into
        _, pack_low, iv_low = keys.nonce_parts
        nonce = bytearray(keys.nonce(seq))  # this call's own buffer (threads never share one)
        wire_size = size + RECORD_HEADER_SIZE + TAG_SIZE
        aad = _pack_record_header(0, size + TAG_SIZE)
        pos = got = 0
        last = count - 1
        for index in range(count):
            if index == last and last_flags:
                aad = _pack_record_header(last_flags, size + TAG_SIZE)
            body = pos + RECORD_HEADER_SIZE
            if wire[pos:body] != aad:  # moved, cut or relabelled: it cannot authenticate
                out[: count * size] = bytes(count * size)
                raise AuthenticationError(number + index)
            pack_low(nonce, 4, iv_low ^ (seq + index))
            try:
                decrypt_into(nonce, wire[body : pos + wire_size], aad, out[got : got + size])
            except InvalidTag:
                out[: count * size] = bytes(count * size)
                raise AuthenticationError(number + index) from None
            pos += wire_size
            got += size

    def seal_run_at(
        self,
        generation: int,
        seq: int,
        count: int,
        size: int,
        last_flags: int,
        src: memoryview,
        out: memoryview,
    ) -> int:
        """Seal ``count`` consecutive records of ``size`` plaintext bytes each from ``src``
        into ``out`` (header and ciphertext, back to back) under key ``generation`` from
        ``seq``, plain but the last, which carries ``last_flags``; return the bytes written.

        The place of a record (its generation and seq) is its nonce, so records sealed at
        distinct places never share a (key, nonce) pair whoever seals them: a file's parallel
        encryption gives each worker a disjoint range of places (docs/FORMAT.md 4.3.1). The
        caller keeps ``seq + count`` within the generation's records (the layout's N). Thread-
        safe for distinct KeyChains: the nonce buffer is this call's own."""
        keys = self(generation)
        encrypt_into = keys.aead.encrypt_into
        _, pack_low, iv_low = keys.nonce_parts
        nonce = bytearray(keys.nonce(seq))  # this call's own buffer (threads never share one)
        wire_size = size + RECORD_HEADER_SIZE + TAG_SIZE
        aad = _pack_record_header(0, size + TAG_SIZE)
        pos = taken = 0
        last = count - 1
        for index in range(count):
            if index == last and last_flags:
                aad = _pack_record_header(last_flags, size + TAG_SIZE)
            body = pos + RECORD_HEADER_SIZE
            out[pos:body] = aad
            pack_low(nonce, 4, iv_low ^ (seq + index))
            encrypt_into(nonce, src[taken : taken + size], aad, out[body : pos + wire_size])
            pos += wire_size
            taken += size
        return pos


# -- Tink's segments ------------------------------------------------------------------------


class TinkSegments:
    """The segment keys and nonces of one Tink AES-GCM-HKDF stream (``gcmstream.tinkstream``;
    docs/TINK.md): the only code that seals or opens a Tink segment.

    The nonce of segment ``index`` is ``nonce_prefix || index (4 bytes, big-endian) || last``
    (one byte, 1 for the stream's last segment), patched into one buffer, never stored per
    segment; segments carry no associated data (Tink's associated data went into the key).
    Whether a segment is the last is decided by the caller from the stream's end, and is
    authenticated by the nonce: a segment opened with the wrong ``last`` fails its tag.
    """

    __slots__ = ("_aead", "_nonce")

    # 2^32 segments: the index field of the nonce is four bytes
    MAX_SEGMENTS = 1 << 32

    def __init__(self, aead: AESGCM, nonce_prefix: bytes) -> None:
        if len(nonce_prefix) != 7:
            raise ValueError("a Tink nonce prefix is 7 bytes")
        self._aead = aead
        self._nonce = bytearray(nonce_prefix + bytes(5))

    def __repr__(self) -> str:  # never show key material or nonces
        return "<TinkSegments>"

    def _nonce_for(self, index: int, last: bool) -> bytearray:
        _pack_segment(self._nonce, 7, index, 1 if last else 0)  # 0 <= index < 2^32: checked by the caller
        return self._nonce

    def seal(self, index: int, last: bool, plaintext: Buffer, out: memoryview) -> None:
        """Seal segment ``index`` into ``out`` (``len(plaintext) + 16`` bytes); LimitReachedError
        (nothing sealed) past the 2^32nd segment."""
        if not 0 <= index < self.MAX_SEGMENTS:
            raise LimitReachedError(f"segment {index}: a Tink stream holds at most 2^32 segments")
        self._aead.encrypt_into(self._nonce_for(index, last), plaintext, None, out)

    def seal_run(self, first: int, plaintext: memoryview, size: int, out: memoryview) -> int:
        """Seal ``plaintext`` as consecutive non-last segments of ``size`` bytes from index
        ``first`` (its length a multiple of ``size``) into ``out``; returns the bytes written.
        The hot loop of a sealer fed more than a segment at a time."""
        count = len(plaintext) // size
        if first + count > self.MAX_SEGMENTS:
            raise LimitReachedError(f"segment {first + count - 1}: a Tink stream holds at most 2^32 segments")
        encrypt_into = self._aead.encrypt_into
        nonce = self._nonce
        nonce[11] = 0
        wire = size + TAG_SIZE
        for step in range(count):
            _pack_index(nonce, 7, first + step)
            encrypt_into(
                nonce, plaintext[step * size : (step + 1) * size], None, out[step * wire : (step + 1) * wire]
            )
        return count * wire

    def open(self, index: int, last: bool, ciphertext: memoryview, out: memoryview) -> None:
        """Open segment ``index`` into ``out`` (``len(ciphertext) - 16`` bytes); cryptography's
        InvalidTag if it does not authenticate as that segment (``out`` is then wiped);
        MalformedRecordError past the 2^32nd segment, which no writer makes."""
        if not 0 <= index < self.MAX_SEGMENTS:
            raise MalformedRecordError(
                f"segment {index}: a Tink stream holds at most 2^32 segments", record_number=index
            )
        try:
            self._aead.decrypt_into(self._nonce_for(index, last), ciphertext, None, out)
        except InvalidTag:
            out[:] = bytes(len(out))
            raise

    def authenticates(self, index: int, last: bool, ciphertext: memoryview) -> bool:
        """Whether ``ciphertext`` authenticates as segment ``index`` (nothing is released:
        the plaintext goes to a scratch buffer that is wiped). Used to tell a stream cut at a
        segment boundary (its last segment opens as a middle one) from a tampered one."""
        scratch = bytearray(len(ciphertext) - TAG_SIZE)
        try:
            self.open(index, last, ciphertext, memoryview(scratch))
        except InvalidTag:
            return False
        scratch[:] = bytes(len(scratch))
        return True

    def open_run(self, first: int, ciphertext: memoryview, wire: int, out: memoryview) -> int:
        """Open ``ciphertext`` as consecutive non-last segments of ``wire`` bytes from index
        ``first`` into ``out``; returns how many opened before the first that failed (the
        caller raises for that one; its plaintext is wiped). The hot loop of an opener."""
        count = len(ciphertext) // wire
        if first + count > self.MAX_SEGMENTS:
            count = max(0, self.MAX_SEGMENTS - first)
        decrypt_into = self._aead.decrypt_into
        nonce = self._nonce
        nonce[11] = 0
        size = wire - TAG_SIZE
        step = 0
        try:
            for step in range(count):
                _pack_index(nonce, 7, first + step)
                decrypt_into(
                    nonce,
                    ciphertext[step * wire : (step + 1) * wire],
                    None,
                    out[step * size : (step + 1) * size],
                )
        except InvalidTag:
            out[step * size : (step + 1) * size] = bytes(size)
            return step
        return count


_pack_segment = struct.Struct(">IB").pack_into
_pack_index = struct.Struct(">I").pack_into
