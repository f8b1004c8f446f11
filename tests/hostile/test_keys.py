"""Keys, nonces and limits under hostile or careless use.

* No (key, nonce) pair is ever used twice, across key updates and both channel directions:
  AESGCM is wrapped so every encryption and decryption is recorded.
* The writer refuses at the hard per-key limits (nothing sealed, state unchanged) and can always
  move on with update_key(); a reader refuses a peer that passes them.
* Replay, reflection, wrong key, wrong context and wrong suite fail at the right point, with
  their documented errors.
* Key material never shows in reprs, exception messages or log records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

import gcmstream
from gcmstream import (
    Channel,
    GcmStreamError,
    HandshakeError,
    KeyCommitmentError,
    KeyLimits,
    LimitReachedError,
    MalformedRecordError,
    Opener,
    ProtocolError,
    Role,
    RoleMismatchError,
    Sealer,
    StreamBrokenError,
    TruncatedStreamError,
)
from gcmstream import format as wire_format
from gcmstream.format import HEADER_SIZE, RECORD_HEADER, RECORD_HEADER_SIZE, Buffer
from gcmstream.testing import run_handshake

from ..helpers import KEY, fixed_channel, handshake_bytes, read_all

KEY_256 = bytes(range(32, 64))
CONTEXT = b"hostile keys"


@dataclass
class Ledger:
    """Every AES-GCM call gcmstream makes: (operation, key, nonce)."""

    calls: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)

    def pairs(self, operation: str) -> list[tuple[bytes, bytes]]:
        return [(k, n) for op, k, n in self.calls if op == operation]


class RecordingAESGCM:
    """Stands in for AESGCM inside gcmstream.format; records each call, then delegates."""

    ledger = Ledger()

    def __init__(self, key: Buffer) -> None:
        self._key = bytes(key)
        self._aead = AESGCM(key)
        self.ledger.keys.append(self._key)

    def _log(self, operation: str, nonce: Buffer) -> None:
        self.ledger.calls.append((operation, self._key, bytes(nonce)))

    def encrypt(self, nonce: Buffer, data: Buffer, associated_data: Buffer | None) -> bytes:
        self._log("seal", nonce)
        return self._aead.encrypt(nonce, data, associated_data)

    def encrypt_into(self, nonce: Buffer, data: Buffer, associated_data: Buffer | None, buf: Buffer) -> int:
        self._log("seal", nonce)
        return self._aead.encrypt_into(nonce, data, associated_data, buf)

    def decrypt(self, nonce: Buffer, data: Buffer, associated_data: Buffer | None) -> bytes:
        self._log("open", nonce)
        return self._aead.decrypt(nonce, data, associated_data)

    def decrypt_into(self, nonce: Buffer, data: Buffer, associated_data: Buffer | None, buf: Buffer) -> int:
        self._log("open", nonce)
        return self._aead.decrypt_into(nonce, data, associated_data, buf)


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Ledger:
    fresh = Ledger()
    monkeypatch.setattr(RecordingAESGCM, "ledger", fresh)
    monkeypatch.setattr(wire_format, "AESGCM", RecordingAESGCM)
    return fresh


# -- nonces --------------------------------------------------------------------------------

TINY = KeyLimits(update_after_records=3, update_after_bytes=50, hard_records=4, hard_bytes=80)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("seal"), st.integers(min_value=0, max_value=70)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("update"), st.just(0)),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ops=operations, record_size=st.sampled_from([1, 7, 16]))
def test_no_key_nonce_pair_repeats_under_tiny_limits(ops: list[tuple[str, int]], record_size: int) -> None:
    fresh = Ledger()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RecordingAESGCM, "ledger", fresh)
        mp.setattr(wire_format, "AESGCM", RecordingAESGCM)
        sealer = Sealer(KEY, context=CONTEXT, record_size=record_size, limits=TINY)
        wire, plain = bytearray(sealer.take_header()), bytearray()
        for index, (op, size) in enumerate(ops):
            if op == "seal":
                data = bytes((index + i) % 256 for i in range(size))
                plain += data
                wire += sealer.seal(data)
            elif op == "flush":
                wire += sealer.flush()
            else:
                sealer.update_key()
        wire += sealer.close()
        sealed = fresh.pairs("seal")
        assert len(set(sealed)) == len(sealed) == sealer.records_sealed
        assert read_all(Opener(KEY, context=CONTEXT, limits=TINY), bytes(wire)) == plain
        assert fresh.pairs("open") == sealed  # the reader walked the same (key, nonce) sequence


def test_long_stream_across_many_key_updates(ledger: Ledger) -> None:
    """20,000 records with updates every few records, both directions of a channel."""
    limits = KeyLimits(update_after_records=7, update_after_bytes=300, hard_records=8, hard_bytes=400)
    initiator = Channel(KEY, role=Role.INITIATOR, context=CONTEXT, record_size=64, limits=limits)
    responder = Channel(KEY, role=Role.RESPONDER, context=CONTEXT, record_size=64, limits=limits)
    run_handshake(initiator, responder)
    assert initiator.handshake_complete()
    assert responder.handshake_complete()
    sent: dict[Role, bytearray] = {Role.INITIATOR: bytearray(), Role.RESPONDER: bytearray()}
    for i in range(10_000):
        for side in (initiator, responder):
            data = bytes([i % 256]) * (1 + i * 7 % 64)
            sent[side.role] += data
            out = side.sealer.seal(data, flush=True)
            other = responder if side is initiator else initiator
            other.opener.receive_data(out)
            got = other.opener.read()
            assert got == data
    sealed = ledger.pairs("seal")
    assert len(sealed) >= 20_000
    assert len(set(sealed)) == len(sealed)
    assert len(set(ledger.pairs("open"))) == len(ledger.pairs("open"))
    generations = initiator.sealer.key_generation + responder.sealer.key_generation
    assert generations > 2_000
    # every generation in both directions has its own AES key
    used_keys = {k for k, _ in sealed}
    assert len(used_keys) == generations + 2


def test_writer_refuses_at_the_record_limit_and_moves_on(ledger: Ledger) -> None:
    limits = KeyLimits(update_after_records=2, update_after_bytes=10_000, hard_records=4, hard_bytes=10_000)
    sealer = Sealer(KEY, context=CONTEXT, record_size=16, limits=limits, auto_key_update=False)
    wire = bytearray(sealer.take_header())
    wire += sealer.seal(bytes(16 * 3))
    before = (sealer.records_sealed, len(ledger.calls), sealer.pending)
    with pytest.raises(LimitReachedError):
        sealer.seal(bytes(16))  # the fourth slot is kept for a record that changes the key
    with pytest.raises(LimitReachedError):
        sealer.seal(bytes(16 * 5 + 3))  # several records at once: refused as a whole
    assert (sealer.records_sealed, len(ledger.calls), sealer.pending) == before
    sealer.update_key()
    wire += sealer.seal(bytes(16 * 3 + 3))  # KEY_UPDATE on the first of them
    wire += sealer.close()
    assert sealer.key_generation == 1
    assert read_all(Opener(KEY, context=CONTEXT, limits=limits), bytes(wire)) == bytes(16 * 6 + 3)
    sealed = ledger.pairs("seal")
    assert len(set(sealed)) == len(sealed)


def test_writer_refuses_at_the_byte_limit_and_moves_on(ledger: Ledger) -> None:
    limits = KeyLimits(update_after_records=100, update_after_bytes=40, hard_records=100, hard_bytes=40)
    sealer = Sealer(KEY, context=CONTEXT, record_size=16, limits=limits, auto_key_update=False)
    wire = bytearray(sealer.take_header())
    wire += sealer.seal(bytes(32 + 10))  # two records sealed (32 bytes), 10 bytes pending
    with pytest.raises(LimitReachedError):
        sealer.seal(bytes(16))
    with pytest.raises(LimitReachedError):
        sealer.flush()  # 42 bytes would pass 40
    calls = len(ledger.calls)
    sealer.update_key()
    wire += sealer.flush()  # must still be possible: the pending bytes go under the next key
    assert len(ledger.calls) > calls
    wire += sealer.seal(bytes(16), final=True)
    assert read_all(Opener(KEY, context=CONTEXT, limits=limits), bytes(wire)) == bytes(32 + 10 + 16)


def test_automatic_updates_never_hit_the_byte_limit(ledger: Ledger) -> None:
    """update_after_bytes may equal hard_bytes: the writer must update in time, not refuse."""
    limits = KeyLimits(update_after_records=1000, update_after_bytes=40, hard_records=1000, hard_bytes=40)
    sealer = Sealer(KEY, context=CONTEXT, record_size=16, limits=limits)
    wire = bytearray(sealer.take_header())
    sizes = (16, 16, 16, 3, 16, 16, 9, 16, 16, 16, 16)
    for size in sizes:
        wire += sealer.seal(bytes(size), flush=True)
    wire += sealer.close()
    assert read_all(Opener(KEY, context=CONTEXT, limits=limits), bytes(wire)) == bytes(sum(sizes))
    sealed = ledger.pairs("seal")
    assert len(set(sealed)) == len(sealed)


@pytest.mark.parametrize("which", ["records", "bytes"])
def test_reader_refuses_a_peer_past_the_hard_limit(which: str) -> None:
    loose = KeyLimits(
        update_after_records=1000, update_after_bytes=10_000, hard_records=1000, hard_bytes=10_000
    )
    if which == "records":
        strict = KeyLimits(
            update_after_records=3, update_after_bytes=10_000, hard_records=5, hard_bytes=10_000
        )
    else:
        strict = KeyLimits(update_after_records=1000, update_after_bytes=40, hard_records=1000, hard_bytes=50)
    sealer = Sealer(KEY, context=CONTEXT, record_size=16, limits=loose, auto_key_update=False)
    wire = bytes(sealer.take_header()) + bytes(sealer.seal(bytes(range(16)) * 7, final=True))
    opener = Opener(KEY, context=CONTEXT, limits=strict)
    opener.receive_data(wire)
    opener.receive_eof()
    released = bytearray()
    with pytest.raises(MalformedRecordError, match="per-key"):
        while (got := opener.read()) is not None and got:
            released += got
    # records 0..4 fit (5 records or 48 bytes); record 5 (records) / record 3 (bytes) does not
    assert bytes(released) == bytes(range(16)) * (5 if which == "records" else 3)


# -- replay, reflection, wrong key/context/suite --------------------------------------------


def session(fixed: bool = False) -> bytes:
    """A client session recorded on the wire: the client's handshake bytes and records. With
    ``fixed``, both ends use the deterministic salts and ephemeral keys of tests/helpers.py."""
    if fixed:
        client, server = (
            fixed_channel(KEY, Role.INITIATOR, context=CONTEXT),
            fixed_channel(KEY, Role.RESPONDER, context=CONTEXT),
        )
    else:
        client = Channel(KEY, role=Role.INITIATOR, context=CONTEXT)
        server = Channel(KEY, role=Role.RESPONDER, context=CONTEXT)
    sent = bytearray(handshake_bytes(client, server)[0])
    records = bytes(client.sealer.seal(b"transfer 100 to mallory", flush=True)) + bytes(client.sealer.close())
    sent += records
    assert read_all(server.opener, records) == b"transfer 100 to mallory"
    return bytes(sent)


def test_replayed_session_fails_at_the_handshake() -> None:
    """The server answers a replayed header with fresh ephemeral keys; the recorded Finished
    does not confirm them, so nothing is released and the server never sends a record."""
    recorded = session()
    fresh_server = Channel(KEY, role=Role.RESPONDER, context=CONTEXT)
    fresh_server.initial_data()
    fresh_server.opener.receive_data(recorded)
    assert fresh_server.data_to_send()  # its answer: header and Finished, fresh keys
    with pytest.raises(HandshakeError, match="key confirmation"):
        fresh_server.handshake_complete()
    with pytest.raises(StreamBrokenError):
        fresh_server.opener.read()
    with pytest.raises(gcmstream.NotReadyError):
        fresh_server.sealer.seal(b"reply")


def test_replay_would_be_accepted_only_if_the_server_repeated_its_ephemeral_key() -> None:
    """Documents the assumption: the responder's fresh ephemeral key (and salt) is what defeats
    replay. The test-only ``_ephemeral``/``_salt`` injection repeats them; then a replay passes."""
    recorded = session(fixed=True)
    again = fixed_channel(KEY, Role.RESPONDER, context=CONTEXT)
    again.initial_data()
    assert read_all(again.opener, recorded) == b"transfer 100 to mallory"
    fresh_salt_only = fixed_channel(KEY, Role.RESPONDER, context=CONTEXT, salt=bytes(32))
    fresh_salt_only.initial_data()
    fresh_salt_only.opener.receive_data(recorded)
    with pytest.raises(HandshakeError):
        fresh_salt_only.handshake_complete()


def test_reflected_stream_fails_at_the_header() -> None:
    client = Channel(KEY, role=Role.INITIATOR, context=CONTEXT)
    own = client.initial_data()
    client.opener.receive_data(own)  # an attacker bounces our own header back
    with pytest.raises(RoleMismatchError, match="reflected"):
        client.handshake_complete()
    with pytest.raises(gcmstream.NotReadyError):
        client.sealer.seal(b"secret")  # nothing can be sealed for a failed peer
    with pytest.raises(StreamBrokenError):
        client.opener.read()


def test_one_way_stream_is_not_a_channel_peer() -> None:
    server = Channel(KEY, role=Role.RESPONDER, context=CONTEXT)
    server.initial_data()
    server.opener.receive_data(Sealer(KEY, context=CONTEXT).take_header())
    with pytest.raises(RoleMismatchError):
        server.handshake_complete()


@pytest.mark.parametrize(
    ("reader_key", "reader_context", "match"),
    [
        (bytes(range(1, 17)), CONTEXT, "key ID"),  # another key: its ID is unknown here
        (KEY, b"other context", "wrong key, wrong context"),
        (KEY_256[:16], CONTEXT, "key ID"),  # the writer used KEY_256: another key and suite
    ],
    ids=["wrong-key", "wrong-context", "wrong-suite"],
)
@pytest.mark.parametrize("mode", ["one-way", "channel"])
def test_wrong_key_context_or_suite_fails_at_the_header(
    reader_key: bytes, reader_context: bytes, match: str, mode: str
) -> None:
    writer_key = KEY_256 if reader_key == KEY_256[:16] else KEY
    if mode == "one-way":
        header = Sealer(writer_key, context=CONTEXT).take_header()
        opener = Opener(reader_key, context=reader_context)
        opener.receive_data(header)  # only the header: no record is needed to tell
        with pytest.raises(KeyCommitmentError, match=match):
            opener.read()
    else:
        header = Channel(writer_key, role=Role.INITIATOR, context=CONTEXT).initial_data()
        server = Channel(reader_key, role=Role.RESPONDER, context=reader_context)
        server.initial_data()
        server.opener.receive_data(header)
        with pytest.raises(KeyCommitmentError, match=match):
            server.handshake_complete()


# -- key material never shows ------------------------------------------------------------------


def _failures() -> list[BaseException]:
    """Provoke every kind of error gcmstream raises, in both modes."""
    errors: list[BaseException] = []

    def attempt(action: object) -> None:
        assert callable(action)
        try:
            action()
        except GcmStreamError as exc:
            errors.append(exc)

    good = Sealer(KEY, context=CONTEXT, record_size=16)
    wire = bytes(good.seal(bytes(100), final=True))
    for data in (
        wire[:-1],
        wire + b"x",
        wire[:HEADER_SIZE] + RECORD_HEADER.pack(0, 0xFFFFFFFF),
        wire[:HEADER_SIZE] + RECORD_HEADER.pack(0, 3),
        wire[: HEADER_SIZE + RECORD_HEADER_SIZE + 4] + b"\xff" + wire[HEADER_SIZE + RECORD_HEADER_SIZE + 5 :],
        b"GCMX" + wire[4:],
        Sealer(KEY_256, context=CONTEXT).take_header(),
    ):
        for key, context in ((KEY, CONTEXT), (KEY, b"nope"), (bytes(16), CONTEXT)):
            opener = Opener(key, context=context)
            opener.receive_data(data)
            opener.receive_eof()
            attempt(lambda o=opener: [o.read() for _ in range(20)])
            attempt(opener.read)
    closed = Sealer(KEY)
    closed.close()
    attempt(lambda: closed.seal(b"x"))
    limited = Sealer(KEY, limits=KeyLimits(1, 1, 1, 1), auto_key_update=False)
    attempt(lambda: limited.seal(b"xx", flush=True))
    reflect = Channel(KEY, role=Role.INITIATOR)
    reflect.opener.receive_data(reflect.initial_data())
    attempt(reflect.handshake_complete)
    attempt(lambda: reflect.sealer.seal(b"x"))
    return errors


def _texts(obj: object) -> list[str]:
    out = [str(obj), repr(obj)]
    if isinstance(obj, BaseException):
        seen: set[int] = set()
        exc: BaseException | None = obj
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            out += [str(exc), repr(exc), repr(exc.args)]
            exc = exc.__cause__ or exc.__context__
    return out


def _secret_forms(secret: bytes) -> list[str]:
    return [secret.hex(), secret.hex().upper(), repr(secret)[2:-1], secret.decode("latin-1")]


def test_keys_never_appear_in_reprs_errors_or_logs(ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors = _failures()
    assert len(errors) > 20
    assert {type(e).__name__ for e in errors} >= {
        "AuthenticationError",
        "KeyCommitmentError",
        "LimitReachedError",
        "MalformedRecordError",
        "RecordTooLargeError",
        "RoleMismatchError",
        "StreamBrokenError",
        "StreamClosedError",
        "TrailingDataError",
        "TruncatedStreamError",
        "UnsupportedFormatError",
        "NotReadyError",
    }
    sealer = Sealer(KEY, context=CONTEXT)
    opener = Opener(KEY, context=CONTEXT)
    opener.receive_data(sealer.seal(b"hello", flush=True))
    channel = Channel(KEY_256, role=Role.INITIATOR, context=CONTEXT)
    header, stream_secret = wire_format.make_header(KEY, Role.ONE_WAY, 64, CONTEXT)
    traffic = wire_format.TrafficKeys(stream_secret, wire_format.Suite.AES_128_GCM)
    objects: list[object] = [
        sealer,
        opener,
        channel,
        channel.sealer,
        channel.opener,
        traffic,
        traffic.next(),
        opener.header,
        *errors,
    ]
    texts = [t for obj in objects for t in _texts(obj)]
    texts += [record.getMessage() for record in caplog.records]
    texts += [caplog.text]
    secrets = [KEY, KEY_256, stream_secret, traffic.secret, *ledger.keys]
    assert len(ledger.keys) > 10  # the AES keys actually derived during the run
    for secret in secrets:
        for form in _secret_forms(secret):
            for text in texts:
                assert form not in text, f"key material in {text[:80]!r}"
    # the last resort, too: the repr of an exception chain printed by logging
    logging.getLogger("gcmstream").error("failure", exc_info=errors[0])
    for secret in secrets:
        assert secret.hex() not in caplog.text


def test_truncation_is_an_eoferror_and_never_a_clean_end() -> None:
    sealer = Sealer(KEY, context=CONTEXT, record_size=16)
    wire = bytes(sealer.seal(bytes(40), flush=True))  # no FINAL
    opener = Opener(KEY, context=CONTEXT)
    opener.receive_data(wire)
    opener.receive_eof()
    assert opener.read() == bytes(40)
    with pytest.raises(TruncatedStreamError) as info:
        opener.read()
    assert isinstance(info.value, EOFError)
    assert isinstance(info.value, ProtocolError)
