"""The points of docs/FORMAT.md an implementer from the text alone had to guess (issue 21, 4),
each checked as written: which stanza failures are a non-match (4.4), which key exchange a
responder writes and what K8's "well formed" means (5.2), when an initiator header is pending
(K4) and what an initiator with a key ring raises for an answer under another key (5.2), and
how a random-access reader treats a stored record header and the FIXED_LAYOUT limits (4.3,
8.3). Headers are forged with a valid commitment where the point is past H12."""

from __future__ import annotations

import gc
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519

import gcmstream
from gcmstream import (
    Channel,
    HandshakeError,
    Identity,
    KeyExchange,
    KeyRing,
    NoIdentityMatchedError,
    Opener,
    RecipientKind,
    Role,
    Sealer,
    SelfConnectionError,
    UnknownKeyError,
    generate_key,
)
from gcmstream.channel import self_connections_allowed
from gcmstream.format import (
    FLAG_FINAL,
    HEADER_FIXED_SIZE,
    RECORD_HEADER,
    FieldType,
    make_header,
    parse_header,
)
from gcmstream.handshake import CHANNEL_FIELDS, channel_keys, respond
from gcmstream.header import HeaderSpec

from .helpers import KEY

FILE_KEY = bytes(range(0x40, 0x60))


# -- 4.4: stanza failures inside HPKE are non-matches -------------------------------------------


def stanza_stream(bodies: list[tuple[RecipientKind, bytes]]) -> bytes:
    """A stream keyed by FILE_KEY whose 0x0010 field holds these stanza bodies (untagged), with
    a valid commitment: what any recipient, who knows the file key, can write."""
    value = struct.pack(">H", len(bodies)) + b"".join(
        struct.pack(">BBH", kind, 0, len(body)) + body for kind, body in bodies
    )
    sealer = Sealer(
        FILE_KEY, record_size=64, header_spec=HeaderSpec(fields=((FieldType.RECIPIENT_STANZAS, value),))
    )
    return bytes(sealer.seal(b"the plaintext", final=True))


def read_with(identity: Identity, wire: bytes) -> bytes:
    opener = Opener(identities=[identity])
    opener.receive_data(wire)
    opener.receive_eof()
    plaintext = opener.read()
    assert plaintext is not None
    return bytes(plaintext)


@pytest.mark.parametrize("kind", list(RecipientKind), ids=lambda k: k.text)
def test_a_stanza_that_fails_inside_hpke_is_a_non_match(kind: RecipientKind) -> None:
    """An encapsulation whose X25519 part is the all-zero point (an all-zero X25519 result) or
    whose ML-KEM ciphertext is garbage of the right length: the identity does not match that
    stanza and the next stanza is tried; alone, it is NoIdentityMatchedError, never
    StanzaError."""
    identity = Identity.generate(kind)
    good = identity.recipient.wrap(FILE_KEY)
    low_order = (1).to_bytes(32, "little")  # u = 1: a point of order 4, X25519 gives all zero
    broken = (
        [bytes(32) + good[32:], low_order + good[32:]]
        if kind is RecipientKind.X25519
        else [
            good[:1088] + bytes(32) + good[1120:],  # X25519 ciphertext: the all-zero point
            good[:1088] + low_order + good[1120:],
            bytes(1088) + good[1088:],  # ML-KEM ciphertext: right length, not an encapsulation
        ]
    )
    for body in broken:
        assert len(body) == len(good)
        assert read_with(identity, stanza_stream([(kind, body), (kind, good)])) == b"the plaintext"
        with pytest.raises(NoIdentityMatchedError):
            read_with(identity, stanza_stream([(kind, body)]))


def raw_stanza_stream(value: bytes) -> bytes:
    """A stream keyed by FILE_KEY whose 0x0010 field is ``value``, with a valid commitment."""
    sealer = Sealer(
        FILE_KEY, record_size=64, header_spec=HeaderSpec(fields=((FieldType.RECIPIENT_STANZAS, value),))
    )
    return bytes(sealer.seal(b"the plaintext", final=True))


@pytest.mark.parametrize("length", [0, 7, 8])
def test_a_tagged_stanza_of_unknown_kind_must_hold_its_tag(length: int) -> None:
    """FORMAT.md 4.4, S5: a stanza of unknown kind (here 3) is skipped and still counts, but
    if TAGGED it must hold its 8-byte tag: shorter is StanzaError, before any stanza is opened
    (the good stanza after it is never tried)."""
    identity = Identity.generate(RecipientKind.X25519)
    good = identity.recipient.wrap(FILE_KEY)
    value = (
        struct.pack(">H", 2)
        + struct.pack(">BBH", 3, 1, length)
        + bytes(length)
        + struct.pack(">BBH", RecipientKind.X25519, 0, len(good))
        + good
    )
    wire = raw_stanza_stream(value)
    if length >= 8:
        assert read_with(identity, wire) == b"the plaintext"
    else:
        with pytest.raises(gcmstream.StanzaError, match="shorter than its tag"):
            read_with(identity, wire)


# -- 5.2: the responder's key exchange, K8's ML-KEM checks ---------------------------------------


@pytest.mark.parametrize("least", [KeyExchange.X25519, KeyExchange.MLKEM768_X25519], ids=lambda e: e.name)
def test_a_responder_writes_the_key_exchange_the_initiator_offered(least: KeyExchange) -> None:
    """Header byte 7 of R_header is the offer's (here the hybrid), whatever the least the
    responder accepts, with the ML-KEM-768 ciphertext share (1,088 bytes)."""
    initiator = Channel(KEY, role=Role.INITIATOR)
    responder = Channel(KEY, role=Role.RESPONDER, key_exchange=least)
    responder.opener.receive_data(initiator.initial_data())
    answer = responder.data_to_send()
    header = parse_header(answer[: len(answer) - 32], CHANNEL_FIELDS)
    assert answer[7] == KeyExchange.MLKEM768_X25519 == header.key_exchange
    mlkem_share = header.field(FieldType.MLKEM768_SHARE)
    assert mlkem_share is not None and len(mlkem_share) == 1088


def x25519_share() -> bytes:
    return x25519.X25519PrivateKey.generate().public_key().public_bytes_raw()


def forged_hello(exchange: KeyExchange, *shares: tuple[int, bytes]) -> bytes:
    header, _ = make_header(KEY, Role.INITIATOR, 1024, b"", key_exchange=exchange, fields=list(shares))
    return header


def over_modulus(encapsulation_key: bytes) -> bytes:
    """The key with its first 12-bit coefficient set to 4,095 (>= q = 3,329)."""
    out = bytearray(encapsulation_key)
    out[0] = 0xFF
    out[1] |= 0x0F
    return bytes(out)


def test_an_mlkem_encapsulation_key_is_checked_as_fips_203_says() -> None:
    """A responder refuses (HandshakeError, no answer) an encapsulation key of another length
    than 1,184 bytes, or one failing FIPS 203's modulus check (a coefficient >= 3,329)."""
    good = mlkem.MLKEM768PrivateKey.generate().public_key().public_bytes_raw()
    with pytest.raises(ValueError, match="ML-KEM-768"):
        mlkem.MLKEM768PublicKey.from_public_bytes(over_modulus(good))  # the primitive's own check
    for bad in (over_modulus(good), good[:-1], good + b"\0"):
        responder = Channel(KEY, role=Role.RESPONDER)
        responder.opener.receive_data(
            forged_hello(KeyExchange.MLKEM768_X25519, (0x0001, x25519_share()), (0x0002, bad))
        )
        with pytest.raises(HandshakeError, match="ML-KEM-768"):
            responder.handshake_complete()
        assert responder.data_to_send() == b""
    responder = Channel(KEY, role=Role.RESPONDER)  # the same header with the good key is answered
    responder.opener.receive_data(
        forged_hello(KeyExchange.MLKEM768_X25519, (0x0001, x25519_share()), (0x0002, good))
    )
    assert responder.data_to_send()


def test_a_recipient_whose_mlkem_key_fails_the_modulus_check_is_refused() -> None:
    """FORMAT.md 4.5: the same FIPS 203 check as K8, when a kind-2 recipient is parsed."""
    identity = Identity.generate(RecipientKind.MLKEM768_X25519)
    public = identity.recipient.public_bytes
    bad = over_modulus(public[:1184]) + public[1184:]
    with pytest.raises(gcmstream.RecipientError):
        gcmstream.Recipient(RecipientKind.MLKEM768_X25519, bad)
    assert gcmstream.Recipient(RecipientKind.MLKEM768_X25519, public) == identity.recipient


def forged_answer(initiator: Channel, exchange: KeyExchange, *shares: tuple[int, bytes]) -> HandshakeError:
    """What the initiator raises for an R_header (valid commitment) with these shares."""
    initiator.initial_data()
    answer, _ = make_header(KEY, Role.RESPONDER, 1024, b"", key_exchange=exchange, fields=list(shares))
    initiator.opener.receive_data(answer + bytes(32))
    with pytest.raises(HandshakeError) as caught:
        initiator.handshake_complete()
    return caught.value


def test_an_mlkem_ciphertext_is_checked_for_its_length() -> None:
    """An initiator refuses a ciphertext of another length than 1,088 bytes (K8)."""
    for size in (1087, 1089):
        error = forged_answer(
            Channel(KEY, role=Role.INITIATOR),
            KeyExchange.MLKEM768_X25519,
            (0x0001, x25519_share()),
            (0x0002, bytes(size)),
        )
        assert "ML-KEM-768 ciphertext" in str(error)


def test_a_wrong_mlkem_ciphertext_of_the_right_length_fails_key_confirmation() -> None:
    """Decapsulation rejects implicitly: a 1,088-byte ciphertext that is no encapsulation to the
    initiator's key gives another secret, and the answer's Finished (made by a forger with the
    secret it chose) fails K9."""
    initiator = Channel(KEY, role=Role.INITIATOR)
    hello = initiator.initial_data()
    fields, shared = respond(parse_header(hello, CHANNEL_FIELDS))
    fields = [(kind, bytes(1088) if kind == 0x0002 else value) for kind, value in fields]
    answer, _ = make_header(
        KEY, Role.RESPONDER, 1024, b"", key_exchange=KeyExchange.MLKEM768_X25519, fields=fields
    )
    finished = channel_keys(KEY, shared, hello, answer, b"").responder_finished
    initiator.opener.receive_data(answer + finished)
    with pytest.raises(HandshakeError, match="key confirmation"):
        initiator.handshake_complete()


def test_an_mlkem_share_in_an_x25519_header_is_refused_both_ways() -> None:
    """Exchange 1 with a 0x0002 field: HandshakeError (K8, "exactly the shares"), from a
    responder reading I_header and from an initiator reading R_header."""
    responder = Channel(KEY, role=Role.RESPONDER, key_exchange=KeyExchange.X25519)
    public = mlkem.MLKEM768PrivateKey.generate().public_key().public_bytes_raw()
    responder.opener.receive_data(
        forged_hello(KeyExchange.X25519, (0x0001, x25519_share()), (0x0002, public))
    )
    with pytest.raises(HandshakeError, match="key shares"):
        responder.handshake_complete()
    error = forged_answer(
        Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519),
        KeyExchange.X25519,
        (0x0001, x25519_share()),
        (0x0002, bytes(1088)),
    )
    assert "key shares" in str(error)


# -- K4: when an initiator header is pending; key rings ------------------------------------------


def answered(hello: bytes) -> bool:
    """Whether a fresh responder of this process answers ``hello`` (False: SelfConnectionError)."""
    responder = Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(hello)
    try:
        responder.handshake_complete()
    except SelfConnectionError:
        return False
    return bool(responder.data_to_send())


@pytest.mark.refuse_self_connections
def test_an_initiator_header_is_pending_from_construction_until_its_handshake_ends() -> None:
    """Pending (K4 refuses it) from the initiator's construction until the handshake ends:
    completed, failed, ended from outside (end_handshake: a timeout, a cancellation), or the
    Channel freed."""
    done = Channel(KEY, role=Role.INITIATOR)
    hello = done.initial_data()
    assert not answered(hello)
    with self_connections_allowed():
        peer = Channel(KEY, role=Role.RESPONDER)
        peer.opener.receive_data(hello)
        done.opener.receive_data(peer.data_to_send())
        peer.opener.receive_data(done.data_to_send())
        assert done.handshake_complete() and peer.handshake_complete()
    assert answered(hello)  # completed

    failed = Channel(KEY, role=Role.INITIATOR)
    hello = failed.initial_data()
    assert not answered(hello)
    failed.opener.receive_data(b"XXXX")  # not a header: H1
    with pytest.raises(gcmstream.UnsupportedFormatError):
        failed.handshake_complete()
    assert answered(hello)  # failed

    unsent = Channel(KEY, role=Role.INITIATOR)
    hello = unsent.data_to_send()  # made at construction; whether it was sent is no matter
    assert not answered(hello)
    unsent.end_handshake()
    assert answered(hello)  # ended from outside

    freed = Channel(KEY, role=Role.INITIATOR)
    hello = freed.initial_data()
    del freed
    gc.collect()
    assert answered(hello)  # freed


def test_an_initiator_refuses_an_answer_under_another_key_of_its_ring_with_unknown_key() -> None:
    """An initiator holding KeyRing([current, old]) offered ``current``: an answer whose key ID
    names ``old`` is UnknownKeyError (H10), the ring notwithstanding, raised once the whole
    answer arrived, not at its 62-byte fixed part (the same rule as a responder's, which hides
    from a prober whether a key ID is held)."""
    current, old = generate_key(), generate_key()
    client = Channel(KeyRing([current, old]), role=Role.INITIATOR)
    client.initial_data()
    answer, _ = make_header(old, Role.RESPONDER, 1024, b"", key_exchange=KeyExchange.MLKEM768_X25519)
    client.opener.receive_data(answer[:HEADER_FIXED_SIZE])
    assert client.handshake_complete() is False  # the fixed part alone: still reading
    client.opener.receive_data(answer[HEADER_FIXED_SIZE:-1])
    assert client.handshake_complete() is False  # all but its last byte: still reading
    client.opener.receive_data(answer[-1:])
    with pytest.raises(UnknownKeyError) as caught:
        client.handshake_complete()
    assert type(caught.value) is UnknownKeyError
    assert not client.sealer.ready


def handshake(initiator: Channel, responder: Channel) -> None:
    """Run the handshake in memory; raise what either end raises."""
    with self_connections_allowed():
        responder.opener.receive_data(initiator.initial_data())
        responder.handshake_complete()
        initiator.opener.receive_data(responder.data_to_send())
        initiator.handshake_complete()
        responder.opener.receive_data(initiator.data_to_send())
        assert responder.handshake_complete() and initiator.handshake_complete()


def test_key_names_and_own_identity_as_k5_and_k6_compare_them() -> None:
    """FORMAT.md 5.2, K5/K6: a key's name is a local label (UTF-8 of a str, no normalisation),
    compared bytewise with the peer's 0x0003 value; K6 needs a present identity, so two ends
    without identities pass it; an identity equal to the own local_id does not."""
    key = generate_key()
    handshake(Channel(key, role=Role.INITIATOR), Channel(key, role=Role.RESPONDER))  # both absent
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    named = KeyRing({nfc: key})
    handshake(Channel(key, role=Role.INITIATOR, local_id=nfc), Channel(named, role=Role.RESPONDER))
    with pytest.raises(gcmstream.PeerIdentityError):  # the same text, other bytes
        handshake(Channel(key, role=Role.INITIATOR, local_id=nfd), Channel(named, role=Role.RESPONDER))
    with pytest.raises(SelfConnectionError):
        handshake(
            Channel(key, role=Role.INITIATOR, local_id="a"), Channel(key, role=Role.RESPONDER, local_id="a")
        )


# -- 4.3 and 8.3: random access -----------------------------------------------------------------


def sealed_file(directory: Path, name: str, record_size: int, layout: int | None, data: bytes) -> Path:
    fields = ((FieldType.FIXED_LAYOUT, struct.pack(">I", layout)),) if layout is not None else ()
    sealer = Sealer(KEY, record_size=record_size, header_spec=HeaderSpec(fields=fields))
    path = directory / name
    path.write_bytes(bytes(sealer.seal(data, final=True)))
    return path


def test_a_stored_record_header_must_equal_the_one_its_place_requires(tmp_path: Path) -> None:
    """In a FIXED_LAYOUT file the stored 5-byte header of a record is compared with the one its
    place requires and the record refused if they differ (AuthenticationError with its
    number), even when its ciphertext would authenticate under the required one: it is never
    replaced. The other records stay readable."""
    data = bytes(range(256)) * 4
    path = sealed_file(tmp_path, "fixed", 100, 1000, data)
    wire = bytearray(path.read_bytes())
    header_size = len(wire) - (10 * 121 + 5 + 24 + 16)
    offset = header_size + 1 * 121  # record 1, plain, full: required header 00 00000074
    assert bytes(wire[offset : offset + 5]) == RECORD_HEADER.pack(0, 116)
    wire[offset] = 0x04  # a reserved flag bit, ciphertext untouched
    path.write_bytes(wire)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.fixed_layout
        assert file.read(100) == data[:100]
        with pytest.raises(gcmstream.AuthenticationError) as caught:
            file.read(100)
        assert caught.value.record_number == 1
        file.seek(200)
        assert file.read() == data[200:]


@pytest.mark.parametrize(
    ("layout", "record_size", "fixed"),
    [
        (1 << 31, 128, True),  # N = hard_records, N x record_size = hard_bytes: at the limits
        ((1 << 31) + 1, 128, False),  # N over hard_records (2^31)
        (1 << 31, 129, False),  # N x record_size over hard_bytes (2^38)
        ((1 << 30) + 1, 256, False),
        (0, 128, False),  # N = 0
    ],
)
def test_a_fixed_layout_past_the_hard_limits_is_ignored(
    tmp_path: Path, layout: int, record_size: int, fixed: bool
) -> None:
    """FORMAT.md 4.3: the field is used only when 1 <= N <= 2^31 and N x record_size <= 2^38
    (exact integers); otherwise the file is read by walking it, and it still opens."""
    data = bytes(3 * record_size + 5)
    path = sealed_file(tmp_path, "f", record_size, layout, data)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.fixed_layout is fixed
        assert file.read() == data
    assert path.read_bytes()[-(5 + 16 + 5)] == FLAG_FINAL


def fixed_file_refusal(path: Path, wire: bytes) -> type[Exception]:
    """The error open_file raises for ``wire`` (a FIXED_LAYOUT file) and, to compare, the one a
    sequential Opener raises for the same bytes, both as classes."""
    path.write_bytes(wire)
    with pytest.raises(gcmstream.ProtocolError) as at_open:
        gcmstream.open_file(path, key=KEY)
    opener = Opener(KEY)
    with pytest.raises(gcmstream.ProtocolError) as sequential:
        opener.receive_data(wire)
        while opener.read():
            pass
        opener.receive_eof()
        while opener.read():
            pass
    assert type(at_open.value) is type(sequential.value)
    return type(at_open.value)


def test_a_refused_fixed_layout_file_gets_the_sequential_readers_error(tmp_path: Path) -> None:
    """FORMAT.md 4.3: when the size or FINAL's place does not fit the layout, the error is the
    one a sequential reader raises on the whole file, or MalformedRecordError if it accepts
    it. A cut at a record boundary whose last full record (stored header 00..., FINAL
    required there) would be an AuthenticationError by the stored-header rule is a
    TruncatedStreamError; a remainder of record_size + 1 .. + 20 is TrailingDataError after a
    full FINAL; a file shorter than header + 21 bytes is TruncatedStreamError."""
    data = bytes(range(250)) * 2  # 5 full records of 100: the last one FINAL
    path = sealed_file(tmp_path, "fixed", 100, 1000, data)
    wire = path.read_bytes()
    header_size = len(wire) - 5 * 121
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.fixed_layout and file.read() == data
    boundary = wire[: header_size + 3 * 121]  # 3 records, none FINAL: the size puts FINAL on #2
    assert boundary[-121] == 0
    assert fixed_file_refusal(path, boundary) is gcmstream.TruncatedStreamError
    for extra in (1, 20):  # remainder record_size + extra
        assert fixed_file_refusal(path, wire + bytes(extra)) is gcmstream.TrailingDataError
    for size in (header_size, header_size + 20):  # S < header_size + 21
        assert fixed_file_refusal(path, wire[:size]) is gcmstream.TruncatedStreamError
    edited = bytearray(wire)  # a reserved flag on record 1: the sequential reader's R5 fails
    edited[header_size + 121] = 0x04
    assert fixed_file_refusal(path, bytes(edited[: header_size + 3 * 121])) is gcmstream.AuthenticationError


# -- 8.2: the error tree ----------------------------------------------------------------------


def test_the_error_tree_in_format_md_is_the_codes() -> None:
    """Each class of FORMAT.md's tree (8.2) exists in gcmstream.errors with exactly the parent
    the drawing gives it, and the stanza errors are fatal ProtocolErrors."""
    text = (Path(__file__).parent.parent / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    block = text.split("**The error tree.**", 1)[1].split("```\n", 2)[1]
    parents: list[tuple[int, type]] = []
    checked = 0
    for line in block.splitlines():
        name = line.lstrip(" │├└─").split(" ", 1)[0]
        depth = len(line) - len(line.lstrip(" │├└─"))
        cls = getattr(gcmstream.errors, name)
        while parents and parents[-1][0] >= depth:
            parents.pop()
        if parents:
            assert parents[-1][1] in cls.__bases__, name
            checked += 1
        parents.append((depth, cls))
    assert checked == 19  # every class but the root
    for fatal in (gcmstream.StanzaError, gcmstream.WorkFactorError, gcmstream.NoIdentityMatchedError):
        assert issubclass(fatal, gcmstream.ProtocolError)
    opener = Opener(identities=[Identity.generate(RecipientKind.X25519)])
    with pytest.raises(NoIdentityMatchedError):
        opener.receive_data(bytes(Sealer(KEY, record_size=16).seal(b"", final=True)))
        opener.read()
    with pytest.raises(gcmstream.StreamBrokenError):
        opener.read()


@pytest.mark.parametrize("params", [(0, 8, 1), (63, 8, 1), (10, 0, 1), (10, 8, 0)])
def test_scrypt_parameters_outside_rfc_7914_are_a_stanza_error_before_scrypt(
    params: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORMAT.md 4.4: log2_n >= 1 (N > 1, RFC 7914), log2_n <= 62, r >= 1 and p >= 1, else
    StanzaError (not WorkFactorError), and scrypt never runs."""
    sealer = Sealer(passphrase="pw", work_factor=10, record_size=64)
    wire = bytearray(sealer.seal(b"x", final=True))
    stanza = wire.index(bytes([10, 8, 1]), HEADER_FIXED_SIZE)
    wire[stanza : stanza + 3] = bytes(params)
    ran: list[object] = []
    monkeypatch.setattr(gcmstream.recipients, "Scrypt", lambda **kw: ran.append(kw))
    opener = Opener(passphrase="pw")
    opener.receive_data(bytes(wire))
    with pytest.raises(gcmstream.StanzaError) as caught:
        opener.read()
    assert type(caught.value) is gcmstream.StanzaError
    assert ran == []


def test_the_fields_bound_depends_on_how_the_reader_is_keyed() -> None:
    """FORMAT.md 8.1, H7: fields_length 4,097 is refused from the fixed part by a reader given a
    key (UnsupportedFormatError), and passes H7 for a reader given identities or a passphrase,
    which then finds no stanza (S3: NoIdentityMatchedError). 65,535 is the field's maximum."""
    fields = ((0x8005, bytes(4097 - 4)),)  # one optional field: 4,097 bytes of fields
    wire = bytes(Sealer(KEY, record_size=64, header_spec=HeaderSpec(fields=fields)).seal(b"", final=True))
    assert struct.unpack_from(">H", wire, HEADER_FIXED_SIZE - 2) == (4097,)
    keyed = Opener(KEY)
    with pytest.raises(gcmstream.UnsupportedFormatError):
        keyed.receive_data(wire[:HEADER_FIXED_SIZE])
        keyed.read()
    for keying in ({"identities": [Identity.generate(RecipientKind.X25519)]}, {"passphrase": "pw"}):
        opener = Opener(**keying)
        opener.receive_data(wire[:HEADER_FIXED_SIZE])
        assert opener.read() is None  # H7 passed: it waits for the fields
        opener.receive_data(wire[HEADER_FIXED_SIZE:])
        with pytest.raises(NoIdentityMatchedError):
            opener.read()


# -- 4.5: identity and recipients files -------------------------------------------------------


def test_an_identity_file_over_8192_characters_is_refused_not_cut(tmp_path: Path) -> None:
    """FORMAT.md 4.5: an identity file of more than 8,192 characters is refused
    (RecipientError), as a recipients file over its limit is; it is never cut, which would let
    a second identity line past the cut go unseen. 8,192 characters are read."""
    first, second = (Identity.generate(RecipientKind.X25519) for _ in range(2))
    path = tmp_path / "identity"
    head = f"{first.to_text()}\n"
    padding = "#" * (8192 - len(head) - 1) + "\n"
    path.write_text(head + padding, encoding="ascii")  # exactly 8,192 characters
    assert gcmstream.recipients.read_identity_file(path).to_text() == first.to_text()
    path.write_text(head + padding + f"{second.to_text()}\n", encoding="ascii")
    with pytest.raises(gcmstream.RecipientError, match="8192"):
        gcmstream.recipients.read_identity_file(path)


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("# c\r\n{identity}\r\n", True),  # CR LF
        ("# c\r{identity}\r", True),  # CR alone
        ("\t {identity} \t\n\n", True),  # surrounding whitespace, empty lines
        ("\ufeff# c\n{identity}\n", False),  # a byte order mark is no whitespace: a second line
        ("\ufeff{identity}\n", False),
        ("# c\n{identity}\n{identity}\n", False),  # two identity lines
        ("# only a comment\n", False),
    ],
)
def test_how_an_identity_file_is_split_and_stripped(tmp_path: Path, text: str, accepted: bool) -> None:
    """FORMAT.md 4.5: UTF-8, lines split at LF, CR LF or CR, each stripped of whitespace,
    empty and '#' lines skipped, exactly one line left; a BOM is not skipped."""
    identity = Identity.generate(RecipientKind.X25519)
    path = tmp_path / "identity"
    path.write_bytes(text.format(identity=identity.to_text()).encode("utf-8"))
    if accepted:
        assert gcmstream.recipients.read_identity_file(path).to_text() == identity.to_text()
    else:
        with pytest.raises(gcmstream.RecipientError):
            gcmstream.recipients.read_identity_file(path)


def test_a_passphrase_is_its_utf8_bytes_without_normalisation() -> None:
    """FORMAT.md 4.4: a str passphrase is its UTF-8 bytes, not normalised: the NFC form opens
    (as do its UTF-8 bytes), the NFD form of the same text does not."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    wire = bytes(Sealer(passphrase=nfc, work_factor=10, record_size=64).seal(b"secret", final=True))
    for same in (nfc, nfc.encode("utf-8")):
        opener = Opener(passphrase=same)
        opener.receive_data(wire)
        opener.receive_eof()
        assert opener.read() == b"secret"
    opener = Opener(passphrase=nfd)
    opener.receive_data(wire)
    with pytest.raises(NoIdentityMatchedError):
        opener.read()


# -- 11: how the recipient vectors are written --------------------------------------------------


def test_the_recipient_vectors_generator_runs_and_matches_what_is_stored() -> None:
    """FORMAT.md 11: tests/vectors/generate_recipients.py still writes the stored vectors'
    reproducible parts (the passphrase vector byte for byte, the invalid vectors' names),
    though two valid ones mix stanza kinds, which gcmstream's writer refuses: their stanzas
    are made one wrap at a time, as another tool would."""
    from .vectors import generate_recipients

    stored = json.loads(generate_recipients.OUT.read_text())
    made = generate_recipients.generate()

    def passphrase_vectors(data: dict[str, Any]) -> list[Any]:
        return [v for v in data["valid"] if "passphrase" in v]

    assert passphrase_vectors(made) == passphrase_vectors(stored)
    assert [v["name"] for v in made["invalid"]] == [v["name"] for v in stored["invalid"]]
    kinds = {i["kind"] for v in made["valid"] if "identities" in v for i in v["identities"]}
    assert kinds == {"x25519", "mlkem768x25519"}


def test_the_fixed_layout_vector_is_read_by_arithmetic(tmp_path: Path) -> None:
    """FORMAT.md 4.3 and 11: valid.json's aes128-fixed-layout opens at random access with the
    layout used (no walk), and every 1-byte read at any offset gives the plaintext's byte."""
    vectors = json.loads((Path(__file__).parent / "vectors" / "valid.json").read_text())
    (vector,) = [v for v in vectors if v["name"] == "aes128-fixed-layout"]
    wire, plaintext = bytes.fromhex(vector["ciphertext"]), bytes.fromhex(vector["plaintext"])
    assert struct.unpack_from(">H", wire, HEADER_FIXED_SIZE - 2) == (8,)
    path = tmp_path / "vector"
    path.write_bytes(wire)
    with gcmstream.open_file(path, key=bytes.fromhex(vector["key"])) as file:
        assert file.fixed_layout and file.records == 7
        for offset in reversed(range(len(plaintext))):
            file.seek(offset)
            assert file.read(1) == plaintext[offset : offset + 1]
