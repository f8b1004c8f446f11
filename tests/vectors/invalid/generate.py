"""Write the invalid-stream vectors in this directory: one JSON file per case.

Run from the repository root::

    .venv/bin/python tests/vectors/invalid/generate.py           # (re)write the files
    .venv/bin/python tests/vectors/invalid/generate.py --check   # fail if a file differs

Every case is built deterministically (fixed keys and salts) with the format's own key schedule,
then records are forged, cut, moved or altered. The expected result of each case is written down
from its construction (which error, which records authenticate before it), not taken from what
gcmstream happens to do; the generator then replays every case through gcmstream's Opener and
refuses to write anything if the library disagrees. The ``valid_stream_*`` cases are cut from a
stream of ../valid.json (its generator, ../generate.py, reproduces it), and the ``hand_sealed_*``
ones seal records a writer never would.

Fields of a case (see README.md): ``mode`` is "one-way" (an Opener reads ``input``),
"channel" (a RESPONDER Channel with salt ``receiver_salt`` and record size
``receiver_record_size`` reads ``input`` as its peer's bytes) or "channel-initiator" (an
INITIATOR Channel sends its header ``receiver_sends``, then reads ``input`` as the responder's
answer); ``expect`` is the exception class
name from gcmstream.errors; ``released_sha256``/``released_length`` describe the plaintext an
opener releases before the error when it is given the whole input at once and then EOF (as in
age's CCTV corpus); ``plaintext_sha256`` is the plaintext the writer meant to send.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from cryptography.hazmat.primitives.asymmetric import mlkem

from gcmstream import GcmStreamError, KeyRing, Opener, Role
from gcmstream._fixed import fixed_channel as fixed_randomness_channel
from gcmstream.format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HARD_MAX_RECORD_SIZE,
    HEADER_SIZE,
    MAX_FIELDS_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    FieldType,
    KeyExchange,
    Suite,
    TrafficKeys,
    make_header,
    parse_header,
    verify_header,
)
from gcmstream.handshake import (
    CHANNEL_FIELDS,
    ChannelKeys,
    FixedEphemeral,
    InitiatorShares,
    channel_keys,
    respond,
)

HERE = Path(__file__).resolve().parent

KEY = bytes(range(16))
KEY_256 = bytes(range(32, 64))
OTHER_KEY = bytes(range(100, 116))
CONTEXT = b"gcmstream invalid vectors"
RECORD_SIZE = 32
SALT_A = bytes([0xA1]) * 32
SALT_B = bytes([0xB2]) * 32
SALT_R1 = bytes([0xC3]) * 32
SALT_R2 = bytes([0xD4]) * 32
SALT_I = bytes([0xE5]) * 32
# fixed ephemeral X25519 keys (test-only injection): channel cases use the X25519 exchange
INITIATOR_X25519 = bytes(range(1, 33))
RESPONDER_X25519 = bytes(range(33, 65))
# the INITIATOR that reads in channel-initiator cases: a salt of its own (a responder refuses an
# initiator header whose salt a live initiator of this process holds, K4, and the channel cases
# send SALT_I to responders) and, for hybrid offers, a fixed ML-KEM-768 seed
SALT_READING_INITIATOR = bytes([0xF6]) * 32
INITIATOR_MLKEM_SEED = bytes(range(128, 192))

# Plaintext of the base stream: five records, the second one carries KEY_UPDATE, the third is
# short (a flush), the last is FINAL. Distinct bytes everywhere so any mix-up is visible.
BASE = [
    (0, bytes(range(0, 32))),
    (FLAG_KEY_UPDATE, bytes(range(32, 64))),
    (0, bytes(range(64, 74))),
    (0, bytes(range(80, 112))),
    (FLAG_FINAL, bytes(range(112, 117))),
]


@dataclass
class Forged:
    """A stream built record by record: the header, each wire record and its plaintext."""

    header: bytes
    records: list[bytes] = field(default_factory=list)
    plaintexts: list[bytes] = field(default_factory=list)

    def wire(self, records: list[bytes] | None = None) -> bytes:
        return self.header + b"".join(self.records if records is None else records)

    def plain(self, count: int | None = None) -> bytes:
        return b"".join(self.plaintexts[: len(self.plaintexts) if count is None else count])


def seal_record(
    keys: TrafficKeys, seq: int, flags: int, plaintext: bytes, length: int | None = None
) -> bytes:
    """One wire record: header (flags, length) as associated data, then ciphertext and tag."""
    wire_length = len(plaintext) + TAG_SIZE if length is None else length
    header = RECORD_HEADER.pack(flags, wire_length)
    return header + keys.aead.encrypt(keys.nonce(seq), plaintext, header)


def forge(
    records: list[tuple[int, bytes]],
    *,
    key: bytes = KEY,
    salt: bytes = SALT_A,
    context: bytes = CONTEXT,
    record_size: int = RECORD_SIZE,
    role: Role = Role.ONE_WAY,
    secret: Callable[[bytes, bytes], bytes] | None = None,
    fields: list[tuple[int, bytes]] | None = None,
) -> Forged:
    """Seal ``records`` (flags, plaintext) as a writer would, whatever the flags say.

    The key schedule follows the flags: a KEY_UPDATE record is sealed under the current key,
    then the next generation starts at sequence 0. ``secret`` maps (header, stream secret) to
    the secret to use (channels key each direction from both headers).
    """
    exchange = KeyExchange.NONE if role is Role.ONE_WAY else KeyExchange.X25519
    header, stream_secret = make_header(
        key, role, record_size, context, salt, key_exchange=exchange, fields=fields or ()
    )
    keys = TrafficKeys(stream_secret if secret is None else secret(header, stream_secret), Suite.for_key(key))
    out = Forged(header)
    seq = 0
    for flags, plaintext in records:
        out.records.append(seal_record(keys, seq, flags, plaintext))
        out.plaintexts.append(plaintext)
        if flags & FLAG_KEY_UPDATE:
            keys, seq = keys.next(), 0
        else:
            seq += 1
    return out


def initiator_hello(
    context: bytes = CONTEXT,
    key_exchange: KeyExchange = KeyExchange.X25519,
    fields: list[tuple[int, bytes]] | None = None,
) -> bytes:
    """The INITIATOR's header, with its fixed X25519 ephemeral key (or the ``fields`` given)."""
    if fields is None:
        fields = InitiatorShares(KeyExchange.X25519, FixedEphemeral(INITIATOR_X25519)).fields()
    return make_header(
        KEY, Role.INITIATOR, RECORD_SIZE, context, SALT_I, key_exchange=key_exchange, fields=fields
    )[0]


def responder_answer(
    hello: bytes, receiver_salt: bytes, context: bytes = CONTEXT
) -> tuple[bytes, ChannelKeys]:
    """What the RESPONDER with ``receiver_salt`` and its fixed X25519 key answers to ``hello``,
    and the keys both sides derive."""
    fields, shared = respond(parse_header(hello, CHANNEL_FIELDS), FixedEphemeral(RESPONDER_X25519))
    answer = make_header(
        KEY,
        Role.RESPONDER,
        RECORD_SIZE,
        context,
        receiver_salt,
        key_exchange=KeyExchange.X25519,
        fields=fields,
    )[0]
    return answer, channel_keys(KEY, shared, hello, answer, context)


def forge_channel(records: list[tuple[int, bytes]], receiver_salt: bytes, context: bytes = CONTEXT) -> Forged:
    """The INITIATOR's bytes (header, Finished, records) to the RESPONDER with ``receiver_salt``."""
    hello = initiator_hello(context)
    _, keys = responder_answer(hello, receiver_salt, context)
    forged = forge(
        records, role=Role.INITIATOR, context=context, secret=lambda _h, _s: keys.initiator_to_responder
    )
    forged.header = hello + keys.initiator_finished
    return forged


def flip(data: bytes, index: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[index] ^= 1 << bit
    return bytes(out)


@dataclass
class Case:
    name: str
    comment: str
    input: bytes
    expect: str
    released: bytes
    plaintext: bytes
    mode: str = "one-way"
    key: bytes = KEY
    context: bytes = CONTEXT
    max_record_size: int | None = None
    receiver_salt: bytes | None = None
    receiver_key_exchange: int = KeyExchange.X25519
    receiver_peer_id: bytes | None = None
    # channel-initiator only: the reader's own first flight, its ML-KEM seed, its key ring
    receiver_sends: bytes | None = None
    receiver_mlkem768_seed: bytes | None = None
    receiver_key_ring: list[bytes] | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "comment": self.comment,
            "mode": self.mode,
            "key": self.key.hex(),
            "context": self.context.hex(),
        }
        if self.max_record_size is not None:
            out["max_record_size"] = self.max_record_size
        if self.receiver_salt is not None:
            initiator = self.mode == "channel-initiator"
            out["receiver_salt"] = self.receiver_salt.hex()
            out["receiver_record_size"] = RECORD_SIZE
            out["receiver_x25519"] = (INITIATOR_X25519 if initiator else RESPONDER_X25519).hex()
            out["receiver_key_exchange"] = self.receiver_key_exchange
            if self.receiver_mlkem768_seed is not None:
                out["receiver_mlkem768_seed"] = self.receiver_mlkem768_seed.hex()
            if self.receiver_key_ring is not None:
                out["receiver_key_ring"] = [key.hex() for key in self.receiver_key_ring]
            if self.receiver_peer_id is not None:
                out["receiver_peer_id"] = self.receiver_peer_id.hex()
            if self.receiver_sends is not None:
                out["receiver_sends"] = self.receiver_sends.hex()
        out.update(
            expect=self.expect,
            released_length=len(self.released),
            released_sha256=hashlib.sha256(self.released).hexdigest(),
            plaintext_sha256=hashlib.sha256(self.plaintext).hexdigest(),
            plaintext=self.plaintext.hex(),
            input_length=len(self.input),
            input=self.input.hex(),
        )
        return out


def _header_with(header: bytes, offset: int, value: bytes) -> bytes:
    return header[:offset] + value + header[offset + len(value) :]


def build_cases() -> list[Case]:
    base = forge(BASE)
    true = base.plain()
    r = base.records
    cases: list[Case] = []

    def add(name: str, comment: str, data: bytes, expect: str, released: int | bytes, **kw: object) -> None:
        rel = base.plain(released) if isinstance(released, int) else released
        cases.append(Case(name, comment, data, expect, rel, kw.pop("plaintext", true), **kw))  # type: ignore[arg-type]

    # -- truncation ----------------------------------------------------------------------
    add("empty_input", "no bytes at all", b"", "TruncatedStreamError", 0)
    add("header_cut", "input ends inside the stream header", base.header[:40], "TruncatedStreamError", 0)
    add("header_only", "a valid header and nothing else", base.header, "TruncatedStreamError", 0)
    add("no_final_record", "every record but the FINAL one", base.wire(r[:4]), "TruncatedStreamError", 4)
    add(
        "ends_after_key_update",
        "the stream ends right after the record carrying KEY_UPDATE",
        base.wire(r[:2]),
        "TruncatedStreamError",
        2,
    )
    add(
        "cut_in_record_header",
        "input ends after 2 bytes of record 2's 5-byte header",
        base.wire(r[:2]) + r[2][:2],
        "TruncatedStreamError",
        2,
    )
    add(
        "cut_in_ciphertext",
        "input ends in the middle of record 3's ciphertext",
        base.wire(r[:3]) + r[3][:20],
        "TruncatedStreamError",
        3,
    )
    add(
        "missing_tag_byte",
        "the last byte of the FINAL record's tag is missing",
        base.wire()[:-1],
        "TruncatedStreamError",
        4,
    )
    add(
        "missing_tag",
        "the FINAL record without its 16-byte tag",
        base.wire()[:-TAG_SIZE],
        "TruncatedStreamError",
        4,
    )
    many = forge([(0, bytes([i % 256]) * 3) for i in range(300)])
    add(
        "no_final_after_300_records",
        "300 short records (sequence numbers past 255, as age's counter carry case) and no FINAL",
        many.wire(),
        "TruncatedStreamError",
        many.plain(),
        plaintext=many.plain(),
    )

    # -- tampering -----------------------------------------------------------------------
    off2 = HEADER_SIZE + len(r[0]) + len(r[1])
    add(
        "flipped_tag",
        "one bit of record 2's tag flipped",
        flip(base.wire(), off2 + len(r[2]) - 1),
        "AuthenticationError",
        2,
    )
    add(
        "flipped_ciphertext",
        "one bit of record 0's ciphertext flipped",
        flip(base.wire(), HEADER_SIZE + RECORD_HEADER_SIZE + 3, 7),
        "AuthenticationError",
        0,
    )
    add(
        "flipped_final_flag",
        "FINAL flag set on record 0 without resealing it (the record header is associated data)",
        flip(base.wire(), HEADER_SIZE),
        "AuthenticationError",
        0,
    )
    add(
        "cleared_final_flag",
        "FINAL flag cleared on the last record",
        flip(base.wire(), HEADER_SIZE + sum(map(len, r[:4]))),
        "AuthenticationError",
        4,
    )
    add(
        "cleared_key_update_flag",
        "KEY_UPDATE flag cleared on record 1",
        flip(base.wire(), HEADER_SIZE + len(r[0]), 1),
        "AuthenticationError",
        1,
    )
    add(
        "length_shortened",
        "record 0's length field one smaller: the record ends a byte early",
        _header_with(base.wire(), HEADER_SIZE + 1, (len(r[0]) - RECORD_HEADER_SIZE - 1).to_bytes(4, "big")),
        "AuthenticationError",
        0,
    )
    add("dropped_record", "record 2 removed", base.wire(r[:2] + r[3:]), "AuthenticationError", 2)
    add("dropped_first_record", "record 0 removed", base.wire(r[1:]), "AuthenticationError", 0)
    add("duplicated_record", "record 0 sent twice", base.wire([r[0], *r]), "AuthenticationError", 1)
    add("duplicated_final", "the FINAL record sent twice", base.wire([*r, r[4]]), "TrailingDataError", 4)
    add(
        "swapped_records",
        "records 2 and 3 swapped",
        base.wire([r[0], r[1], r[3], r[2], r[4]]),
        "AuthenticationError",
        2,
    )
    add(
        "reordered_across_key_update",
        "record 0 moved after record 1 (the KEY_UPDATE record)",
        base.wire([r[1], r[0], *r[2:]]),
        "AuthenticationError",
        0,
    )
    other = forge(BASE, salt=SALT_B)
    add(
        "spliced_record",
        "record 2 replaced by record 2 of another stream under the same key and context",
        base.wire([*r[:2], other.records[2], *r[3:]]),
        "AuthenticationError",
        2,
    )
    add(
        "spliced_header",
        "the header of another stream under the same key, then this stream's records",
        other.header + b"".join(r),
        "AuthenticationError",
        0,
    )
    stale = forge(BASE[:2])
    stale_keys = TrafficKeys(
        make_header(KEY, Role.ONE_WAY, RECORD_SIZE, CONTEXT, SALT_A)[1], Suite.AES_128_GCM
    )
    add(
        "sealed_under_old_key",
        "record 2 sealed with the key generation that record 1's KEY_UPDATE retired (sequence 2)",
        stale.wire() + seal_record(stale_keys, 2, 0, BASE[2][1]) + b"".join(r[3:]),
        "AuthenticationError",
        2,
    )
    new_keys = stale_keys.next()
    add(
        "sequence_skipped",
        "record 2 sealed under the right key with sequence 1 instead of 0",
        base.wire(r[:2]) + seal_record(new_keys, 1, 0, BASE[2][1]),
        "AuthenticationError",
        2,
    )

    # -- records that authenticate but break the rules -----------------------------------------
    mid = forge([(0, b"first"), (FLAG_FINAL, b"final in the middle"), (0, b"after"), (FLAG_FINAL, b"end")])
    add(
        "final_in_middle",
        "a FINAL record followed by more records, all sealed correctly",
        mid.wire(),
        "TrailingDataError",
        mid.plain(1),
        plaintext=mid.plain(),
    )
    two = forge([*BASE, (FLAG_FINAL, b"second final")])
    add(
        "two_final_records",
        "two FINAL records in a row, both sealed correctly",
        two.wire(),
        "TrailingDataError",
        4,
        plaintext=two.plain(),
    )
    add("trailing_byte", "one byte after the FINAL record", base.wire() + b"\x00", "TrailingDataError", 4)
    add(
        "trailing_garbage_long",
        "1 KiB of garbage after the FINAL record",
        base.wire() + bytes((i * 7 + 3) % 256 for i in range(1024)),
        "TrailingDataError",
        4,
    )
    add(
        "trailing_huge_length",
        "after FINAL, a record header with length 0xffffffff",
        base.wire() + RECORD_HEADER.pack(0, 0xFFFFFFFF),
        "TrailingDataError",
        4,
    )
    both = forge([(0, b"ok"), (FLAG_FINAL | FLAG_KEY_UPDATE, b"both")])
    add(
        "final_and_key_update",
        "a correctly sealed record carrying both FINAL and KEY_UPDATE",
        both.wire(),
        "MalformedRecordError",
        both.plain(1),
        plaintext=both.plain(),
    )
    unknown = forge([(0, b"ok"), (0x04, b"unknown flag"), (FLAG_FINAL, b"")])
    add(
        "unknown_flag",
        "a correctly sealed record with flag 0x04",
        unknown.wire(),
        "MalformedRecordError",
        unknown.plain(1),
        plaintext=unknown.plain(),
    )
    high = forge([(0x80, b"high flag"), (FLAG_FINAL, b"")])
    add(
        "unknown_high_flag",
        "a correctly sealed record with flag 0x80",
        high.wire(),
        "MalformedRecordError",
        b"",
        plaintext=high.plain(),
    )
    add(
        "length_below_tag",
        "record 2 has length 15, shorter than the tag",
        base.wire(r[:2]) + RECORD_HEADER.pack(0, TAG_SIZE - 1) + bytes(TAG_SIZE - 1),
        "MalformedRecordError",
        2,
    )
    add(
        "length_zero",
        "record 0 has length 0",
        base.header + RECORD_HEADER.pack(0, 0),
        "MalformedRecordError",
        0,
    )
    add(
        "length_over_record_size",
        "record 2's length field is the announced record size + tag + 1",
        base.wire(r[:2]) + RECORD_HEADER.pack(0, RECORD_SIZE + TAG_SIZE + 1) + bytes(64),
        "RecordTooLargeError",
        2,
    )
    add(
        "length_huge",
        "record 1's length field is 0xffffffff (must be refused before anything is buffered)",
        base.wire(r[:1]) + RECORD_HEADER.pack(0, 0xFFFFFFFF),
        "RecordTooLargeError",
        1,
    )
    big = forge([(0, b"ok"), (FLAG_FINAL, bytes(RECORD_SIZE + 1))])
    add(
        "sealed_record_over_record_size",
        "a correctly sealed FINAL record one byte longer than the announced record size",
        big.wire(),
        "RecordTooLargeError",
        big.plain(1),
        plaintext=big.plain(),
    )

    # -- stream header -------------------------------------------------------------------
    h = base.header
    rest = b"".join(r)
    add("bad_magic", "magic GCMT", _header_with(h, 0, b"GCMT") + rest, "UnsupportedFormatError", 0)
    add("bad_version", "version 3", _header_with(h, 4, b"\x03") + rest, "UnsupportedFormatError", 0)
    add(
        "version_1",
        "version 1 (never released, no longer read)",
        _header_with(h, 4, b"\x01") + rest,
        "UnsupportedFormatError",
        0,
    )
    add("bad_role", "role 3", _header_with(h, 5, b"\x03") + rest, "MalformedHeaderError", 0)
    add("bad_suite", "suite 3", _header_with(h, 6, b"\x03") + rest, "MalformedHeaderError", 0)
    add(
        "key_exchange_on_one_way",
        "key exchange 1 (X25519) in a one-way header",
        _header_with(h, 7, b"\x01") + rest,
        "MalformedHeaderError",
        0,
    )
    add(
        "fields_too_long",
        f"fields length {MAX_FIELDS_SIZE + 1}, over the bound",
        _header_with(h, 60, (MAX_FIELDS_SIZE + 1).to_bytes(2, "big")) + rest,
        "MalformedHeaderError",
        0,
    )
    add(
        "unknown_key_id",
        "one bit of the key ID flipped: it names no key the reader holds",
        flip(base.wire(), 12),
        "UnknownKeyError",
        0,
    )
    critical = forge(BASE, fields=[(0x7FFF, b"from the future")])
    add(
        "unknown_critical_field",
        "a correctly committed header with critical field type 0x7fff",
        critical.wire(),
        "UnknownFieldError",
        0,
    )
    optional = forge(BASE, fields=[(0x8001, b"ignore me")])
    add(
        "unknown_optional_field_then_cut",
        "a correctly committed header with non-critical field 0x8001 (ignored), cut before FINAL",
        optional.wire(optional.records[:4]),
        "TruncatedStreamError",
        4,
    )
    add("record_size_zero", "record size 0", _header_with(h, 8, bytes(4)) + rest, "MalformedHeaderError", 0)
    add(
        "record_size_over_hard_limit",
        "record size 16 MiB + 1",
        _header_with(h, 8, (HARD_MAX_RECORD_SIZE + 1).to_bytes(4, "big")) + rest,
        "MalformedHeaderError",
        0,
    )
    add(
        "record_size_over_reader_limit",
        "a correctly committed header announcing 2 MiB records to a reader whose limit is 1 MiB",
        forge(BASE, record_size=2 * 1024 * 1024).wire(),
        "RecordTooLargeError",
        0,
        max_record_size=1024 * 1024,
    )
    add(
        "altered_record_size",
        "record size changed from 32 to 48 (the commitment covers it)",
        _header_with(h, 8, (48).to_bytes(4, "big")) + rest,
        "KeyCommitmentError",
        0,
    )
    add("altered_salt", "one bit of the salt flipped", flip(base.wire(), 40), "KeyCommitmentError", 0)
    add(
        "altered_commitment",
        "one bit of the commitment flipped",
        flip(base.wire(), HEADER_SIZE - 1),
        "KeyCommitmentError",
        0,
    )
    add(
        "wrong_key",
        "the stream was written under another key (its key ID is unknown here)",
        forge(BASE, key=OTHER_KEY).wire(),
        "UnknownKeyError",
        0,
    )
    add(
        "wrong_context",
        "the stream was written with another context",
        forge(BASE, context=b"another context").wire(),
        "KeyCommitmentError",
        0,
    )
    add(
        "wrong_suite",
        "the stream was written with a 256-bit key, the reader has a 128-bit key (unknown key ID)",
        forge(BASE, key=KEY_256).wire(),
        "UnknownKeyError",
        0,
    )
    add(
        "channel_stream_to_one_way_reader",
        "an INITIATOR header fed to a one-way Opener",
        forge(BASE, role=Role.INITIATOR).wire(),
        "RoleMismatchError",
        0,
    )

    # -- channel: a RESPONDER reads its INITIATOR's bytes ----------------------------------------
    chan = forge_channel(BASE, SALT_R1)
    cr = chan.records

    def add_channel(name: str, comment: str, data: bytes, expect: str, released: int, **kw: object) -> None:
        kw.setdefault("receiver_salt", SALT_R1)
        cases.append(Case(name, comment, data, expect, chan.plain(released), true, mode="channel", **kw))  # type: ignore[arg-type]

    hello = initiator_hello()
    answer, keys = responder_answer(hello, SALT_R1)
    add_channel(
        "channel_replayed_session",
        "an initiator's session recorded against one responder, replayed to a new responder: its "
        "Finished does not confirm the keys of the new responder's fresh handshake",
        chan.wire(),
        "HandshakeError",
        0,
        receiver_salt=SALT_R2,
    )
    add_channel(
        "channel_reflected",
        "the responder's own header sent back to it",
        answer,
        "RoleMismatchError",
        0,
    )
    add_channel(
        "channel_one_way_stream", "a one-way stream fed to a channel", base.wire(), "RoleMismatchError", 0
    )
    hello_size = len(hello)
    add_channel(
        "channel_flipped_finished",
        "one bit of the initiator's Finished flipped",
        flip(chan.wire(), hello_size + 5),
        "HandshakeError",
        0,
    )
    add_channel(
        "channel_no_finished",
        "the initiator's header, then the end of input",
        hello,
        "TruncatedStreamError",
        0,
    )
    add_channel(
        "channel_downgrade",
        "an X25519-only initiator to a responder that requires ML-KEM-768 + X25519",
        chan.wire(),
        "DowngradeError",
        0,
        receiver_key_exchange=KeyExchange.MLKEM768_X25519,
    )
    add_channel(
        "channel_missing_share",
        "a correctly committed X25519 header without its X25519 share",
        initiator_hello(fields=[]) + bytes(32),
        "HandshakeError",
        0,
    )
    add_channel(
        "channel_short_share",
        "a correctly committed X25519 header whose X25519 share has 31 bytes",
        initiator_hello(fields=[(FieldType.X25519_SHARE, bytes(range(31)))]) + bytes(32),
        "HandshakeError",
        0,
    )
    x25519_share = InitiatorShares(KeyExchange.X25519, FixedEphemeral(INITIATOR_X25519)).fields()
    encapsulation_key = (
        mlkem.MLKEM768PrivateKey.from_seed_bytes(bytes(range(64))).public_key().public_bytes_raw()
    )
    add_channel(
        "channel_mlkem_share_in_x25519_header",
        "FORMAT.md 5.2 K8 step 1: an X25519 (exchange 1) header that also carries an ML-KEM-768 share",
        initiator_hello(fields=[*x25519_share, (FieldType.MLKEM768_SHARE, encapsulation_key)]) + bytes(32),
        "HandshakeError",
        0,
    )
    add_channel(
        "channel_mlkem_key_failing_the_modulus_check",
        "K8 step 3: a hybrid offer whose ML-KEM-768 encapsulation key has 1,184 bytes but a first "
        "coefficient of 4,095 (>= q = 3,329): FIPS 203's modulus check fails, nothing is sent",
        initiator_hello(
            key_exchange=KeyExchange.MLKEM768_X25519,
            fields=[*x25519_share, (FieldType.MLKEM768_SHARE, b"\xff\xff" + encapsulation_key[2:])],
        )
        + bytes(32),
        "HandshakeError",
        0,
    )
    add_channel(
        "channel_mlkem_key_too_short",
        "K8 step 3: a hybrid offer whose ML-KEM-768 encapsulation key has 1,183 bytes",
        initiator_hello(
            key_exchange=KeyExchange.MLKEM768_X25519,
            fields=[*x25519_share, (FieldType.MLKEM768_SHARE, encapsulation_key[:-1])],
        )
        + bytes(32),
        "HandshakeError",
        0,
    )
    add_channel(
        "channel_unexpected_identity",
        "the initiator names itself mallory; the responder expects bob (peer_id)",
        initiator_hello(
            fields=[
                *InitiatorShares(KeyExchange.X25519, FixedEphemeral(INITIATOR_X25519)).fields(),
                (FieldType.IDENTITY, b"mallory"),
            ]
        )
        + bytes(32),
        "PeerIdentityError",
        0,
        receiver_peer_id=b"bob",
    )
    add_channel(
        "channel_flipped_tag",
        "one bit of record 3's tag flipped",
        flip(chan.wire(), len(chan.header) + sum(map(len, cr[:4])) - 1),
        "AuthenticationError",
        3,
    )
    add_channel(
        "channel_dropped_record", "record 1 removed", chan.wire([cr[0], *cr[2:]]), "AuthenticationError", 1
    )
    add_channel("channel_truncated", "no FINAL record", chan.wire(cr[:3]), "TruncatedStreamError", 3)
    add_channel(
        "channel_ends_after_key_update",
        "ends after the KEY_UPDATE record",
        chan.wire(cr[:2]),
        "TruncatedStreamError",
        2,
    )
    add_channel("channel_trailing_data", "a byte after FINAL", chan.wire() + b"\xff", "TrailingDataError", 4)
    stream_secret = verify_header(KEY, parse_header(hello, CHANNEL_FIELDS), CONTEXT)
    add_channel(
        "channel_one_way_keyed_records",
        "the initiator's header and Finished, then records sealed with that header's one-way stream secret",
        chan.header + b"".join(forge(BASE, role=Role.INITIATOR, secret=lambda _h, _s: stream_secret).records),
        "AuthenticationError",
        0,
    )
    add_channel(
        "channel_wrong_context",
        "the initiator used another context",
        forge_channel(BASE, SALT_R1, context=b"another context").wire(),
        "KeyCommitmentError",
        0,
    )
    return cases + channel_initiator_cases(true) + valid_stream_cases() + fixed_layout_cases()


# -- channel-initiator: an INITIATOR reads the RESPONDER's answer -------------------------------


def reading_initiator_hello(exchange: KeyExchange) -> bytes:
    """The header the reading INITIATOR sends first (fixed salt, X25519 key and ML-KEM seed)."""
    fixed = FixedEphemeral(INITIATOR_X25519, mlkem_seed=INITIATOR_MLKEM_SEED)
    return make_header(
        KEY,
        Role.INITIATOR,
        RECORD_SIZE,
        CONTEXT,
        SALT_READING_INITIATOR,
        key_exchange=exchange,
        fields=InitiatorShares(exchange, fixed).fields(),
    )[0]


def answer_header(exchange: int, fields: list[tuple[int, bytes]], key: bytes = KEY) -> bytes:
    """A RESPONDER header (salt SALT_R1), committed under ``key``, labelled ``exchange``,
    carrying ``fields`` as given, whatever the offer was."""
    return make_header(
        key, Role.RESPONDER, RECORD_SIZE, CONTEXT, SALT_R1, key_exchange=KeyExchange(exchange), fields=fields
    )[0]


def _with_byte(header: bytes, offset: int, value: int) -> bytes:
    return header[:offset] + bytes([value]) + header[offset + 1 :]


def channel_initiator_cases(true: bytes) -> list[Case]:
    """``channel_initiator_*``: what a responder may answer that an initiator must refuse
    (FORMAT.md 5.2: H1..H14 on R_header with the offered key only, then K1, K2, K3, K5..K9).
    The faults in the fixed part are bytes edited in a committed answer: each check runs before
    the commitment (H12), so the edit is what is refused."""
    x25519_offer = reading_initiator_hello(KeyExchange.X25519)
    hybrid_offer = reading_initiator_hello(KeyExchange.MLKEM768_X25519)
    x25519_share, shared = respond(
        parse_header(x25519_offer, CHANNEL_FIELDS), FixedEphemeral(RESPONDER_X25519)
    )
    answer = answer_header(KeyExchange.X25519, x25519_share)
    keys = channel_keys(KEY, shared, x25519_offer, answer, CONTEXT)
    records = forge(BASE, role=Role.RESPONDER, secret=lambda _h, _s: keys.responder_to_initiator)
    response = Forged(answer + keys.responder_finished, records.records, records.plaintexts)
    placeholder_finished = bytes(32)  # where no responder could compute one (a low-order share...)

    def with_finished(header: bytes, offer: bytes, secret: bytes = shared, key: bytes = KEY) -> bytes:
        """``header`` and the Finished its RESPONDER computes from its own view (the X25519
        secret of the fixed keys, ML-KEM's first for a hybrid answer): the rule the case names
        is its only fault, so an initiator that skipped that rule would complete the handshake
        (and then meet the end of input) instead of failing with the case's error."""
        return header + channel_keys(key, secret, offer, header, CONTEXT).responder_finished

    # a ciphertext of the right length that is no encapsulation to the offered key: the
    # encapsulation to another key made once for the valid vectors, with its shared secret
    stored = json.loads((HERE.parent / "mlkem768_encapsulation.json").read_text())
    other_ciphertext, other_secret = (
        bytes.fromhex(stored["ciphertext"]),
        bytes.fromhex(stored["shared_secret"]),
    )
    if INITIATOR_MLKEM_SEED.hex() == stored["initiator_seed"]:
        raise SystemExit("the reading initiator's ML-KEM seed must not be the stored encapsulation's")
    to_another_key = answer_header(
        KeyExchange.MLKEM768_X25519, [*x25519_share, (FieldType.MLKEM768_SHARE, other_ciphertext)]
    )
    # (``shared`` is the X25519 secret of both fixed X25519 keys, whatever the offer)
    responder_view = channel_keys(KEY, other_secret + shared, hybrid_offer, to_another_key, CONTEXT)
    cases: list[Case] = []

    def add(
        name: str,
        comment: str,
        data: bytes,
        expect: str,
        released: int = 0,
        *,
        offer: KeyExchange = KeyExchange.X25519,
        **kw: object,
    ) -> None:
        hybrid = offer is KeyExchange.MLKEM768_X25519
        case = Case(
            f"channel_initiator_{name}",
            comment,
            data,
            expect,
            response.plain(released),
            true,
            mode="channel-initiator",
            receiver_salt=SALT_READING_INITIATOR,
            receiver_key_exchange=offer,
            receiver_sends=hybrid_offer if hybrid else x25519_offer,
            receiver_mlkem768_seed=INITIATOR_MLKEM_SEED if hybrid else None,
            **kw,  # type: ignore[arg-type]
        )
        cases.append(case)

    # -- the answer's fixed part (H2, H4, H5, H9, H10, H11) --------------------------------------
    add(
        "answer_version_1",
        "H2: the answer's version byte (4) is 1, the unreleased version 1",
        _with_byte(response.wire(), 4, 1),
        "UnsupportedFormatError",
    )
    add(
        "answer_unknown_suite",
        "H4: the answer's suite byte (6) is 3, no suite",
        _with_byte(response.wire(), 6, 3),
        "MalformedHeaderError",
    )
    add(
        "answer_other_suite",
        "H11: the answer's suite byte (6) is 2 (AES-256-GCM) under the offered 128-bit key's ID; "
        "raised once the whole header arrived (5.2, key rings)",
        _with_byte(response.wire(), 6, 2),
        "KeyCommitmentError",
    )
    add(
        "answer_unknown_key_exchange",
        "H5: the answer's key exchange byte (7) is 3, no exchange",
        _with_byte(response.wire(), 7, 3),
        "MalformedHeaderError",
    )
    add(
        "answer_without_key_exchange",
        "H5: the answer's key exchange byte (7) is 0, which only a ONE_WAY header carries",
        _with_byte(response.wire(), 7, 0),
        "MalformedHeaderError",
    )
    add(
        "reflected",
        "H9: the initiator's own header (receiver_sends) sent back to it: role 1 where the "
        "responder's role 2 is required",
        x25519_offer,
        "RoleMismatchError",
    )
    add(
        "one_way_stream",
        "H9: a one-way stream (role 0) as the answer",
        forge(BASE).wire(),
        "RoleMismatchError",
    )
    under_other_key = with_finished(
        answer_header(KeyExchange.X25519, x25519_share, key=OTHER_KEY), x25519_offer, key=OTHER_KEY
    )
    add(
        "answer_under_another_key",
        "H10: a well-formed answer committed under another key (6465...73) than the offered one; "
        "raised once the whole header arrived, before K1",
        under_other_key,
        "UnknownKeyError",
    )
    add(
        "answer_under_another_key_of_its_ring",
        "H10: the same answer as answer_under_another_key to an initiator whose key ring holds "
        "that other key too (after the offered primary): it reads the answer with the offered "
        "key alone",
        under_other_key,
        "UnknownKeyError",
        receiver_key_ring=[KEY, OTHER_KEY],
    )

    # -- K1, K2: the key exchange answered -------------------------------------------------------
    add(
        "downgrade",
        "K1: a hybrid (2) offer answered with X25519 (1) and its one share",
        with_finished(answer_header(KeyExchange.X25519, x25519_share), hybrid_offer),
        "DowngradeError",
        offer=KeyExchange.MLKEM768_X25519,
    )
    add(
        "hybrid_answer_to_x25519_offer",
        "K2: an X25519 (1) offer answered with the hybrid (2), an X25519 share and a 1,088-byte "
        "ML-KEM-768 ciphertext: stronger, but not what was offered",
        with_finished(
            answer_header(
                KeyExchange.MLKEM768_X25519, [*x25519_share, (FieldType.MLKEM768_SHARE, other_ciphertext)]
            ),
            x25519_offer,
            other_secret + shared,
        ),
        "HandshakeError",
    )
    add(
        "hybrid_label_without_mlkem_to_x25519_offer",
        "K2: an X25519 (1) offer answered with a header labelled hybrid (2) that carries only an "
        "X25519 share",
        with_finished(answer_header(KeyExchange.MLKEM768_X25519, x25519_share), x25519_offer),
        "HandshakeError",
    )

    # -- K7, K8, K9 ------------------------------------------------------------------------------
    add(
        "unexpected_identity",
        "K7: the answer names the responder mallory; the initiator expects bob (peer_id)",
        with_finished(
            answer_header(KeyExchange.X25519, [*x25519_share, (FieldType.IDENTITY, b"mallory")]), x25519_offer
        ),
        "PeerIdentityError",
        receiver_peer_id=b"bob",
    )
    add(
        "hybrid_label_without_mlkem",
        "K8 step 1: a hybrid (2) offer answered with a header labelled hybrid that carries only "
        "an X25519 share",
        with_finished(answer_header(KeyExchange.MLKEM768_X25519, x25519_share), hybrid_offer),
        "HandshakeError",
        offer=KeyExchange.MLKEM768_X25519,
    )
    add(
        "low_order_x25519_share",
        "K8 step 2: the answer's X25519 share is 32 zero bytes (u = 0, a low-order point): the "
        "X25519 result would be all zero",
        answer_header(KeyExchange.X25519, [(FieldType.X25519_SHARE, bytes(32))]) + placeholder_finished,
        "HandshakeError",
    )
    add(
        "mlkem_ciphertext_too_short",
        "K8 step 4: a hybrid answer whose ML-KEM-768 ciphertext has 1,087 bytes",
        answer_header(
            KeyExchange.MLKEM768_X25519, [*x25519_share, (FieldType.MLKEM768_SHARE, other_ciphertext[:-1])]
        )
        + placeholder_finished,
        "HandshakeError",
        offer=KeyExchange.MLKEM768_X25519,
    )
    add(
        "mlkem_ciphertext_to_another_key",
        "K8 step 4 then K9: a hybrid answer whose 1,088-byte ciphertext encapsulates to another "
        "key (tests/vectors/mlkem768_encapsulation.json), with the Finished of the responder's "
        "view: decapsulation gives ML-KEM's implicit-rejection secret, the keys differ, "
        "key confirmation fails",
        to_another_key + responder_view.responder_finished,
        "HandshakeError",
        offer=KeyExchange.MLKEM768_X25519,
    )
    add(
        "flipped_finished",
        "K9: one bit of the responder's Finished flipped",
        flip(response.wire(), len(answer) + 5),
        "HandshakeError",
    )

    # -- cut, then the responder's records -------------------------------------------------------
    add("answer_cut", "the answer's header cut after 40 bytes", answer[:40], "TruncatedStreamError")
    add("no_finished", "the answer's whole header, then the end of input", answer, "TruncatedStreamError")
    add(
        "finished_cut",
        "the answer's header and 31 bytes of its Finished",
        answer + keys.responder_finished[:31],
        "TruncatedStreamError",
    )
    add(
        "truncated",
        "a valid answer, then the responder's records without the FINAL one",
        response.wire(response.records[:4]),
        "TruncatedStreamError",
        4,
    )
    add(
        "flipped_tag",
        "a valid answer, then the responder's records with one bit of record 3's tag flipped",
        flip(response.wire(), len(response.header) + sum(map(len, response.records[:4])) - 1),
        "AuthenticationError",
        3,
    )
    return cases


# -- cases cut from a writer's own stream ----------------------------------------------------------


def _valid_vectors() -> ModuleType:
    """tests/vectors/generate.py, the valid vectors' generator (loaded by path: this file has
    the same name)."""
    spec = importlib.util.spec_from_file_location("valid_vectors", HERE.parent / "generate.py")
    if spec is None or spec.loader is None:
        raise SystemExit("cannot load tests/vectors/generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def record_spans(wire: bytes) -> list[tuple[int, int]]:
    """(start, end) of each record of a valid one-way stream."""
    spans, pos = [], HEADER_SIZE
    while pos < len(wire):
        _, length = RECORD_HEADER.unpack_from(wire, pos)
        spans.append((pos, pos + RECORD_HEADER_SIZE + length))
        pos += RECORD_HEADER_SIZE + length
    return spans


def hand_sealed(
    key: bytes, salt: bytes, records: list[tuple[int, bytes]], role: Role = Role.ONE_WAY
) -> tuple[bytes, bytes]:
    """(stream, its plaintext): records (flags, plaintext) sealed by hand, in order, all under
    generation 0 (whatever the flags say), without a context, at record size 32."""
    exchange = KeyExchange.NONE if role is Role.ONE_WAY else KeyExchange.X25519
    header, secret = make_header(key, role, 32, b"", salt, key_exchange=exchange)
    keys = TrafficKeys(secret, Suite.for_key(key))
    records_wire = [seal_record(keys, seq, flags, data) for seq, (flags, data) in enumerate(records)]
    return header + b"".join(records_wire), b"".join(data for _, data in records)


def valid_stream_cases() -> list[Case]:
    """The ``valid_stream_*`` cases (once tests/vectors/invalid.json): faults in valid.json's
    ``aes128-multi-record-short-final`` stream (records of 32, 32, 32 and 4 bytes, no context),
    and ``hand_sealed_*``: records a writer never seals (flags), sealed by hand."""
    valid = _valid_vectors()
    multi = valid.VALID[2]
    if multi.name != "aes128-multi-record-short-final":
        raise SystemExit(f"valid.json's third vector is {multi.name}, not the multi-record one")
    wire, text, key = multi.seal(), multi.plaintext, multi.key
    first, second, _, final = record_spans(wire)
    swapped = wire[:HEADER_SIZE] + wire[second[0] : second[1]] + wire[first[0] : first[1]] + wire[second[1] :]
    too_long = bytearray(wire)
    RECORD_HEADER.pack_into(too_long, second[0], 0, multi.record_size + TAG_SIZE + 1)
    too_short = bytearray(wire)
    RECORD_HEADER.pack_into(too_short, second[0], 0, TAG_SIZE - 1)
    final_cleared = bytearray(wire)
    final_cleared[final[0]] ^= FLAG_FINAL
    cases: list[Case] = []

    def add(name: str, comment: str, data: bytes, expect: str, released: bytes, **kw: object) -> None:
        kw.setdefault("key", key)
        kw.setdefault("context", b"")
        cases.append(Case(f"valid_stream_{name}", comment, data, expect, released, text, **kw))  # type: ignore[arg-type]

    add("empty_input", "no bytes at all", b"", "TruncatedStreamError", b"")
    add("header_only", "a header and no records", wire[:HEADER_SIZE], "TruncatedStreamError", b"")
    add("cut_header", "input ends inside the header", wire[:40], "TruncatedStreamError", b"")
    add(
        "cut_at_record_boundary",
        "the FINAL record is missing",
        wire[: final[0]],
        "TruncatedStreamError",
        text[:96],
    )
    add(
        "cut_inside_record",
        "input ends inside the second record",
        wire[: second[0] + 10],
        "TruncatedStreamError",
        text[:32],
    )
    add(
        "flipped_ciphertext",
        "one bit of the second record's ciphertext flipped",
        flip(wire, second[0] + RECORD_HEADER_SIZE + 3),
        "AuthenticationError",
        text[:32],
    )
    add(
        "flipped_tag",
        "one bit of the first record's tag flipped",
        flip(wire, first[1] - 1),
        "AuthenticationError",
        b"",
    )
    add(
        "flipped_final_flag",
        "the FINAL flag cleared on the last record (the flags are authenticated)",
        bytes(final_cleared),
        "AuthenticationError",
        text[:96],
    )
    add("swapped_records", "the first two records exchanged", swapped, "AuthenticationError", b"")
    add(
        "dropped_record",
        "the second record removed",
        wire[: second[0]] + wire[second[1] :],
        "AuthenticationError",
        text[:32],
    )
    add(
        "trailing_byte",
        "one byte after the FINAL record: the FINAL record's plaintext is withheld",
        wire + b"\x00",
        "TrailingDataError",
        text[:96],
    )
    add(
        "length_over_record_size",
        "the second record's length field is one over record size + tag",
        bytes(too_long),
        "RecordTooLargeError",
        text[:32],
    )
    add(
        "length_below_tag",
        "the second record's length field is shorter than the tag",
        bytes(too_short),
        "MalformedRecordError",
        text[:32],
    )
    add("bad_magic", "the magic is not GCMS", b"GCMX" + wire[4:], "UnsupportedFormatError", b"")
    add(
        "bad_version",
        "format version 1 (never released, no longer read)",
        wire[:4] + bytes([1]) + wire[5:],
        "UnsupportedFormatError",
        b"",
    )
    add(
        "wrong_key",
        "opened with another key: its key ID is unknown",
        wire,
        "UnknownKeyError",
        b"",
        key=valid.OTHER_KEY,
    )
    add(
        "wrong_context",
        "sealed without a context, opened with one",
        wire,
        "KeyCommitmentError",
        b"",
        context=valid.CONTEXT,
    )
    add(
        "wrong_suite",
        "an AES-128-GCM stream opened with a 32-byte key (another key: its key ID is unknown)",
        wire,
        "UnknownKeyError",
        b"",
        key=valid.KEY256,
    )

    def add_hand_sealed(
        name: str, comment: str, sealed: tuple[bytes, bytes], expect: str, released: bytes
    ) -> None:
        data, plaintext = sealed
        cases.append(
            Case(f"hand_sealed_{name}", comment, data, expect, released, plaintext, key=key, context=b"")
        )

    add_hand_sealed(
        "channel_header_to_one_way_reader",
        "an INITIATOR header fed to a one-way Opener",
        hand_sealed(key, valid.SALT_A, [], Role.INITIATOR),
        "RoleMismatchError",
        b"",
    )
    add_hand_sealed(
        "unknown_flag",
        "a correctly sealed record with flag 0x04",
        hand_sealed(key, valid.SALT_A, [(0, b"ok"), (0x04, b"unknown flag"), (FLAG_FINAL, b"")]),
        "MalformedRecordError",
        b"ok",
    )
    add_hand_sealed(
        "final_and_key_update",
        "a correctly sealed record with both FINAL and KEY_UPDATE",
        hand_sealed(key, valid.SALT_A, [(0, b"ok"), (FLAG_FINAL | FLAG_KEY_UPDATE, b"both")]),
        "MalformedRecordError",
        b"ok",
    )
    add_hand_sealed(
        "record_after_final",
        "a correctly sealed record after a FINAL record",
        hand_sealed(key, valid.SALT_A, [(FLAG_FINAL, b"end"), (FLAG_FINAL, b"more")]),
        "TrailingDataError",
        b"",
    )
    add_hand_sealed(
        "old_key_after_key_update",
        "KEY_UPDATE flag set by hand but the next record still sealed under the old key",
        hand_sealed(key, valid.SALT_A, [(FLAG_KEY_UPDATE, b"update"), (FLAG_FINAL, b"old key")]),
        "AuthenticationError",
        b"update",
    )
    return cases


def fixed_layout_cases() -> list[Case]:
    """``fixed_layout_*``: faults in valid.json's ``aes128-fixed-layout`` file (FIXED_LAYOUT
    N = 3, records of 16 bytes, a 102-byte header, record i at 102 + 37 i, KEY_UPDATE on 2
    and 5, FINAL of 4 bytes at 6). Every reader refuses them with the sequential reader's
    error (FORMAT.md 4.3): a random-access reader at open, or at the read that touches an
    edited record."""
    valid = _valid_vectors()
    (vector,) = [v for v in valid.VALID if v.name == "aes128-fixed-layout"]
    wire, text, key = vector.seal(), vector.plaintext, vector.key
    header, step = 102, vector.record_size + RECORD_HEADER_SIZE + TAG_SIZE
    if len(wire) != header + 6 * step + RECORD_HEADER_SIZE + 4 + TAG_SIZE:
        raise SystemExit("aes128-fixed-layout is not 6 full records and a FINAL of 4 bytes")
    edited = bytearray(wire)
    edited[header + step] |= 0x04  # record 1's stored header: a reserved flag
    cases = [
        (
            "cut_at_record_boundary",
            "cut after record 2 (KEY_UPDATE): the size puts FINAL there, whose stored header is "
            "02 where 01 is required; the sequential reader's error, not the stored-header rule's",
            wire[: header + 3 * step],
            "TruncatedStreamError",
            text[:48],
        ),
        (
            "edited_stored_header",
            "record 1's stored flags byte given a reserved bit (ciphertext untouched)",
            bytes(edited),
            "AuthenticationError",
            text[:16],
        ),
        (
            "dropped_record",
            "record 3 removed: the size still fits the layout, but FINAL is no longer where it "
            "puts it (and the sequential reader opens record 4 as generation 1, seq 0)",
            wire[: header + 3 * step] + wire[header + 4 * step :],
            "AuthenticationError",
            text[:48],
        ),
        (
            "trailing_byte",
            "one byte after the FINAL record: the remainder is record_size + 1 .. + 20 only for a "
            "full FINAL; here the size puts FINAL one byte later",
            wire + b"\x00",
            "TrailingDataError",
            text[:96],  # FINAL withheld: the byte after it is already there (FORMAT.md 8.2)
        ),
    ]
    return [
        Case(f"fixed_layout_{name}", comment, data, expect, released, text, key=key, context=b"")
        for name, comment, data, expect, released in cases
    ]


def channel_reader(case: dict[str, object]) -> Opener:
    """The channel end a channel case describes (a RESPONDER for "channel", an INITIATOR for
    "channel-initiator"), its first flight taken; its answers to the input are dropped. An
    INITIATOR must send exactly ``receiver_sends``: the answer in ``input`` is bound to it."""
    initiator = case["mode"] == "channel-initiator"
    peer_id = case.get("receiver_peer_id")
    ring = case.get("receiver_key_ring")
    seed = case.get("receiver_mlkem768_seed")
    key = bytes.fromhex(str(case["key"]))
    channel = fixed_randomness_channel(
        KeyRing([bytes.fromhex(k) for k in ring]) if isinstance(ring, list) else key,
        role=Role.INITIATOR if initiator else Role.RESPONDER,
        context=bytes.fromhex(str(case["context"])),
        record_size=int(str(case["receiver_record_size"])),
        key_exchange=KeyExchange(int(str(case["receiver_key_exchange"]))),
        peer_id=bytes.fromhex(str(peer_id)) if peer_id is not None else None,
        salt=bytes.fromhex(str(case["receiver_salt"])),
        ephemeral=FixedEphemeral(
            x25519=bytes.fromhex(str(case["receiver_x25519"])),
            mlkem_seed=bytes.fromhex(str(seed)) if seed is not None else None,
        ),
    )
    sent = channel.initial_data()
    if sent != bytes.fromhex(str(case.get("receiver_sends", ""))):
        raise SystemExit(f"{case['name']}: the reading channel end sent other bytes than receiver_sends")
    return channel.opener  # (its hooks keep the channel alive)


def replay(case: dict[str, object], chunk_size: int = 0) -> tuple[bytes, GcmStreamError | None]:
    """Feed a case's input (all at once, or in ``chunk_size`` pieces), then EOF; return the
    plaintext released and the error raised (None if the stream ended cleanly)."""
    key = bytes.fromhex(str(case["key"]))
    context = bytes.fromhex(str(case["context"]))
    data = bytes.fromhex(str(case["input"]))
    if case["mode"] in ("channel", "channel-initiator"):
        opener = channel_reader(case)
    else:
        max_record_size = case.get("max_record_size")
        if max_record_size is None:
            opener = Opener(key, context=context)
        else:
            opener = Opener(key, context=context, max_record_size=int(str(max_record_size)))
    released = bytearray()

    def drain() -> None:
        while (got := opener.read()) is not None and got:
            released.extend(got)

    try:
        step = chunk_size or max(len(data), 1)
        for start in range(0, len(data), step):
            opener.receive_data(data[start : start + step])
            drain()
        opener.receive_eof()
        drain()
        if opener.read() != b"":
            raise AssertionError("opener neither ended nor failed after EOF")
    except GcmStreamError as exc:
        return bytes(released), exc
    return bytes(released), None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing")
    args = parser.parse_args()
    cases = build_cases()
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate case names")
    problems = []
    rendered = {}
    for case in cases:
        doc = case.to_json()
        released, error = replay(doc)
        got = type(error).__name__ if error is not None else "no error"
        if got != case.expect or released != case.released:
            problems.append(
                f"{case.name}: expected {case.expect} after {len(case.released)} bytes, "
                f"gcmstream gave {got} after {len(released)} bytes"
            )
        rendered[f"{case.name}.json"] = json.dumps(doc, indent=1) + "\n"
    if problems:
        print("gcmstream disagrees with the construction:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    existing = {p.name for p in HERE.glob("*.json")}
    if args.check:
        stale = sorted(existing ^ set(rendered))
        stale += sorted(n for n in rendered if n in existing and (HERE / n).read_text() != rendered[n])
        if stale:
            print("out of date:", *stale, file=sys.stderr)
            return 1
        print(f"{len(rendered)} vectors up to date")
        return 0
    for name in existing - set(rendered):
        (HERE / name).unlink()
    for name, text in rendered.items():
        (HERE / name).write_text(text)
    print(f"wrote {len(rendered)} vectors to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
