"""The header's parts (gcmstream.header): HeaderSpec, what a Sealer's header carries, and
HeaderReader, what an Opener reads a peer's header with; and the seams built on them (the
Opener's ``header_reader``, ``Sealer.unkeyed``, ``Opener.abandon_header``)."""

from __future__ import annotations

import copy
import gc
import os
import pickle
import weakref
from collections.abc import Callable

import pytest

from gcmstream import (
    Channel,
    HandshakeError,
    KeyCommitmentError,
    NotReadyError,
    Opener,
    OutOfRangeError,
    ProtocolError,
    Role,
    Sealer,
    StreamBrokenError,
    Suite,
    TruncatedStreamError,
    recipients,
)
from gcmstream.format import (
    HEADER_FIXED_SIZE,
    MAGIC,
    MAX_CONTEXT_SIZE,
    MAX_FIELDS_SIZE,
    MAX_STANZA_FIELDS_SIZE,
    SALT_SLICE,
    FieldType,
    make_header,
    parse_header,
)
from gcmstream.header import HeaderReader, HeaderSpec
from gcmstream.opener import Phase
from gcmstream.recipients import Identity, RecipientKind

from .helpers import KEY, SALT


def sealed(spec: HeaderSpec | None = None, plaintext: bytes = b"the plaintext") -> bytes:
    sealer = Sealer(KEY, context=b"ctx", record_size=64, header_spec=spec)
    return bytes(sealer.seal(plaintext, final=True))


def test_a_header_spec_salt_repeats_the_stream_and_the_default_never_does() -> None:
    """The known-answer seam: a fixed salt gives the same bytes every time (what the vectors
    need); without it each header draws a fresh salt."""
    assert sealed(HeaderSpec(salt=SALT)) == sealed(HeaderSpec(salt=SALT))
    assert sealed(HeaderSpec(salt=SALT))[SALT_SLICE] == SALT
    assert sealed()[SALT_SLICE] != sealed()[SALT_SLICE]


def test_a_header_spec_adds_its_fields_and_the_opener_reads_past_them() -> None:
    value = b"\x00\x00\x00\x07"
    wire = sealed(HeaderSpec(fields=((FieldType.FIXED_LAYOUT, value),)))
    size = HEADER_FIXED_SIZE + int.from_bytes(wire[HEADER_FIXED_SIZE - 2 : HEADER_FIXED_SIZE], "big") + 32
    header = parse_header(wire[:size], known_fields=(FieldType.FIXED_LAYOUT,))
    assert header.field(FieldType.FIXED_LAYOUT) == value
    opener = Opener(KEY, context=b"ctx")
    opener.receive_data(wire)
    assert opener.read() == b"the plaintext"


def test_a_header_spec_random_bytes_makes_the_file_key_of_a_passphrase_stream() -> None:
    drawn: list[int] = []

    def fixed(size: int) -> bytes:
        drawn.append(size)
        return bytes(size)

    def seal() -> bytes:
        spec = HeaderSpec(salt=SALT, random_bytes=fixed)
        sealer = Sealer(passphrase="pass", work_factor=10, record_size=64, header_spec=spec)
        return bytes(sealer.seal(b"x", final=True))

    assert seal() == seal()
    assert drawn == [32, 16] * 2  # the file key, then the scrypt salt, per stream
    opener = Opener(passphrase="pass")
    opener.receive_data(seal())
    assert opener.read() == b"x"


def test_an_opener_reads_through_the_header_reader_it_is_given() -> None:
    reader = HeaderReader(KEY, context=b"ctx")
    opener = Opener(header_reader=reader)
    opener.receive_data(sealed())
    assert opener.read() == b"the plaintext" and opener.header is reader.header is not None
    # the reader carries the keys and the context: the Opener refuses them beside it
    with pytest.raises(TypeError, match="header_reader"):
        Opener(KEY, header_reader=HeaderReader(KEY))
    with pytest.raises(TypeError, match="header_reader"):
        Opener(context=b"ctx", header_reader=HeaderReader(KEY))
    with pytest.raises(TypeError, match="exactly one"):
        HeaderReader()
    with pytest.raises(ValueError, match="one-way"):
        HeaderReader(passphrase="pass", role=Role.RESPONDER)


def test_a_header_reader_checks_the_role_it_was_given() -> None:
    opener = Opener(header_reader=HeaderReader(KEY, context=b"ctx", role=Role.INITIATOR))
    opener.receive_data(sealed())
    with pytest.raises(ProtocolError, match="role ONE_WAY, expected INITIATOR") as refused:
        opener.read()
    assert refused.value.rule == "H9"


def test_an_unkeyed_sealer_waits_for_its_secret() -> None:
    sealer = Sealer.unkeyed(Suite.AES_128_GCM, record_size=64)
    assert not sealer.ready and sealer.header == b"" and sealer.suite is Suite.AES_128_GCM
    with pytest.raises(NotReadyError):
        sealer.seal(b"early")
    sealer.install_secret(bytes(32))
    assert bytes(sealer.seal(b"now", flush=True))[:1] == b"\x00"  # a record, no header first


def test_abandon_header_fails_an_opener_still_reading_its_header() -> None:
    opener = Opener(KEY, context=b"ctx")
    opener.receive_data(sealed()[:10])
    opener.abandon_header(HandshakeError("given up"))
    assert opener.failed and not opener.wants_data
    with pytest.raises(HandshakeError, match="given up"):
        opener.read()
    assert opener.phase is Phase.FAILED
    # once the header verified, it changes nothing
    done = Opener(KEY, context=b"ctx")
    done.receive_data(sealed())
    assert done.read(4) == b"the "
    done.abandon_header(HandshakeError("too late"))
    assert not done.failed and done.read() == b"plaintext"


def _failing_handshake(how: str) -> Channel:
    """A responder whose handshake fails at its next ``handshake_complete()``."""
    channel = Channel(KEY, role=Role.RESPONDER)
    initiator = Channel(KEY, role=Role.INITIATOR)
    hello = bytearray(initiator.initial_data())
    if how == "commitment":
        hello[-1] ^= 1
    channel.opener.receive_data(bytes(hello[:-5] if how == "eof" else hello))
    if how == "eof":
        channel.opener.receive_eof()
    elif how == "finished":
        initiator.opener.receive_data(channel.data_to_send())
        channel.opener.receive_data(bytes(32))  # a forged Finished
    elif how == "ended":
        channel.end_handshake()  # from outside: a timeout, a cancellation
    return channel


HOW = ["eof", "commitment", "finished", "ended"]
EXPECTED: dict[str, type[ProtocolError]] = {
    "eof": TruncatedStreamError,
    "commitment": KeyCommitmentError,
    "finished": HandshakeError,
    "ended": HandshakeError,
}


@pytest.mark.parametrize("how", HOW)
def test_a_failed_handshake_keeps_a_copy_of_its_error_without_frames(how: str) -> None:
    """The caller's error keeps its traceback; the opener keeps an equal error without one."""
    channel = _failing_handshake(how)
    with pytest.raises(EXPECTED[how]) as caught:
        channel.handshake_complete()
    assert caught.value.__traceback__ is not None
    with pytest.raises(StreamBrokenError) as again:
        channel.opener.read()
    kept = again.value.original
    assert kept is not caught.value and type(kept) is type(caught.value) and str(kept) == str(caught.value)
    assert kept.__traceback__ is None and kept.__dict__ == caught.value.__dict__


@pytest.mark.parametrize("how", HOW)
def test_a_failed_channel_is_in_no_reference_cycle(how: str) -> None:
    """With the cyclic GC off, the failed channel, its opener and its header reader go when
    the last reference goes: the error raised to the caller went through handshake_complete's
    frame, which holds the channel, so the opener must not keep that error."""
    gc.collect()
    gc.disable()
    try:
        channel = _failing_handshake(how)
        with pytest.raises(EXPECTED[how]):  # (no ExceptionInfo kept: it goes with the block)
            channel.handshake_complete()
        refs: list[Callable[[], object]] = [
            weakref.ref(channel),
            weakref.ref(channel.opener),
            weakref.ref(channel._handshake),
        ]
        del channel
        assert [ref() for ref in refs] == [None, None, None]
    finally:
        gc.enable()


def test_errors_copy_and_pickle_as_equal_errors() -> None:
    """What abandon_header keeps is copy.copy of the error: the classes whose constructor
    takes other arguments than their message rebuild from those."""
    from gcmstream.errors import AuthenticationError, MalformedRecordError, RecordTooLargeError

    errors: list[BaseException] = [
        AuthenticationError(3),
        RecordTooLargeError("announced record size", 70_000, 65_536),
        MalformedRecordError("bad flags", record_number=5),
        StreamBrokenError(TruncatedStreamError("cut")),
        KeyCommitmentError("wrong key"),
    ]
    errors[-1].rule = "S8"  # type: ignore[attr-defined]
    for error in errors:
        for rebuilt in (copy.copy(error), pickle.loads(pickle.dumps(error))):
            assert type(rebuilt) is type(error) and str(rebuilt) == str(error)
            assert rebuilt.args == error.args
            shown = {name: str(value) for name, value in vars(error).items()}
            assert {name: str(value) for name, value in vars(rebuilt).items()} == shown


# -- mutation run over header.py (issue 23; docs/mutation-2026-12-04.md) ------------------------


def test_a_one_way_stream_naming_a_key_not_held_is_refused_at_its_fixed_part() -> None:
    """The key ID is checked as soon as the fixed part is whole (H10): a one-way reader has no
    prober to hide from (only a channel's waits for the whole header), so it reads no more."""
    opener = Opener(bytes(range(1, 17)), context=b"ctx")
    opener.receive_data(sealed()[:HEADER_FIXED_SIZE])
    assert opener.failed and not opener.wants_data
    with pytest.raises(KeyCommitmentError) as refused:
        opener.read()
    assert refused.value.rule == "H10"


def test_a_header_readers_truncation_messages_in_full() -> None:
    opener = Opener(KEY, context=b"ctx")
    opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as before:
        opener.read()
    assert str(before.value) == "input ended before the stream header"
    channel = Channel(KEY, role=Role.RESPONDER)
    hello = Channel(KEY, role=Role.INITIATOR).initial_data()
    channel.opener.receive_data(hello[:-5])
    channel.opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as during:
        channel.handshake_complete()
    assert str(during.value) == (
        f"the peer cut the connection during the handshake ({len(hello) - 5} bytes received)"
    )
    # after its whole header this end answered: the initiator hangs up there when it refuses
    # the answer; no longer "a peer with another key or context" (one never gets this far)
    answered = Channel(KEY, role=Role.RESPONDER)
    answered.opener.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data())
    assert answered.data_to_send()
    answered.opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as after:
        answered.handshake_complete()
    assert str(after.value) == (
        f"the peer cut the connection during the handshake ({len(hello)} bytes received, after "
        "this end's answer: the peer refused the answer (it expects another identity or key "
        "exchange) or the connection was lost)"
    )


def test_a_stanza_holding_another_file_key_than_the_header_names_is_damage() -> None:
    """The identity opens the stanza, but the file key in it is not the one the key ID names:
    the header was altered (S8, the CLI's exit 4), not sealed for someone else."""
    identity = Identity.generate(RecipientKind.X25519)
    fields = recipients.seal_stanzas(os.urandom(32), recipients=[identity.recipient])
    header, _ = make_header(
        os.urandom(32), Role.ONE_WAY, 1024, b"", fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )
    opener = Opener(header_reader=HeaderReader(identities=[identity]))
    opener.receive_data(header)
    with pytest.raises(KeyCommitmentError) as refused:
        opener.read()
    assert str(refused.value) == (
        "the file key a stanza holds is not the one the header names (altered header)"
    )
    assert refused.value.rule == "S8"


def test_a_reader_of_stanzas_takes_its_suite_from_the_header() -> None:
    sealer = Sealer(passphrase="pass", work_factor=10, record_size=64)
    reader = HeaderReader(passphrase="pass")
    opener = Opener(header_reader=reader)
    opener.receive_data(bytes(sealer.seal(b"x", final=True)))
    assert opener.read() == b"x"
    assert reader.suite is opener.suite is Suite.AES_256_GCM


def test_a_role_refusal_says_reflected_only_for_the_readers_own_role() -> None:
    opener = Opener(header_reader=HeaderReader(KEY, context=b"ctx", role=Role.INITIATOR))
    opener.receive_data(sealed())
    with pytest.raises(ProtocolError) as one_way:
        opener.read()
    assert str(one_way.value) == "peer header has role ONE_WAY, expected INITIATOR"
    # an initiator's own header sent back: what its reader expects is the RESPONDER's
    reflected = Opener(header_reader=HeaderReader(KEY, role=Role.RESPONDER))
    reflected.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data())
    with pytest.raises(ProtocolError) as back:
        reflected.read()
    assert str(back.value) == (
        "peer header has role INITIATOR, expected RESPONDER (a stream reflected back to its sender?)"
    )
    assert one_way.value.rule == back.value.rule == "H9"


def test_a_key_given_for_a_long_header_of_stanzas_is_the_wrong_key_not_a_long_header() -> None:
    """Fields longer than a key's reader allows (H7) are refused only after the key ID (H10):
    the fixed part of a file sealed to many recipients, read with a key, names the wrong key."""
    fields = ((FieldType.FIXED_LAYOUT, bytes(MAX_FIELDS_SIZE)),)
    header, _ = make_header(
        os.urandom(32), Role.ONE_WAY, 1024, b"", fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )
    opener = Opener(KEY)
    opener.receive_data(header[:HEADER_FIXED_SIZE])
    with pytest.raises(KeyCommitmentError) as refused:
        opener.read()
    assert refused.value.rule == "H10"


def test_a_header_reader_checks_and_copies_its_context_when_made() -> None:
    """A bad context is refused by the constructor, not at the first header; a bytearray
    changed afterwards does not change the context the header is verified under."""
    with pytest.raises(TypeError, match="context must be bytes-like, not str"):
        HeaderReader(KEY, context="ctx")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"exceeds {MAX_CONTEXT_SIZE} bytes"):
        HeaderReader(KEY, context=bytes(MAX_CONTEXT_SIZE + 1))
    context = bytearray(b"ctx")
    opener = Opener(header_reader=HeaderReader(KEY, context=context))
    context[:] = b"xyz"
    opener.receive_data(sealed())
    assert opener.read() == b"the plaintext"


def test_a_header_reader_takes_a_commit_of_nothing() -> None:
    """``commit(0)`` (a read that got nothing) is no error and changes nothing; past the view,
    or negative, is."""
    wire = sealed()
    reader = HeaderReader(KEY, context=b"ctx")
    secret = None
    for chunk in (wire[:10], b"", wire[10:HEADER_FIXED_SIZE], b"", wire[HEADER_FIXED_SIZE:]):
        view = reader.writable()
        view[: len(chunk)] = chunk[: len(view)]
        assert reader.commit(0, 1 << 16) is None and reader.missing == len(view)
        secret = reader.commit(min(len(chunk), len(view)), 1 << 16)
        del view
    assert secret is not None and reader.header is not None
    with pytest.raises(OutOfRangeError):
        HeaderReader(KEY).commit(-1, 1 << 16)


def test_a_channel_naming_a_key_not_held_is_refused_only_with_its_whole_header() -> None:
    """A channel's reader hides which key IDs it holds from a keyless prober: an unknown key ID
    is refused after the whole header, as a wrong commitment is (SECURITY.md)."""
    channel = Channel(KEY, role=Role.RESPONDER)
    hello = Channel(bytes(range(1, 17)), role=Role.INITIATOR).initial_data()
    channel.opener.receive_data(hello[:HEADER_FIXED_SIZE])
    assert not channel.opener.failed and channel.opener.header_missing == len(hello) - HEADER_FIXED_SIZE
    channel.opener.receive_data(hello[HEADER_FIXED_SIZE:])
    with pytest.raises(KeyCommitmentError) as refused:
        channel.handshake_complete()
    assert refused.value.rule == "H10"


def test_a_header_reader_is_keyed_by_exactly_one_thing_and_says_so() -> None:
    identity = Identity.generate(RecipientKind.X25519)
    for keying in (
        {},
        {"key": KEY, "identities": [identity]},
        {"key": KEY, "passphrase": "pass"},
        {"identities": [identity], "passphrase": "pass"},
        {"key": KEY, "identities": [identity], "passphrase": "pass"},
    ):
        with pytest.raises(TypeError) as refused:
            HeaderReader(**keying)  # type: ignore[arg-type]
        assert str(refused.value) == "a header reader takes exactly one of key, identities or passphrase"
    with pytest.raises(ValueError, match="one-way") as channel:
        HeaderReader(identities=[identity], role=Role.INITIATOR)
    assert str(channel.value) == "identities and passphrases are for one-way streams"


def test_a_header_readers_context_is_empty_unless_given() -> None:
    stream = bytes(Sealer(KEY, record_size=64).seal(b"no context", final=True))
    opener = Opener(header_reader=HeaderReader(KEY))
    opener.receive_data(stream)
    assert opener.read() == b"no context"


def test_a_key_readers_suite_is_its_keys() -> None:
    reader = HeaderReader(KEY, context=b"ctx")
    assert reader.suite is Suite.AES_128_GCM
    opener = Opener(header_reader=reader)
    opener.receive_data(sealed())
    assert opener.read() == b"the plaintext" and opener.suite is Suite.AES_128_GCM


def test_a_key_reader_does_not_know_the_stanza_fields() -> None:
    """Stanza field types are known only to a reader of stanzas: under a key's valid commitment
    a stanza field is a critical field this reader does not know (H14)."""
    header, _ = make_header(KEY, Role.ONE_WAY, 1024, b"", fields=((FieldType.PASSPHRASE_STANZA, b"stanza"),))
    opener = Opener(KEY)
    opener.receive_data(header)
    with pytest.raises(ProtocolError) as refused:
        opener.read()
    assert refused.value.rule == "H14"


def test_a_wrong_version_is_refused_by_its_byte_when_fed_one_byte_at_a_time() -> None:
    """The version byte is checked as it arrives (H2), also when the magic before it came alone."""
    opener = Opener(KEY)
    for byte in MAGIC:
        opener.receive_data(bytes([byte]))
    before_version = opener.failed
    opener.receive_data(b"\x07")
    assert (before_version, opener.failed) == (False, True)
    with pytest.raises(ProtocolError) as refused:
        opener.read()
    assert refused.value.rule == "H2"


def test_a_reader_of_stanzas_takes_a_header_longer_than_a_keys() -> None:
    """Stanzas need more room than a key's fields (docs/FORMAT.md 4.4): four hybrid recipients
    make fields longer than MAX_FIELDS_SIZE, which a reader of stanzas accepts."""
    identities = [Identity.generate() for _ in range(4)]
    sealer = Sealer(recipients=[identity.recipient for identity in identities], record_size=64)
    wire = bytes(sealer.seal(b"to four", final=True))
    fields_length = int.from_bytes(wire[HEADER_FIXED_SIZE - 2 : HEADER_FIXED_SIZE], "big")
    assert fields_length > MAX_FIELDS_SIZE
    opener = Opener(header_reader=HeaderReader(identities=identities[-1:]))
    opener.receive_data(wire)
    assert opener.read() == b"to four"
