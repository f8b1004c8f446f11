"""Wire format: header encode/parse, key commitment, key limits, key schedule, no key in reprs."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Literal, assert_type

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import gcmstream.format
from gcmstream import (
    AuthenticationError,
    Channel,
    GcmStreamError,
    KeyCommitmentError,
    KeyRing,
    MalformedHeaderError,
    Opener,
    RecordTooLargeError,
    Role,
    Sealer,
    StreamBrokenError,
    TruncatedStreamError,
    UnknownFieldError,
    UnknownKeyError,
    UnsupportedBufferError,
    UnsupportedFormatError,
)
from gcmstream.format import (
    COMMITMENT_SIZE,
    HARD_MAX_RECORD_SIZE,
    HEADER_FIXED_SIZE,
    HEADER_SIZE,
    MAGIC,
    MAX_CONTEXT_SIZE,
    MAX_FIELDS_SIZE,
    MAX_HARD_BYTES,
    MAX_HARD_RECORDS,
    SALT_SIZE,
    VERSION,
    FieldType,
    KeyExchange,
    KeyLimits,
    StreamHeader,
    Suite,
    TrafficKeys,
    check_context,
    check_header_start,
    check_record_size,
    generate_key,
    key_id,
    make_header,
    parse_header,
    sealed_with,
    verify_header,
)

KEY128 = bytes(range(0x40, 0x50))
KEY256 = bytes(range(0x60, 0x80))
SALT = bytes(range(0xA0, 0xA0 + SALT_SIZE))

# Byte offsets of the header fields (docs/FORMAT.md 4.1): magic, version, role, suite, key
# exchange, record size, key ID, salt, fields length; then fields (none here) and commitment.
OFF_VERSION, OFF_ROLE, OFF_SUITE, OFF_EXCHANGE, OFF_SIZE, OFF_KEY_ID, OFF_SALT = 4, 5, 6, 7, 8, 12, 28
OFF_FIELDS_LENGTH = OFF_SALT + SALT_SIZE
OFF_COMMITMENT = OFF_FIELDS_LENGTH + 2


def header(
    key: bytes = KEY128, role: Role = Role.ONE_WAY, record_size: int = 1000, context: bytes = b""
) -> bytes:
    exchange = KeyExchange.NONE if role is Role.ONE_WAY else KeyExchange.X25519
    raw, _ = make_header(key, role, record_size, context, SALT, key_exchange=exchange)
    return raw


def altered(raw: bytes, offset: int, value: bytes) -> bytes:
    out = bytearray(raw)
    out[offset : offset + len(value)] = value
    return bytes(out)


def open_header(raw: bytes, key: bytes = KEY128, context: bytes = b"") -> GcmStreamError:
    """Feed a header (and nothing else) to an Opener and return the error it raises on read."""
    opener = Opener(key, context=context)
    opener.receive_data(raw)
    with pytest.raises(GcmStreamError) as info:
        opener.read()
    return info.value


# -- encode / parse ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suite"), [(KEY128, Suite.AES_128_GCM), (KEY256, Suite.AES_256_GCM)], ids=["aes128", "aes256"]
)
@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
def test_header_round_trip(key: bytes, suite: Suite, role: Role) -> None:
    exchange = KeyExchange.NONE if role is Role.ONE_WAY else KeyExchange.X25519
    raw, secret = make_header(key, role, 4096, b"ctx", SALT, key_exchange=exchange)
    assert len(raw) == HEADER_SIZE == 94
    assert raw[:4] == MAGIC
    assert raw[OFF_VERSION] == VERSION == 2
    assert raw[OFF_SUITE] == suite
    assert raw[OFF_ROLE] == role
    assert raw[OFF_EXCHANGE] == exchange
    assert struct.unpack(">I", raw[OFF_SIZE:OFF_KEY_ID]) == (4096,)
    assert raw[OFF_KEY_ID:OFF_SALT] == key_id(key)
    assert raw[OFF_SALT:OFF_FIELDS_LENGTH] == SALT
    assert raw[OFF_FIELDS_LENGTH:OFF_COMMITMENT] == bytes(2)
    parsed = parse_header(raw)
    assert parsed == StreamHeader(
        role=role,
        suite=suite,
        key_exchange=exchange,
        record_size=4096,
        key_id=key_id(key),
        salt=SALT,
        field_spans=(),
        commitment=raw[OFF_COMMITMENT:],
        raw=raw,
    )
    assert verify_header(key, parsed, b"ctx") == secret
    assert len(secret) == 32


def test_header_is_deterministic_for_a_fixed_salt_and_random_otherwise() -> None:
    assert make_header(KEY128, Role.ONE_WAY, 10, b"", SALT) == make_header(
        KEY128, Role.ONE_WAY, 10, b"", SALT
    )
    a, secret_a = make_header(KEY128, Role.ONE_WAY, 10, b"")
    b, secret_b = make_header(KEY128, Role.ONE_WAY, 10, b"")
    assert a[OFF_SALT:OFF_FIELDS_LENGTH] != b[OFF_SALT:OFF_FIELDS_LENGTH]
    assert secret_a != secret_b


def test_parse_accepts_any_bytes_like() -> None:
    raw = header()
    assert parse_header(bytearray(raw)) == parse_header(memoryview(raw)) == parse_header(raw)


@pytest.mark.parametrize("record_size", [1, HARD_MAX_RECORD_SIZE])
def test_record_size_bounds_are_accepted(record_size: int) -> None:
    assert parse_header(header(record_size=record_size)).record_size == record_size


@pytest.mark.parametrize("record_size", [0, -1, HARD_MAX_RECORD_SIZE + 1])
def test_make_header_refuses_bad_record_size(record_size: int) -> None:
    with pytest.raises(ValueError, match="record_size"):
        make_header(KEY128, Role.ONE_WAY, record_size, b"", SALT)


def test_verify_header_refuses_a_bad_context_before_the_commitment() -> None:
    """A context no writer can have used is the caller's error (TypeError, ValueError), not
    the stream's (H12, "wrong key or context")."""
    parsed = parse_header(make_header(KEY128, Role.ONE_WAY, 10, b"", SALT)[0])
    with pytest.raises(TypeError, match="context must be bytes-like, not str"):
        verify_header(KEY128, parsed, "app")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"context of {MAX_CONTEXT_SIZE + 1} bytes exceeds"):
        verify_header(KEY128, parsed, bytes(MAX_CONTEXT_SIZE + 1))


def test_make_header_refuses_a_bad_context() -> None:
    with pytest.raises(TypeError, match="context must be bytes-like, not str"):
        make_header(KEY128, Role.ONE_WAY, 10, "app", SALT)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"context of {MAX_CONTEXT_SIZE + 1} bytes exceeds"):
        make_header(KEY128, Role.ONE_WAY, 10, bytes(MAX_CONTEXT_SIZE + 1), SALT)


@pytest.mark.parametrize("salt", [b"", bytes(SALT_SIZE - 1), bytes(SALT_SIZE + 1)])
def test_make_header_refuses_bad_salt(salt: bytes) -> None:
    with pytest.raises(ValueError, match="salt"):
        make_header(KEY128, Role.ONE_WAY, 10, b"", salt)


@pytest.mark.parametrize("key", [b"", bytes(15), bytes(24), bytes(33)])
def test_bad_key_sizes_are_refused(key: bytes) -> None:
    with pytest.raises(ValueError, match="16 or 32"):
        make_header(key, Role.ONE_WAY, 10, b"", SALT)
    with pytest.raises(ValueError, match="16 or 32"):
        Sealer(key)
    with pytest.raises(ValueError, match="16 or 32"):
        Opener(key)


def test_key_must_be_bytes_like() -> None:
    with pytest.raises(TypeError):
        Suite.for_key("0" * 16)  # type: ignore[arg-type]


# -- unsupported headers: the message says what was found and what was expected -------------

UNSUPPORTED = [
    pytest.param(OFF_VERSION - 4, b"XCMS", ['does not start with the 4 bytes "GCMS"'], id="magic"),
    pytest.param(OFF_VERSION, bytes([1]), ["version 1", "version 2", "never released"], id="version-1"),
    pytest.param(OFF_VERSION, bytes([3]), ["version 3", "version 2"], id="version"),
    pytest.param(OFF_VERSION, bytes([0]), ["version 0", "version 2"], id="version-0"),
    pytest.param(OFF_SUITE, bytes([3]), ["suite 3", "1 or 2"], id="suite"),
    pytest.param(OFF_SUITE, bytes([0]), ["suite 0", "1 or 2"], id="suite-0"),
    pytest.param(OFF_ROLE, bytes([3]), ["role 3", "0, 1 or 2"], id="role"),
    pytest.param(OFF_ROLE, bytes([0xFF]), ["role 255", "0, 1 or 2"], id="role-255"),
    pytest.param(OFF_EXCHANGE, bytes([3]), ["key exchange 3", "0, 1 or 2"], id="exchange"),
    pytest.param(OFF_EXCHANGE, bytes([1]), ["key exchange 1", "ONE_WAY"], id="exchange-on-one-way"),
    pytest.param(
        OFF_FIELDS_LENGTH,
        struct.pack(">H", MAX_FIELDS_SIZE + 1),
        [f"{MAX_FIELDS_SIZE + 1} bytes", f"{MAX_FIELDS_SIZE}"],
        id="fields-too-long",
    ),
    pytest.param(OFF_SIZE, struct.pack(">I", 0), ["size 0", f"1..{HARD_MAX_RECORD_SIZE}"], id="size-0"),
    pytest.param(
        OFF_SIZE,
        struct.pack(">I", HARD_MAX_RECORD_SIZE + 1),
        [f"size {HARD_MAX_RECORD_SIZE + 1}", f"1..{HARD_MAX_RECORD_SIZE}"],
        id="size-too-big",
    ),
]


@pytest.mark.parametrize(("offset", "value", "words"), UNSUPPORTED)
def test_unsupported_header_fields(offset: int, value: bytes, words: list[str]) -> None:
    raw = altered(header(), offset, value)
    with pytest.raises(UnsupportedFormatError) as info:
        parse_header(raw)
    for word in words:
        assert word in str(info.value)
    assert isinstance(info.value, ValueError)
    # The same through an Opener: the header error comes before any commitment check.
    error = open_header(raw)
    assert isinstance(error, UnsupportedFormatError)
    for word in words:
        assert word in str(error)


@pytest.mark.parametrize("length", [HEADER_FIXED_SIZE, HEADER_SIZE - 1, HEADER_SIZE + 1])
def test_header_of_wrong_length(length: int) -> None:
    with pytest.raises(UnsupportedFormatError, match=f"{HEADER_SIZE} bytes, got {length}"):
        parse_header((header() * 2)[:length])
    with pytest.raises(UnsupportedFormatError, match=f"{HEADER_FIXED_SIZE} fixed bytes, got 0"):
        parse_header(b"")


def test_non_gcmstream_data_is_unsupported() -> None:
    error = open_header(b"GET / HTTP/1.1\r\nHost: example.com\r\n" + bytes(HEADER_SIZE))
    assert isinstance(error, UnsupportedFormatError)
    assert "magic" in str(error)


# -- key commitment --------------------------------------------------------------------------


def test_wrong_key_fails_commitment() -> None:
    parsed = parse_header(header())
    with pytest.raises(KeyCommitmentError):
        verify_header(bytes(16), parsed, b"")
    assert isinstance(open_header(header(), key=bytes(16)), UnknownKeyError)


def test_wrong_context_fails_commitment() -> None:
    raw = header(context=b"alice->bob")
    assert verify_header(KEY128, parse_header(raw), b"alice->bob")
    with pytest.raises(KeyCommitmentError):
        verify_header(KEY128, parse_header(raw), b"bob->alice")
    with pytest.raises(KeyCommitmentError):
        verify_header(KEY128, parse_header(raw), b"")
    assert isinstance(open_header(raw, context=b"alice->bob!"), KeyCommitmentError)


def test_wrong_key_size_is_a_suite_mismatch() -> None:
    raw = header(key=KEY256)
    with pytest.raises(KeyCommitmentError, match=r"AES_256_GCM.*AES_128_GCM"):
        verify_header(KEY128, parse_header(raw), b"")
    error = open_header(raw, key=KEY128)
    assert isinstance(error, UnknownKeyError)
    assert key_id(KEY256).hex() in str(error)
    # Through a reader, the other key's ID is unknown before any suite question arises.
    assert isinstance(open_header(header(key=KEY128), key=KEY128 * 2), UnknownKeyError)


@pytest.mark.parametrize(
    ("offset", "value"),
    [
        pytest.param(OFF_ROLE, bytes([Role.RESPONDER]), id="role"),  # changed below to a valid role
        pytest.param(OFF_EXCHANGE, bytes([KeyExchange.MLKEM768_X25519]), id="key-exchange"),
        pytest.param(OFF_SIZE, struct.pack(">I", 999), id="record-size"),
        pytest.param(OFF_SALT, b"\x00", id="salt-first"),
        pytest.param(OFF_FIELDS_LENGTH - 1, b"\x00", id="salt-last"),
        pytest.param(OFF_KEY_ID, b"\x00", id="key-id"),
        pytest.param(OFF_COMMITMENT, b"\x00", id="commitment-first"),
        pytest.param(HEADER_SIZE - 1, b"\x00", id="commitment-last"),
    ],
)
def test_altered_header_fails_commitment(offset: int, value: bytes) -> None:
    raw = header(role=Role.INITIATOR) if offset in (OFF_ROLE, OFF_EXCHANGE) else header()
    bad = altered(raw, offset, value)
    if bad == raw:
        bad = altered(raw, offset, bytes([raw[offset] ^ 1]))
    assert bad != raw
    with pytest.raises(KeyCommitmentError):
        verify_header(KEY128, parse_header(bad), b"")


@pytest.mark.parametrize("offset", range(OFF_SIZE, HEADER_SIZE))
def test_every_bit_of_size_salt_and_commitment_is_committed(offset: int) -> None:
    raw = header(record_size=0x10000)
    for bit in range(8):
        bad = altered(raw, offset, bytes([raw[offset] ^ (1 << bit)]))
        try:
            parsed = parse_header(bad)
        except UnsupportedFormatError:
            continue  # a record size over the hard cap
        with pytest.raises(KeyCommitmentError):
            verify_header(KEY128, parsed, b"")


# -- key limits, key generation, key schedule ---------------------------------------------------


def test_key_limits_defaults_are_consistent() -> None:
    limits = KeyLimits()
    assert limits.update_after_records <= limits.hard_records
    assert limits.update_after_bytes <= limits.hard_bytes
    assert limits.update_after_records == 1 << 24


@pytest.mark.parametrize(
    "kwargs",
    [
        {"update_after_records": 0},
        {"update_after_bytes": 0},
        {"update_after_records": -1},
        {"update_after_records": 10, "hard_records": 9},
        {"update_after_bytes": 10, "hard_bytes": 9},
        {"hard_records": MAX_HARD_RECORDS + 1},
        {"hard_bytes": MAX_HARD_BYTES + 1},
        {"hard_records": (1 << 64) + 1},
    ],
)
def test_key_limits_validation(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"limit|hard_records"):
        KeyLimits(**kwargs)


def test_key_limits_edges_are_accepted() -> None:
    KeyLimits(update_after_records=1, update_after_bytes=1, hard_records=1, hard_bytes=1)
    KeyLimits(hard_records=MAX_HARD_RECORDS, hard_bytes=MAX_HARD_BYTES)


def test_key_limits_are_frozen() -> None:
    limits = KeyLimits()
    with pytest.raises(AttributeError):
        limits.hard_records = 1  # type: ignore[misc]


@pytest.mark.parametrize(("bits", "size"), [(128, 16), (256, 32)])
def test_generate_key(bits: int, size: int) -> None:
    keys = {generate_key(bits) for _ in range(8)}
    assert len(keys) == 8
    assert all(isinstance(key, bytes) and len(key) == size for key in keys)


def test_generate_key_default_is_aes128() -> None:
    assert len(generate_key()) == 16


@pytest.mark.parametrize("bits", [0, 64, 192, 512])
def test_generate_key_refuses_other_sizes(bits: int) -> None:
    with pytest.raises(ValueError, match="128 or 256"):
        generate_key(bits)


@pytest.mark.parametrize("suite", list(Suite), ids=lambda s: s.name)
def test_traffic_keys_nonce_is_iv_xor_seq(suite: Suite) -> None:
    keys = TrafficKeys(bytes(range(32)), suite)
    iv = keys.nonce(0)
    assert len(iv) == 12
    assert int.from_bytes(iv, "big") == keys.iv
    for seq in (1, 2, 255, 256, 1 << 32, (1 << 64) - 1):
        nonce = keys.nonce(seq)
        assert len(nonce) == 12
        assert nonce == bytes(a ^ b for a, b in zip(iv, seq.to_bytes(12, "big"), strict=True))
    assert len({keys.nonce(seq) for seq in range(1000)}) == 1000


@pytest.mark.parametrize("suite", list(Suite), ids=lambda s: s.name)
def test_traffic_keys_nonce_into_is_the_nonce(suite: Suite) -> None:
    """The per-record path (a reused buffer) agrees with the definition, across the IV's low word."""
    keys = TrafficKeys(bytes(range(32)), suite)
    for seq in (0, 1, 255, 256, (1 << 32) - 1, 1 << 32, (1 << 64) - 1):
        assert bytes(keys.nonce_into(seq)) == keys.nonce(seq), seq


@pytest.mark.parametrize("suite", list(Suite), ids=lambda s: s.name)
def test_key_update_changes_key_and_iv(suite: Suite) -> None:
    keys = TrafficKeys(bytes(range(32)), suite)
    nxt = keys.next()
    assert (keys.generation, nxt.generation) == (0, 1)
    assert nxt.suite is suite
    assert nxt.secret != keys.secret
    assert nxt.iv != keys.iv
    # Same nonce, same data: a different key gives a different ciphertext and cannot open the old.
    nonce, data = bytes(12), b"attack at dawn"
    old, new = keys.aead.encrypt(nonce, data, None), nxt.aead.encrypt(nonce, data, None)
    assert old != new
    # The derivation is deterministic: both sides reach the same generation-2 keys.
    again = TrafficKeys(bytes(range(32)), suite).next().next()
    assert again.secret == nxt.next().secret
    assert again.aead.encrypt(nonce, data, None) == nxt.next().aead.encrypt(nonce, data, None)
    # And the AEAD key has the suite's size.
    key_size = suite.key_size
    assert key_size in (16, 32)
    assert isinstance(keys.aead, AESGCM)


# -- no key material in reprs or messages ------------------------------------------------------


def _forbidden(secret: bytes) -> list[str]:
    return [
        secret.hex(),
        secret.hex().upper(),
        repr(secret),
        repr(bytearray(secret)),
        secret.decode("latin-1"),
    ]


@pytest.mark.parametrize("key", [KEY128, KEY256], ids=["aes128", "aes256"])
def test_reprs_and_messages_never_show_keys(key: bytes) -> None:
    context = b"ctx"
    sealer = Sealer(key, context=context, record_size=16)
    wire = bytearray(sealer.seal(b"x" * 40)) + sealer.close()
    opener = Opener(key, context=context)
    initiator = Channel(key, role=Role.INITIATOR, context=context)
    responder = Channel(key, role=Role.RESPONDER, context=context)
    initiator.opener.receive_data(responder.initial_data())
    responder.opener.receive_data(initiator.initial_data())
    parsed = parse_header(sealer.header)
    secret = verify_header(key, parsed, context)
    keys = TrafficKeys(secret, parsed.suite)
    objects: list[object] = [sealer, opener, initiator, responder, keys, keys.next(), initiator.sealer]
    objects += [initiator.opener, KeyLimits(), parsed.suite, parsed.role]

    errors: list[BaseException] = []
    wrong = Opener(bytes(len(key)), context=context)
    wrong.receive_data(wire)
    with pytest.raises(KeyCommitmentError) as commitment:
        wrong.read()
    errors.append(commitment.value)
    with pytest.raises(StreamBrokenError) as broken:
        wrong.read()
    errors.append(broken.value)
    wire[HEADER_SIZE + 8] ^= 1
    opener.receive_data(wire)
    with pytest.raises(AuthenticationError) as auth:
        opener.read()
    errors.append(auth.value)
    errors.append(auth.value.__cause__ or Exception())
    objects += errors

    texts = [text for obj in objects for text in (repr(obj), str(obj))]
    for material in (key, secret, keys.secret, keys.next().secret):
        for needle in _forbidden(material):
            for text in texts:
                assert needle not in text


# -- edges found by mutation testing (make mutate) ----------------------------------------------


def test_a_context_of_exactly_the_maximum_size_is_accepted() -> None:
    context = bytes(range(256)) * (MAX_CONTEXT_SIZE // 256)
    assert check_context(context) == context
    sealer = Sealer(KEY128, context=context)
    opener = Opener(KEY128, context=context)
    opener.receive_data(bytes(sealer.seal(b"at the bound", final=True)))
    assert opener.read() == b"at the bound"
    with pytest.raises(ValueError, match=f"{MAX_CONTEXT_SIZE + 1} bytes exceeds {MAX_CONTEXT_SIZE}"):
        check_context(context + b"x")


@pytest.mark.parametrize(
    ("start", "words"),
    [
        pytest.param(b"GCMX", 'does not start with the 4 bytes "GCMS"', id="fourth-magic-byte"),
        pytest.param(MAGIC + bytes([VERSION + 1]), f"version {VERSION + 1}", id="version"),
    ],
)
def test_the_first_five_bytes_are_judged_before_the_header_is_whole(start: bytes, words: str) -> None:
    """A stream that ends after a wrong magic or version is another format, not a cut header."""
    with pytest.raises(UnsupportedFormatError, match=words):
        check_header_start(start)
    opener = Opener(KEY128)
    opener.receive_data(start)
    opener.receive_eof()
    with pytest.raises(UnsupportedFormatError, match=words):
        opener.read()


def test_a_right_start_then_the_end_of_input_is_a_cut_header() -> None:
    check_header_start(MAGIC + bytes([VERSION]))
    check_header_start(MAGIC[:3])
    opener = Opener(KEY128)
    opener.receive_data(MAGIC + bytes([VERSION]))
    opener.receive_eof()
    with pytest.raises(TruncatedStreamError, match=f"5 of {HEADER_FIXED_SIZE} bytes"):
        opener.read()


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        pytest.param(
            lambda: Suite.for_key("0" * 16),  # type: ignore[arg-type]
            TypeError,
            "bytes-like, not str: a key file's line is read by gcmstream.keyfile.parse_key(line)",
            id="key-type",
        ),
        pytest.param(
            lambda: check_context("app"),  # type: ignore[arg-type]
            TypeError,
            "bytes-like, not str",
            id="context-type",
        ),
        pytest.param(
            lambda: check_context(bytes(MAX_CONTEXT_SIZE + 7)),
            ValueError,
            f"{MAX_CONTEXT_SIZE + 7} bytes",
            id="context-size",
        ),
        pytest.param(
            lambda: check_record_size(0),
            ValueError,
            f"record_size must be an int from 1 to {HARD_MAX_RECORD_SIZE}, got 0",
            id="record-size",
        ),
        pytest.param(
            lambda: check_header_start(b"PK\x03"), UnsupportedFormatError, 'bytes "GCMS"', id="magic"
        ),
        pytest.param(
            lambda: check_header_start(MAGIC + b"\x07"), UnsupportedFormatError, "version 7", id="version"
        ),
    ],
)
def test_messages_name_what_was_found(call: Callable[[], object], error: type[Exception], words: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


# -- key IDs, key rings, typed fields ----------------------------------------------------------


def test_key_id_is_hkdf_of_the_key_and_differs_per_key() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    expected = HKDF(hashes.SHA256(), 16, None, b"gcmstream/2 key id").derive(KEY128)
    assert key_id(KEY128) == expected
    assert key_id(KEY128) != key_id(KEY256)
    assert len({key_id(generate_key()) for _ in range(20)}) == 20


def test_a_key_ring_opens_streams_under_any_of_its_keys() -> None:
    old, new = generate_key(), generate_key(256)
    ring = KeyRing([new, old])
    assert ring.primary == new and len(ring) == 2 and ring.key_ids == (key_id(new), key_id(old))
    for key in (old, new):
        opener = Opener(ring)
        opener.receive_data(bytes(Sealer(key).seal(b"rotated", final=True)))
        assert opener.read() == b"rotated"
    # A ring seals under its primary key.
    assert Sealer(ring).header[OFF_KEY_ID:OFF_SALT] == key_id(new)
    # A key that is not in the ring is an unknown key ID, named in the message.
    stranger = generate_key()
    error = open_header(Sealer(stranger).header, key=old)
    assert isinstance(error, UnknownKeyError)
    assert key_id(stranger).hex() in str(error)
    assert new.hex() not in repr(ring) and old.hex() not in repr(ring)
    with pytest.raises(ValueError, match="at least one key"):
        KeyRing([])


def test_a_critical_unknown_field_is_refused_and_a_non_critical_one_ignored() -> None:
    critical, _ = make_header(KEY128, Role.ONE_WAY, 100, b"", SALT, fields=[(0x7FFF, b"future")])
    error = open_header(critical)
    assert type(error) is UnknownFieldError
    assert "0x7fff" in str(error)
    optional, secret = make_header(KEY128, Role.ONE_WAY, 100, b"", SALT, fields=[(0x8001, b"hint")])
    assert parse_header(optional).fields == ((0x8001, b"hint"),)
    assert verify_header(KEY128, parse_header(optional), b"") == secret
    # The field is committed: changing one byte of it fails the commitment.
    bad = altered(optional, HEADER_FIXED_SIZE + 4, b"H")
    assert isinstance(open_header(bad), KeyCommitmentError)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        pytest.param(struct.pack(">HH", 0x8001, 5) + b"abc", "runs past", id="value-too-short"),
        pytest.param(b"\x80", "inside a field header", id="cut-field-header"),
        pytest.param(struct.pack(">HHHH", 0x8002, 0, 0x8001, 0), "out of order", id="order"),
        pytest.param(struct.pack(">HHHH", 0x8001, 0, 0x8001, 0), "out of order or repeated", id="repeat"),
    ],
)
def test_malformed_fields_are_unsupported(fields: bytes, words: str) -> None:
    raw = header()
    body = raw[:OFF_FIELDS_LENGTH] + struct.pack(">H", len(fields)) + fields
    with pytest.raises(UnsupportedFormatError, match=words):
        parse_header(body + bytes(32))


def test_fields_are_bounded_when_written() -> None:
    with pytest.raises(ValueError, match=f"exceed {MAX_FIELDS_SIZE}"):
        make_header(KEY128, Role.ONE_WAY, 10, b"", SALT, fields=[(0x8001, bytes(MAX_FIELDS_SIZE))])
    with pytest.raises(ValueError, match="increasing types"):
        make_header(KEY128, Role.ONE_WAY, 10, b"", SALT, fields=[(2, b""), (1, b"")])


def test_a_foreign_stream_is_refused_without_showing_its_bytes() -> None:
    """Its first bytes may be plaintext or key text given by mistake: never in the message."""
    for start in (b"SECRET", b"AUETNez5yjBjBrYkxYwocw", b"\x00\xffGC"):
        with pytest.raises(UnsupportedFormatError) as info:
            check_header_start(start)
        assert start[:4].decode("latin-1") not in str(info.value)


class VerifySpy:
    """Stands for cryptography's HKDF inside gcmstream.format: records every ``verify`` (the
    constant-time comparison of the derived bytes with the expected ones, in cryptography's
    Rust) and answers as HKDF does."""

    calls: ClassVar[list[tuple[bool, bytes]]] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.real = HKDF(**options)

    def derive(self, key: bytes) -> bytes:
        return self.real.derive(key)

    def verify(self, key: bytes, expected: bytes) -> None:
        VerifySpy.calls.append((HKDF(**self.options).derive(key) == expected, bytes(expected)))
        self.real.verify(key, expected)


def test_the_commitment_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """K9 / H12: the header's commitment is compared by HKDF.verify (constant time, in
    cryptography), with the commitment the header carries; a header under another context is
    refused by it. (Not hmac.compare_digest: the hmac module loads Python's own OpenSSL.)"""
    VerifySpy.calls = []
    monkeypatch.setattr(gcmstream.format, "HKDF", VerifySpy)
    raw, secret = make_header(KEY128, Role.ONE_WAY, 1024, b"ctx")
    assert verify_header(KEY128, parse_header(raw), b"ctx") == secret
    with pytest.raises(KeyCommitmentError):
        verify_header(KEY128, parse_header(raw), b"another context")
    assert [equal for equal, _ in VerifySpy.calls] == [True, False]
    assert all(carried == raw[-COMMITMENT_SIZE:] for _, carried in VerifySpy.calls)


def test_the_core_loads_no_second_openssl() -> None:
    """hashlib, hmac and secrets load Python's own OpenSSL (_hashlib: 3.7 MiB of RSS, importing
    the core went from 27.5 to 23.8 MiB) beside cryptography's: the core uses cryptography's
    SHA-256 and HKDF.verify instead, and os.urandom for temporary names."""
    code = "import sys, gcmstream.opener, gcmstream.sealer, gcmstream.keyfile, gcmstream._atomic; "
    code += "print(sorted({'_hashlib', 'hashlib', 'hmac', 'secrets'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_byte_view_refuses_what_it_cannot_use_and_casts_the_rest() -> None:
    """``byte_view``: a non-contiguous buffer, or a read-only one where plaintext must be
    written, is refused with UnsupportedBufferError (hand-made removals of the mutation run of
    2026-12-04: either raise removed went unnoticed by this file); other formats are cast."""
    with pytest.raises(UnsupportedBufferError, match=r"^the buffer is not contiguous$"):
        gcmstream.format.byte_view(memoryview(bytes(8))[::2])
    read_only = r"^the buffer is read-only: plaintext cannot be written into it$"
    with pytest.raises(UnsupportedBufferError, match=read_only):
        gcmstream.format.byte_view(bytes(8), writable=True)
    rows = gcmstream.format.byte_view(memoryview(bytearray(12)).cast("B", (3, 4)))
    assert (rows.ndim, len(rows)) == (1, 12)
    words = memoryview(bytearray(8)).cast("I")
    view = gcmstream.format.byte_view(words, writable=True)
    assert (view.format, view.ndim, len(view), view.readonly) == ("B", 1, 8, False)


def test_identities_are_one_to_255_bytes_of_str_or_bytes() -> None:
    """``check_identity`` (local_id, peer_id, key names): str as UTF-8 or bytes, 1 to 255 bytes;
    anything else refused, naming the parameter."""
    check_identity = gcmstream.format.check_identity
    assert check_identity("é", "local_id") == "é".encode()
    assert check_identity(b"x" * 255, "local_id") == b"x" * 255
    with pytest.raises(TypeError, match=r"^peer_id must be str or bytes, got int$"):
        check_identity(7, "peer_id")  # type: ignore[arg-type]
    for size in (0, 256):
        with pytest.raises(ValueError, match=rf"^local_id must be 1 to 255 bytes, got {size}$"):
            check_identity(b"x" * size, "local_id")


def test_one_key_cannot_have_two_names_in_a_key_ring() -> None:
    with pytest.raises(ValueError, match="one key cannot have two names"):
        KeyRing({"alice": [KEY128], "bob": [KEY256, KEY128]})
    assert len(KeyRing({"alice": [KEY128, KEY128], "bob": [KEY256]})) == 2  # one key, one name, twice


def test_a_header_naming_a_held_key_under_another_suite_is_refused_by_h11() -> None:
    """``find_key``: the key ID names a key held here, but the header's suite is not that
    key's (only a writer lying about its key's size does this): KeyCommitmentError, rule H11."""
    header, _ = make_header(KEY128, Role.ONE_WAY, 1024, b"", SALT)
    lying = bytearray(header)
    lying[OFF_SUITE] = Suite.AES_256_GCM
    start = gcmstream.format.parse_header_start(bytes(lying))
    with pytest.raises(
        KeyCommitmentError, match="stream uses AES_256_GCM but its key is for AES_128_GCM"
    ) as caught:
        gcmstream.format.find_key(KeyRing([KEY128]), start)
    assert caught.value.rule == "H11"
    assert (
        gcmstream.format.find_key(KeyRing([KEY256, KEY128]), gcmstream.format.parse_header_start(header))
        == KEY128
    )


def test_each_refusal_of_the_format_module_says_exactly_what_was_wrong() -> None:
    """The whole message (and rule) of each refusal the format tests had matched only in part
    or not at all (mutation run of 2026-12-04: "XX" around them, their case changed, or None)."""
    fmt = gcmstream.format
    with pytest.raises(ValueError, match=r"^key update limits must be at least 1$"):
        KeyLimits(update_after_records=0)
    with pytest.raises(ValueError, match=r"^key update limits must not exceed the hard limits$"):
        KeyLimits(update_after_records=5, hard_records=4)
    bound = r"\(the AES-GCM confidentiality bound of draft-irtf-cfrg-aead-limits\)$"
    with pytest.raises(ValueError, match=bound):
        KeyLimits(hard_records=MAX_HARD_RECORDS + 1)
    with pytest.raises(ValueError, match=r"^one key cannot have two names in a KeyRing$"):
        KeyRing({"alice": [KEY128], "bob": [KEY128]})
    with pytest.raises(ValueError, match=r"^a KeyRing needs at least one key$"):
        KeyRing([])
    with pytest.raises(ValueError, match=r"^a key's name must be 1 to 255 bytes, got 0$"):
        KeyRing({"": KEY128})
    fault = fmt.record_size_fault(70000, 65536)
    assert isinstance(fault, RecordTooLargeError)
    assert (fault.rule, fault.size, fault.limit) == ("H8", 70000, 65536)
    assert str(fault) == "announced record size of 70000 bytes exceeds the limit of 65536 bytes"
    header, _ = make_header(KEY128, Role.ONE_WAY, 1024, b"context", SALT)
    with pytest.raises(KeyCommitmentError) as caught:
        fmt.verify_commitment(KEY128, header, b"another context")
    assert caught.value.rule == "H12"
    assert str(caught.value) == (
        "stream header does not match this key and context (wrong key, wrong context, or an altered header)"
    )
    for fields, message in [
        (b"\x00\x01\x00", "header fields end inside a field header"),
        (b"\x00\x01\x00\x05ab", "header field 0x0001 runs past the end of the fields"),
        (b"\x00\x02\x00\x00\x00\x01\x00\x00", "header field 0x0001 is out of order or repeated"),
    ]:
        with pytest.raises(MalformedHeaderError) as refused:
            fmt.parse_fields(fields)
        assert (refused.value.rule, str(refused.value)) == ("H13", message)


def test_key_ring_names_and_repr_as_given() -> None:
    """``name()`` gives a key's name as it was given (str stays str, bytes stay bytes), the
    repr shows each name (bytes that are not UTF-8 replaced) and each key ID's first 8 hex
    digits, never a key."""
    other = bytes(range(16, 32))
    ring = KeyRing({"alice": KEY128})
    assert ring.name(key_id(KEY128)) == "alice"
    assert ring.name(key_id(other)) is None
    assert ring.identity(key_id(KEY128)) == b"alice"
    assert repr(ring) == f"<KeyRing alice={key_id(KEY128).hex()[:8]}>"
    raw = KeyRing({b"\xffbob": [KEY256]})
    assert raw.name(key_id(KEY256)) == b"\xffbob"
    assert repr(raw) == f"<KeyRing \ufffdbob={key_id(KEY256).hex()[:8]}>"
    assert (
        repr(KeyRing([KEY128, other])) == f"<KeyRing {key_id(KEY128).hex()[:8]}, {key_id(other).hex()[:8]}>"
    )


def test_header_bounds_are_inclusive_and_the_readers_bound_is_used() -> None:
    """Fields of exactly the bound pass H7; ``parse_header`` checks the bound it is given (a
    reader of recipient stanzas allows more); a field type of 0x8000 is not critical (H14
    concerns types below it)."""
    fields = [(0x8000, bytes(MAX_FIELDS_SIZE - 4))]  # one field header and its value: 4,096 bytes
    header, _ = make_header(KEY128, Role.ONE_WAY, 1024, b"", SALT, fields=fields)
    assert parse_header(header).field(0x8000) == bytes(MAX_FIELDS_SIZE - 4)
    larger, _ = make_header(
        KEY128, Role.ONE_WAY, 1024, b"", SALT, fields=[(0x8000, bytes(5000))], max_fields_size=0xFFFF
    )
    assert parse_header(larger, max_fields_size=0xFFFF).field(0x8000) == bytes(5000)
    with pytest.raises(MalformedHeaderError, match="exceed 4096 bytes"):
        parse_header(larger)


def test_fields_are_encoded_only_in_canonical_form() -> None:
    """``encode_fields`` refuses (ValueError, never struct.error) a repeated or out-of-order
    type, a type past 16 bits, a value of 64 KiB; a value of 65,535 bytes is allowed."""
    encode = gcmstream.format.encode_fields
    message = r"^header fields must have increasing types and values under 64 KiB$"
    for fields in ([(1, b""), (1, b"")], [(2, b""), (1, b"")], [(0x10000, b"")], [(1, bytes(0x10000))]):
        with pytest.raises(ValueError, match=message):
            encode(fields, 0x20000)
    assert len(encode([(1, bytes(0xFFFF))], 0x20000)) == 4 + 0xFFFF
    assert len(encode([(1, bytes(12))], 16)) == 16  # exactly the bound


@pytest.mark.parametrize(
    ("version", "words"),
    [
        (
            1,
            "format version 1 is not supported (this reads version 2)"
            " (version 1 was never released and is no longer read)",
        ),
        (3, "format version 3 is not supported (this reads version 2)"),
    ],
)
def test_an_unsupported_version_is_named_with_what_this_reads(version: int, words: str) -> None:
    with pytest.raises(UnsupportedFormatError) as caught:
        check_header_start(MAGIC + bytes([version]))
    assert (caught.value.rule, str(caught.value)) == ("H2", words)


def test_messages_say_in_words_what_was_expected_never_a_repr_or_memoryview() -> None:
    """A hostile review: the wrong magic said "the magic b'GCMS'" (a bytes repr), and text given
    where bytes go said memoryview's "a bytes-like object is required, not 'str'". Both are
    said in words: the four bytes "GCMS", and text to encode first."""
    with pytest.raises(UnsupportedFormatError) as wrong:
        check_header_start(b"PK\x03\x04")
    assert 'the 4 bytes "GCMS"' in str(wrong.value) and "b'" not in str(wrong.value)
    sealer = Sealer(bytes(32))
    opener = Opener(bytes(32))
    for call in (partial(sealer.seal, "text"), partial(opener.receive_data, "text")):  # type: ignore[arg-type]
        with pytest.raises(TypeError) as refused:
            call()
        assert str(refused.value) == (
            "expected bytes (bytes, bytearray, memoryview), not text (str): encode it first, as text.encode()"
        )
    with pytest.raises(TypeError, match=r"^expected bytes \(bytes, bytearray, memoryview\), not int$"):
        sealer.seal(5)  # type: ignore[arg-type]


def test_sealed_with_names_one_of_three_ways() -> None:
    """``sealed_with`` was typed ``-> str`` though it returns one of three words: typed as a
    Literal, a caller's comparison with a misspelt word is a type error (mypy checks the
    ``assert_type`` below; at run time it returns its argument)."""
    Way = Literal["key", "recipients", "passphrase"]
    ways = (
        sealed_with([]),
        sealed_with([(FieldType.RECIPIENT_STANZAS, b"")]),
        sealed_with([(FieldType.PASSPHRASE_STANZA, b"")]),
    )
    assert [assert_type(way, Way) for way in ways] == ["key", "recipients", "passphrase"]


def test_sealed_with_names_what_a_one_way_headers_fields_say_sealed_it() -> None:
    """``format.sealed_with`` (4.4): a recipient-stanza field says recipients (whatever else is
    there), a passphrase stanza a passphrase, neither a key (mutation run of 2026-12-05, mop5:
    each word, and the passphrase test, changed unseen)."""
    stanza = (FieldType.RECIPIENT_STANZAS, b"s")
    passphrase = (FieldType.PASSPHRASE_STANZA, b"p")
    other = (FieldType.IDENTITY, b"me")
    assert sealed_with([stanza]) == "recipients"
    assert sealed_with([other, passphrase, stanza]) == "recipients"
    assert sealed_with([passphrase]) == "passphrase"
    assert sealed_with([other, passphrase]) == "passphrase"
    assert sealed_with([other]) == "key"
    assert sealed_with([]) == "key"


def test_the_start_of_armor_or_another_format_is_named_in_whole_words() -> None:
    """``check_header_start``'s two messages whole (mutation run of 2026-12-05, mop5: its words
    changed unseen): armor says which reader to use; anything else says what the magic is,
    never showing the input's own bytes."""
    with pytest.raises(GcmStreamError) as armored:
        check_header_start(b"-----BEGIN")
    assert str(armored.value) == (
        "the input is armored text ('-----BEGIN ...', gcmstream encrypt -a): this reader takes "
        "the binary form (random access needs a binary file to seek in); 'gcmstream decrypt' "
        "and gcmstream.armor.dearmor read armor"
    )
    with pytest.raises(GcmStreamError) as other:
        check_header_start(b"PK\x03\x04")
    assert (
        str(other.value)
        == 'not a gcmstream stream: it does not start with the 4 bytes "GCMS" (gcmstream\'s magic)'
    )
