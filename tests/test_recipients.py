"""gcmstream.recipients, through Sealer/Opener: identities and recipients (text forms, files),
streams sealed to several recipients or a passphrase, and every refusal (docs/FORMAT.md 4.4)."""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gcmstream import (
    Identity,
    KeyCommitmentError,
    NoIdentityMatchedError,
    Opener,
    Recipient,
    RecipientError,
    RecipientKind,
    Sealer,
    StanzaError,
    StreamBrokenError,
    UnknownKeyError,
    WorkFactorError,
    generate_key,
    open_file,
    read_identity_file,
    read_recipients_file,
    write_identity_file,
)
from gcmstream import recipients as recipients_module
from gcmstream.format import HEADER_FIXED_SIZE, MAX_STANZA_FIELDS_SIZE, FieldType, Suite

from .helpers import run_under_ascii_locale

PLAINTEXT = os.urandom(3000)


def seal(**keying: object) -> bytes:
    sealer = Sealer(record_size=1024, **keying)  # type: ignore[arg-type]
    return bytes(sealer.seal(PLAINTEXT, final=True))


def open_stream(wire: bytes, **keying: object) -> bytes:
    opener = Opener(**keying)  # type: ignore[arg-type]
    opener.receive_data(wire)
    opener.receive_eof()
    out = bytearray()
    while (chunk := opener.read()) is not None and chunk:
        out += chunk
    return bytes(out)


def refused(wire: bytes, error: type[Exception], **keying: object) -> Exception:
    """The error reading ``wire`` raises, after checking that no record was opened, no
    plaintext came out, and the opener stays failed."""
    opener = Opener(**keying)  # type: ignore[arg-type]
    opener.receive_data(wire)
    with pytest.raises(error) as caught:
        opener.read()
    assert opener.records_opened == 0 and opener.header is None
    with pytest.raises(StreamBrokenError):
        opener.read()
    return caught.value


@pytest.fixture(scope="module")
def three() -> list[Identity]:
    return [Identity.generate(), Identity.generate(), Identity.generate()]


@pytest.mark.parametrize(
    ("given", "sealed_to", "says"),
    [
        (1, 1, "the 1 identity given does not open the stream's 1 recipient stanza: "),
        (1, 2, "the 1 identity given opens none of the stream's 2 recipient stanzas: "),
        (2, 1, "none of the 2 identities given opens the stream's 1 recipient stanza: "),
        (3, 2, "none of the 3 identities given opens any of the stream's 2 recipient stanzas: "),
    ],
)
def test_an_unmatched_identity_is_counted_in_words_that_agree(given: int, sealed_to: int, says: str) -> None:
    """A new user's finding: "none of the 1 identities given opens any of the stream's 1
    recipient stanzas". Singular and plural agree with each count."""
    wire = seal(recipients=[Identity.generate().recipient for _ in range(sealed_to)])
    error = refused(wire, NoIdentityMatchedError, identities=[Identity.generate() for _ in range(given)])
    assert says in str(error), str(error)


def test_three_recipients_each_decrypt_alone(three: list[Identity]) -> None:
    wire = seal(recipients=[identity.recipient for identity in three])
    for identity in three:
        assert open_stream(wire, identities=[identity]) == PLAINTEXT
    assert open_stream(wire, identities=[Identity.generate(), three[2]]) == PLAINTEXT


def test_none_of_the_others_keys_opens_a_recipient_stream(three: list[Identity]) -> None:
    wire = seal(recipients=[identity.recipient for identity in three[:2]])
    strangers = [three[2], Identity.generate(), Identity.generate(RecipientKind.X25519)]
    error = refused(wire, NoIdentityMatchedError, identities=strangers)
    assert "none of the 3 identities given" in str(error) and "2 recipient stanzas" in str(error)
    # a pre-shared key reader meets a random file key it cannot know
    refused(wire, UnknownKeyError, key=generate_key(256))
    refused(wire, NoIdentityMatchedError, passphrase="guess")


def test_passphrase_stream_opens_with_the_passphrase_only() -> None:
    wire = seal(passphrase="correct horse", work_factor=10)
    assert open_stream(wire, passphrase="correct horse") == PLAINTEXT
    assert open_stream(wire, passphrase=b"correct horse") == PLAINTEXT
    error = refused(wire, NoIdentityMatchedError, passphrase="correct horse!")
    assert "correct horse" not in str(error) and "passphrase" in str(error)
    refused(wire, NoIdentityMatchedError, identities=[Identity.generate()])


def test_a_key_stream_is_not_opened_by_identities() -> None:
    wire = bytes(Sealer(generate_key()).seal(b"x", final=True))
    error = refused(wire, NoIdentityMatchedError, identities=[Identity.generate()])
    assert "key" in str(error)


def test_recipient_stream_keys_aes_256_gcm_from_a_fresh_file_key(three: list[Identity]) -> None:
    first = Sealer(recipients=[three[0].recipient])
    second = Sealer(recipients=[three[0].recipient])
    assert first.suite.name == "AES_256_GCM"
    assert first.header[: HEADER_FIXED_SIZE - 34] != second.header[: HEADER_FIXED_SIZE - 34]  # key IDs


def test_exactly_one_way_of_keying() -> None:
    recipient = Identity.generate(RecipientKind.X25519).recipient
    with pytest.raises(TypeError):
        Sealer()
    with pytest.raises(TypeError):
        Sealer(generate_key(), recipients=[recipient])
    with pytest.raises(TypeError):
        Sealer(recipients=[recipient], passphrase="x")
    with pytest.raises(TypeError):
        Opener()
    with pytest.raises(TypeError):
        Opener(identities=[Identity.generate()], passphrase="x")
    with pytest.raises(ValueError, match="one or more"):
        Sealer(recipients=[])
    with pytest.raises(ValueError, match="non-empty"):
        Sealer(passphrase="")
    with pytest.raises(ValueError, match="at most 10"):
        Opener(identities=[Identity.generate(RecipientKind.X25519) for _ in range(11)])


def test_text_forms_round_trip_and_say_what_they_are() -> None:
    for kind in RecipientKind:
        identity = Identity.generate(kind)
        line = str(identity.recipient)
        assert line.startswith(f"gcmstream-recipient-v1:{kind.text}:")
        assert Recipient.parse(line) == identity.recipient
        secret = identity.to_text()
        assert secret.startswith(f"gcmstream-identity-v1:{kind.text}:")
        assert Identity.parse(secret).recipient == identity.recipient
        assert "\n" not in line + secret


@pytest.mark.parametrize("position", [40, 500, -6, -1])
def test_a_typo_in_a_recipient_is_caught_by_its_checksum(position: int) -> None:
    chars = list(str(Identity.generate().recipient))
    chars[position] = "B" if chars[position] != "B" else "C"
    with pytest.raises(RecipientError, match="checksum"):
        Recipient.parse("".join(chars))


def test_recipient_and_identity_errors_never_show_the_line() -> None:
    identity = Identity.generate(RecipientKind.X25519)
    secret = identity.to_text()
    payload = secret.split(":")[2]
    for text in (secret, secret[:-2], secret.replace("-v1", "-v9"), secret.replace("x25519", "rsa")):
        with pytest.raises(RecipientError) as caught:
            Recipient.parse(text)
        assert payload[:8] not in str(caught.value)
    with pytest.raises(RecipientError, match="identity line"):
        Recipient.parse(secret)
    with pytest.raises(RecipientError, match="recipient line"):
        Identity.parse(str(identity.recipient))


def test_no_secret_in_repr() -> None:
    identity = Identity.generate()
    payload = identity.to_text().split(":")[2]
    shown = repr(identity) + str(identity) + repr(identity.recipient)
    assert payload[:12] not in shown and identity.recipient.tag.hex() in repr(identity)
    unlocker = recipients_module.Unlocker(passphrase="hunter2")
    assert "hunter2" not in repr(unlocker)
    opener = Opener(passphrase="hunter2")
    assert "hunter2" not in repr(opener)


def test_an_opener_of_stanzas_names_the_suite_the_header_gives() -> None:
    """An Opener holding identities learns the suite from the header it unlocks: its ``suite``
    and repr show it once the header is read."""
    identity = Identity.generate(RecipientKind.X25519)
    opener = Opener(identities=[identity])
    opener.receive_data(seal(recipients=[identity.recipient]))
    assert opener.read() == PLAINTEXT
    assert opener.suite is Suite.AES_256_GCM
    assert "AES_256_GCM" in repr(opener)


def test_identity_file_is_private_and_round_trips(tmp_path: Path) -> None:
    identity = Identity.generate()
    path = tmp_path / "me.identity"
    write_identity_file(path, identity)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_identity_file(path).recipient == identity.recipient
    assert f"# recipient: {identity.recipient}" in path.read_text()
    with pytest.raises(FileExistsError):
        write_identity_file(path, Identity.generate())
    other = Identity.generate(RecipientKind.X25519)
    write_identity_file(path, other, force=True)
    assert read_identity_file(path).recipient == other.recipient


def test_recipients_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    people = [Identity.generate().recipient, Identity.generate(RecipientKind.X25519).recipient]
    path = tmp_path / "team.txt"
    path.write_text(f"# the team\n\n{people[0]}\n  {people[1]}  \n# end\n")
    assert read_recipients_file(path) == people
    path.write_text("# nobody\n")
    with pytest.raises(RecipientError):
        read_recipients_file(path)


def test_stanzas_are_anonymous_unless_the_writer_opts_in(three: list[Identity]) -> None:
    people = [identity.recipient for identity in three]
    anonymous = Sealer(recipients=people).header
    tagged = Sealer(recipients=people, tag_recipients=True).header
    for recipient in people:
        assert recipient.tag not in anonymous and recipient.public_bytes[:32] not in anonymous
        assert recipient.tag in tagged
    assert len(tagged) == len(anonymous) + 8 * len(people)


def test_a_tagged_stanza_is_tried_only_by_its_identity(
    three: list[Identity], monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = seal(recipients=[identity.recipient for identity in three], tag_recipients=True)
    tries: list[Identity] = []
    unwrap = Identity.unwrap

    def counted(self: Identity, body: bytes) -> bytes | None:
        tries.append(self)
        return unwrap(self, body)

    monkeypatch.setattr(Identity, "unwrap", counted)
    assert open_stream(wire, identities=[Identity.generate(), three[1]]) == PLAINTEXT
    assert tries == [three[1]]
    tries.clear()
    anonymous = seal(recipients=[identity.recipient for identity in three])
    assert open_stream(anonymous, identities=[three[1]]) == PLAINTEXT
    assert tries == [three[1], three[1]]  # the first hybrid stanza, then its own


def test_trial_opens_are_bounded_by_stanzas_times_identities(monkeypatch: pytest.MonkeyPatch) -> None:
    people = [Identity.generate(RecipientKind.X25519).recipient for _ in range(recipients_module.MAX_STANZAS)]
    wire = seal(recipients=people)
    tries = []
    unwrap = Identity.unwrap

    def counted(self: Identity, body: bytes) -> bytes | None:
        tries.append(1)
        return unwrap(self, body)

    monkeypatch.setattr(Identity, "unwrap", counted)
    strangers = [Identity.generate(RecipientKind.X25519) for _ in range(recipients_module.MAX_IDENTITIES)]
    refused(wire, NoIdentityMatchedError, identities=strangers)
    assert len(tries) == recipients_module.MAX_STANZAS * recipients_module.MAX_IDENTITIES == 1000
    with pytest.raises(ValueError, match="at most 100"):
        Sealer(recipients=[*people, Identity.generate(RecipientKind.X25519).recipient])


def test_check_recipients_counts_the_header_before_anything_is_sealed() -> None:
    """The early check (the CLI's, before any key is made) agrees with what sealing measures:
    55 hybrid recipients fit, 56 take 65,638 bytes and are refused with that figure."""
    people = [Identity.generate().recipient for _ in range(56)]
    assert recipients_module.check_recipients(people[:55]) == people[:55]
    with pytest.raises(RecipientError) as info:
        recipients_module.check_recipients(people)
    assert str(info.value).startswith("56 mlkem768x25519 recipients take 65638 bytes of header, over")


def test_the_largest_header_fits_the_fields_bound() -> None:
    # 55 hybrid stanzas fit the 16-bit fields length; 56 do not, and the writer says so
    people = [Identity.generate().recipient for _ in range(56)]
    header = Sealer(recipients=people[:55]).header
    (fields_length,) = struct.unpack_from(">H", header, HEADER_FIXED_SIZE - 2)
    assert fields_length <= MAX_STANZA_FIELDS_SIZE
    with pytest.raises(ValueError, match="at most 55 hybrid"):
        Sealer(recipients=people)


def test_scrypt_parameters_over_the_ceiling_are_refused_before_scrypt_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wire = bytearray(seal(passphrase="pw", work_factor=10))
    stanza = wire.index(bytes([10, 8, 1]), HEADER_FIXED_SIZE)
    ran = []
    monkeypatch.setattr(recipients_module, "Scrypt", lambda **kw: ran.append(kw))
    for params in ([20, 8, 1], [19, 8, 2], [19, 9, 1], [10, 255, 255]):
        wire[stanza : stanza + 3] = bytes(params)
        error = refused(bytes(wire), WorkFactorError, passphrase="pw")
        assert "ceiling" in str(error)
    wire[stanza : stanza + 3] = bytes([0, 8, 1])
    refused(bytes(wire), StanzaError, passphrase="pw")
    assert ran == []
    for writer_asks in (20, 0):  # the writer's mistake is a ValueError, not the reader's error
        with pytest.raises(ValueError, match=f"work_factor {writer_asks}"):
            Sealer(passphrase="pw", work_factor=writer_asks)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ((1, 8, 1), None),  # the smallest N accepted
        ((1, 1, 1), None),  # r = 1 and p = 1 accepted (the format then fixes r = 8, p = 1)
        ((0, 8, 1), StanzaError),
        ((63, 8, 1), StanzaError),  # not a valid log2(N): invalid, not merely over the ceiling
        ((62, 1, 1), WorkFactorError),  # valid, over the ceiling
        ((10, 0, 1), StanzaError),
        ((10, 8, 0), StanzaError),
    ],
)
def test_scrypt_parameters_are_checked_at_their_bounds(
    params: tuple[int, int, int], error: type[Exception] | None
) -> None:
    if error is None:
        recipients_module._check_work_factor(*params)
    else:
        with pytest.raises(error) as info:
            recipients_module._check_work_factor(*params)
        assert type(info.value) is error


def test_scrypt_parameters_over_the_ceiling_name_the_memory_they_need() -> None:
    with pytest.raises(
        WorkFactorError,
        match=r"=20, r=8, p=1 need 1024 MiB and N\*r\*p=8388608: over the ceiling of 512 MiB and 4194304",
    ):
        recipients_module._check_work_factor(20, 8, 1)


def test_the_default_work_factor_is_under_the_ceiling() -> None:
    recipients_module._check_work_factor(recipients_module.DEFAULT_WORK_FACTOR, 8, 1)
    recipients_module._check_work_factor(19, 8, 1)  # the ceiling: 512 MiB


def test_a_passphrase_stanza_beside_another_is_refused_even_under_a_valid_commitment() -> None:
    # a writer holding the file key makes a header with both, correctly committed
    from gcmstream.format import FieldType, Role, make_header

    identity = Identity.generate(RecipientKind.X25519)
    file_key = os.urandom(32)
    fields = recipients_module.seal_stanzas(file_key, recipients=[identity.recipient])
    fields += recipients_module.seal_stanzas(file_key, passphrase="pw", work_factor=10)
    assert [kind for kind, _ in fields] == [FieldType.RECIPIENT_STANZAS, FieldType.PASSPHRASE_STANZA]
    header, _ = make_header(
        file_key, Role.ONE_WAY, 1024, b"", fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )
    refused(header, StanzaError, passphrase="pw")
    refused(header, StanzaError, identities=[identity])


def test_stanzas_cannot_be_added_dropped_or_swapped(three: list[Identity]) -> None:
    wire = seal(recipients=[identity.recipient for identity in three[:2]])
    (fields_length,) = struct.unpack_from(">H", wire, HEADER_FIXED_SIZE - 2)
    value = wire[HEADER_FIXED_SIZE + 4 : HEADER_FIXED_SIZE + fields_length]
    first_length = 4 + struct.unpack_from(">H", value, 4)[0]
    first, second = value[2 : 2 + first_length], value[2 + first_length :]
    extra = Sealer(recipients=[three[2].recipient]).header[HEADER_FIXED_SIZE + 6 : -32]

    def with_stanzas(*stanzas: bytes) -> bytes:
        new = struct.pack(">H", len(stanzas)) + b"".join(stanzas)
        fields = struct.pack(">HH", 0x0010, len(new)) + new
        rest = wire[HEADER_FIXED_SIZE + fields_length :]
        return wire[: HEADER_FIXED_SIZE - 2] + struct.pack(">H", len(fields)) + fields + rest

    assert open_stream(with_stanzas(first, second), identities=[three[0]]) == PLAINTEXT
    for changed in (with_stanzas(first, second, extra), with_stanzas(first), with_stanzas(second, first)):
        refused(changed, KeyCommitmentError, identities=[three[0]])
    refused(with_stanzas(second), NoIdentityMatchedError, identities=[three[0]])


@pytest.mark.slow  # 4 s
def test_pipelines_pass_recipients_identities_and_passphrases_through(
    tmp_path: Path, three: list[Identity]
) -> None:
    import anyio

    from gcmstream import decrypt_file, decrypt_iter, encrypt_file, encrypt_iter

    plain = tmp_path / "plain"
    plain.write_bytes(PLAINTEXT)
    encrypt_file(plain, tmp_path / "sealed", recipients=[three[0].recipient, three[2].recipient])
    decrypt_file(tmp_path / "sealed", tmp_path / "opened", identities=[three[2]])
    assert (tmp_path / "opened").read_bytes() == PLAINTEXT
    with pytest.raises(NoIdentityMatchedError):
        decrypt_file(tmp_path / "sealed", tmp_path / "not", identities=[three[1]])
    assert not (tmp_path / "not").exists()

    async def round_trip() -> bytes:
        async def chunks() -> AsyncIterator[bytes]:
            yield PLAINTEXT

        sealed = [c async for c in encrypt_iter(chunks(), passphrase="pw")]

        async def replay() -> AsyncIterator[bytes]:
            for chunk in sealed:
                yield chunk

        return b"".join([c async for c in decrypt_iter(replay(), passphrase="pw")])

    assert anyio.run(round_trip) == PLAINTEXT  # scrypt at the default work factor, twice


def test_a_stanza_header_must_name_its_file_key_and_aes_256_gcm() -> None:
    from gcmstream.format import Role, make_header

    identity = Identity.generate(RecipientKind.X25519)

    def header(key: bytes, wrapped: bytes) -> bytes:
        fields = recipients_module.seal_stanzas(wrapped, recipients=[identity.recipient])
        made, _ = make_header(
            key, Role.ONE_WAY, 1024, b"", fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
        )
        return made

    short = os.urandom(16)
    error = refused(header(short, short), StanzaError, identities=[identity])
    assert "AES_256_GCM" in str(error)
    # a writer holding one file key wraps another: the key ID gives it away before the commitment
    error = refused(header(os.urandom(32), os.urandom(32)), KeyCommitmentError, identities=[identity])
    assert "stanza" in str(error)
    # damage (the CLI's exit 4), not a wrong key (3): the identity did open the stanza
    assert isinstance(error, KeyCommitmentError) and error.rule == "S8"


# -- review of issue 14: the findings' tests, each written as the attacker tried it -------------

SECRET = "Zq#7xW!kV9@jYb"  # no 3 characters of it are in any message of gcmstream


def assert_no_slice_of(secret: str | bytes, message: str, width: int = 3) -> None:
    """No ``width`` consecutive characters (bytes, shown either way) of ``secret`` in ``message``."""
    text = secret.decode("latin-1") if isinstance(secret, bytes) else secret
    for start in range(len(text) - width + 1):
        assert text[start : start + width] not in message, (text[start : start + width], message)


def with_stanza_fields(*fields: tuple[int, bytes], file_key: bytes) -> bytes:
    """A header that a writer holding ``file_key`` commits correctly over ``fields``: only the
    stanza rules themselves can refuse it."""
    from gcmstream.format import Role, make_header

    header, _ = make_header(
        file_key, Role.ONE_WAY, 1024, b"", fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )
    return header


def stanza_value(identity: Identity, file_key: bytes) -> bytes:
    [(_, value)] = recipients_module.seal_stanzas(file_key, recipients=[identity.recipient])
    return value


@pytest.mark.parametrize("order", ["hybrid first", "x25519 first"])
def test_post_quantum_and_classic_recipients_are_never_mixed(order: str) -> None:
    hybrid, classic = Identity.generate().recipient, Identity.generate(RecipientKind.X25519).recipient
    people = [hybrid, classic] if order == "hybrid first" else [classic, hybrid]
    for tagged in (False, True):
        with pytest.raises(RecipientError, match="can't mix post-quantum and classic") as caught:
            Sealer(recipients=people, tag_recipients=tagged)
        assert isinstance(caught.value, ValueError)
    with pytest.raises(RecipientError, match="can't mix"):
        recipients_module.seal_stanzas(os.urandom(32), recipients=iter(people))
    # one kind at a time is fine, either kind
    assert seal(recipients=[hybrid, Identity.generate().recipient])
    assert seal(recipients=[classic, Identity.generate(RecipientKind.X25519).recipient])


def test_a_reader_still_opens_a_header_that_mixes_kinds() -> None:
    # the refusal is the writer's: a header from an older writer (or another tool) still opens
    hybrid, classic = Identity.generate(), Identity.generate(RecipientKind.X25519)
    file_key = os.urandom(32)
    value = struct.pack(">H", 2) + stanza_value(hybrid, file_key)[2:] + stanza_value(classic, file_key)[2:]
    header = with_stanza_fields((0x0010, value), file_key=file_key)
    for identity in (hybrid, classic):
        opener = Opener(identities=[identity])
        opener.receive_data(header)
        assert opener.read() is None and opener.header is not None


@pytest.mark.parametrize(
    "params", [(16, 1, 1), (22, 1, 1), (10, 1, 1), (10, 8, 2), (10, 16, 1), (10, 0, 1), (10, 8, 0)]
)
def test_scrypt_r_and_p_are_fixed_and_hostile_ones_leave_the_opener_failed(
    params: tuple[int, int, int],
) -> None:
    # (16, 1, 1): under the ceiling, but OpenSSL refuses N >= 2**(16 r) (cryptography: MemoryError)
    wire = bytearray(seal(passphrase=SECRET, work_factor=10))
    stanza = wire.index(bytes([10, 8, 1]), HEADER_FIXED_SIZE)
    wire[stanza : stanza + 3] = bytes(params)
    opener = Opener(passphrase=SECRET)
    opener.receive_data(bytes(wire))
    with pytest.raises(StanzaError, match=r"r=\d+, p=\d+(: the format fixes| are invalid)") as caught:
        opener.read()
    assert not isinstance(caught.value, WorkFactorError)
    assert opener.records_opened == 0 and opener.header is None
    opener.receive_data(b"more")
    opener.receive_eof()
    for _ in range(2):  # every later call raises again, also after the end of the input
        with pytest.raises(StreamBrokenError):
            opener.read()


def test_whatever_scrypt_or_hpke_raise_is_a_deferred_stanza_error(monkeypatch: pytest.MonkeyPatch) -> None:
    passphrase_wire = seal(passphrase=SECRET, work_factor=10)
    identity = Identity.generate()
    recipient_wire = seal(recipients=[identity.recipient])

    class RefusingScrypt:
        def __init__(self, **kwargs: object) -> None:
            pass

        def derive(self, data: bytes) -> bytes:
            raise MemoryError("Not enough memory to derive key")

    monkeypatch.setattr(recipients_module, "Scrypt", RefusingScrypt)
    error = refused(passphrase_wire, StanzaError, passphrase=SECRET)
    assert "scrypt refused" in str(error) and "MemoryError" in str(error)

    def refusing_unwrap(self: Identity, body: bytes) -> bytes | None:
        raise OverflowError("a library surprise")

    monkeypatch.setattr(Identity, "unwrap", refusing_unwrap)
    error = refused(recipient_wire, StanzaError, identities=[identity])
    assert "HPKE refused" in str(error)


def test_a_passphrase_that_is_not_text_is_refused_without_showing_any_of_it() -> None:
    bad = SECRET[:6] + "\udce4" + SECRET[6:]  # a Latin-1 byte kept by surrogateescape
    for make in (lambda: Sealer(passphrase=bad, work_factor=10), lambda: Opener(passphrase=bad)):
        with pytest.raises(ValueError, match="passphrase") as caught:
            make()
        message = str(caught.value)
        assert "\udce4" not in message and "position" not in message and "passphrase" in message
        assert_no_slice_of(SECRET, message)


def test_wrong_passphrase_messages_hold_no_part_of_either_passphrase() -> None:
    wire = seal(passphrase=SECRET, work_factor=10)
    guess = SECRET[:-1] + "?"
    error = refused(wire, NoIdentityMatchedError, passphrase=guess)
    assert_no_slice_of(SECRET, str(error))
    assert_no_slice_of(guess, str(error))
    key_stream = bytes(Sealer(generate_key(256)).seal(b"x", final=True))
    for stream in (key_stream, seal(recipients=[Identity.generate().recipient])):
        assert_no_slice_of(guess, str(refused(stream, NoIdentityMatchedError, passphrase=guess)))


def test_a_stanza_of_an_unknown_kind_is_skipped_and_still_counts() -> None:
    identity = Identity.generate(RecipientKind.X25519)
    file_key = os.urandom(32)
    own = stanza_value(identity, file_key)[2:]
    unknown = struct.pack(">BBH", 9, 0, 5) + b"later"
    header = with_stanza_fields((0x0010, struct.pack(">H", 2) + unknown + own), file_key=file_key)
    opener = Opener(identities=[identity])
    opener.receive_data(header)
    assert opener.read() is None and opener.header is not None  # skipped, then its own opened
    # it counts: announced as one stanza, the unknown one leaves the real one as trailing bytes
    header = with_stanza_fields((0x0010, struct.pack(">H", 1) + unknown + own), file_key=file_key)
    assert "follow the last" in str(refused(header, StanzaError, identities=[identity]))


@pytest.mark.parametrize("field_type", [0x0012, 0x0015, 0x001F])
def test_reserved_stanza_field_types_are_refused(field_type: int) -> None:
    identity = Identity.generate(RecipientKind.X25519)
    file_key = os.urandom(32)
    header = with_stanza_fields(
        (0x0010, stanza_value(identity, file_key)), (field_type, b"future"), file_key=file_key
    )
    error = refused(header, StanzaError, identities=[identity])
    assert f"0x{field_type:04x}" in str(error)
    passphrase = recipients_module.seal_stanzas(file_key, passphrase=SECRET, work_factor=10)
    header = with_stanza_fields(*passphrase, (field_type, b""), file_key=file_key)
    refused(header, StanzaError, passphrase=SECRET)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("flag 0x80", "unknown flags 0x80"),
        ("flag 0x02", "unknown flags 0x02"),
        ("a trailing byte", "1 bytes follow"),
        ("count 0", "0 recipient stanzas"),
        ("count 101", "101 recipient stanzas"),
    ],
)
def test_each_stanza_rule_is_enforced_under_a_valid_commitment(change: str, message: str) -> None:
    identity = Identity.generate(RecipientKind.X25519)
    file_key = os.urandom(32)
    value = bytearray(stanza_value(identity, file_key))
    if change.startswith("flag"):
        value[3] = int(change.split("0x")[1], 16)
    elif change == "a trailing byte":
        value += b"\x00"
    else:
        value[0:2] = struct.pack(">H", int(change.split()[1]))
        if change == "count 0":
            value = value[:2]
    header = with_stanza_fields((0x0010, bytes(value)), file_key=file_key)
    assert message in str(refused(header, StanzaError, identities=[identity]))


@pytest.mark.parametrize(
    "x25519_key",
    [
        bytes(32),
        (1).to_bytes(32, "little"),
        bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    ],
    ids=["zero", "one", "order 8"],
)
def test_a_low_order_x25519_recipient_is_refused_at_parse(x25519_key: bytes) -> None:
    hybrid_half = Identity.generate().recipient.public_bytes[:1184]
    for kind, public in (
        (RecipientKind.X25519, x25519_key),
        (RecipientKind.MLKEM768_X25519, hybrid_half + x25519_key),
    ):
        line = recipients_module._encode(recipients_module.RECIPIENT_PREFIX, kind, public)  # checksum right
        with pytest.raises(RecipientError, match="low-order"):
            Recipient.parse(line)


def test_a_recipients_file_over_the_limit_is_refused_not_cut(tmp_path: Path) -> None:
    first, second = (Identity.generate(RecipientKind.X25519).recipient for _ in range(2))
    path = tmp_path / "team.txt"
    padding = "#" * (recipients_module.MAX_RECIPIENTS_FILE_SIZE - 100) + "\n"
    path.write_text(f"{first}\n{padding}{second}\n")
    with pytest.raises(RecipientError, match="over 1048576"):
        read_recipients_file(path)
    path.write_text(f"{first}\n{padding[:-2000]}\n{second}\n")
    assert read_recipients_file(path) == [first, second]


def test_an_identity_file_is_read_as_utf_8_and_refused_past_8192_characters(tmp_path: Path) -> None:
    """A comment in another encoding is replaced, not fatal; a file longer than 8,192
    characters is refused, never cut (a second identity line past a cut would go unseen;
    tests/test_format_points.py checks the exact boundary)."""
    identity = Identity.generate(RecipientKind.X25519)
    line = identity.to_text()
    path = tmp_path / "id"
    path.write_bytes(b"# cl\xe9 \xff (latin-1)\n" + line.encode() + b"\n")
    assert recipients_module.read_identity_file(path).to_text() == line
    head = line + "\n" + "#" * (8192 - len(line) - 2) + "\n"
    path.write_text(head + "a second line, beyond the limit\n")
    with pytest.raises(RecipientError, match="8192"):
        recipients_module.read_identity_file(path)


def test_a_recipients_file_is_refused_past_its_size_limit(tmp_path: Path) -> None:
    recipient = str(Identity.generate(RecipientKind.X25519).recipient)
    limit = recipients_module.MAX_RECIPIENTS_FILE_SIZE
    path = tmp_path / "r"
    path.write_bytes(b"# \xff\n" + recipient.encode() + b"\n")
    assert [str(r) for r in recipients_module.read_recipients_file(path)] == [recipient]
    at_limit = recipient + "\n" + "#" * (limit - len(recipient) - 1)
    path.write_text(at_limit)
    assert [str(r) for r in recipients_module.read_recipients_file(path)] == [recipient]
    path.write_text(at_limit + "#")
    with pytest.raises(RecipientError, match=f"over {limit} characters"):
        recipients_module.read_recipients_file(path)


def test_identity_and_recipients_files_are_read_as_utf_8_whatever_the_locale(tmp_path: Path) -> None:
    """UTF-8 is named, not taken from the locale: under an ASCII locale a comment of "\u00e9"
    that is under each file's limit in characters, though over it in bytes, is read, and the
    line after it found (decoded as ASCII, each byte would count as a character and the file
    would be refused as too long)."""
    identity = Identity.generate(RecipientKind.X25519)
    identity_file = tmp_path / "id"
    identity_file.write_text("#" + "\u00e9" * 4100 + "\n" + identity.to_text() + "\n", encoding="utf-8")
    recipients_file = tmp_path / "r"
    half = recipients_module.MAX_RECIPIENTS_FILE_SIZE // 2
    recipients_file.write_text(
        "#" + "\u00e9" * (half + 100) + "\n" + str(identity.recipient) + "\n", encoding="utf-8"
    )
    code = (
        "import sys; from gcmstream import recipients as r; "
        "print(r.read_identity_file(sys.argv[1]).recipient); "
        "print(*r.read_recipients_file(sys.argv[2]))"
    )
    encoding, *read = run_under_ascii_locale(code, str(identity_file), str(recipients_file))
    assert encoding.lower() not in ("utf-8", "utf8")
    assert read == [str(identity.recipient)] * 2


def _file_with(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "file"
    path.write_text(text, encoding="utf-8")
    return path


def _unlock(fields: list[tuple[int, bytes]], passphrase: str | None = None) -> bytes:
    identities = None if passphrase else [Identity.generate(RecipientKind.X25519)]
    unlocker = recipients_module.Unlocker(identities, passphrase)
    return unlocker.unlock(Suite.AES_256_GCM, fields)


def _unlock_stanzas(value: bytes) -> bytes:
    return _unlock([(FieldType.RECIPIENT_STANZAS, value)])


_X25519_LINE = f"{recipients_module.RECIPIENT_PREFIX}:x25519:"
# (what provokes the refusal, the error, what its message must say): each message names what
# was found or expected, which a mutant replacing the message with None (or dropping it) loses.
REFUSALS = [
    pytest.param(
        lambda _: Recipient.parse(_X25519_LINE + "A"),
        RecipientError,
        r"^the recipient is not valid base64url$",
        id="recipient-not-base64url",
    ),
    pytest.param(
        lambda _: Recipient(RecipientKind.X25519, bytes(31)),
        RecipientError,
        r"^a x25519 recipient has 32 bytes, got 31$",
        id="recipient-length",
    ),
    pytest.param(
        lambda _: Recipient(RecipientKind.MLKEM768_X25519, b"\xff" * (1184 + 32)),
        RecipientError,
        r"^not a valid mlkem768x25519 public key$",
        id="recipient-not-a-public-key",
    ),
    pytest.param(
        lambda _: Identity(RecipientKind.X25519, b"\x5a" * 31),
        RecipientError,
        r"^a x25519 identity has 32 bytes, got 31$",
        id="identity-length",
    ),
    pytest.param(
        lambda tmp_path: read_recipients_file(_file_with(tmp_path, "# nobody\n\n")),
        RecipientError,
        r"^the recipients file holds no recipient line$",
        id="recipients-file-empty",
    ),
    pytest.param(
        lambda tmp_path: read_identity_file(_file_with(tmp_path, "# nothing\n")),
        RecipientError,
        r"^expected one identity line, found 0$",
        id="identity-file-empty",
    ),
    pytest.param(
        lambda _: recipients_module.check_work_factor("18"),  # type: ignore[arg-type]
        TypeError,
        r"^work_factor must be an int, not str$",
        id="work-factor-type",
    ),
    pytest.param(
        lambda _: _unlock_stanzas(b"\x00"),
        StanzaError,
        r"^the recipient stanzas field is too short for its count$",
        id="stanzas-count-cut",
    ),
    pytest.param(
        lambda _: _unlock_stanzas(b"\x00\x01" + b"\x01\x00\x00"),
        StanzaError,
        r"^the recipient stanzas end inside a stanza header$",
        id="stanza-header-cut",
    ),
    pytest.param(
        lambda _: _unlock_stanzas(b"\x00\x01" + struct.pack(">BBH", 1, 0, 10) + bytes(9)),
        StanzaError,
        r"^a recipient stanza runs past the end of its field$",
        id="stanza-past-its-field",
    ),
    pytest.param(
        lambda _: _unlock_stanzas(b"\x00\x01" + struct.pack(">BBH", 9, 1, 3) + bytes(3)),
        StanzaError,
        r"^a recipient stanza is shorter than its tag$",
        id="unknown-stanza-shorter-than-its-tag",
    ),
    pytest.param(
        lambda _: _unlock_stanzas(b"\x00\x01" + struct.pack(">BBH", 1, 0, 3) + bytes(3)),
        StanzaError,
        r"^a x25519 stanza has 3 bytes, expected 80$",
        id="stanza-length",
    ),
    pytest.param(
        lambda _: _unlock(
            [(FieldType.RECIPIENT_STANZAS, b"\x00\x01"), (FieldType.PASSPHRASE_STANZA, bytes(67))]
        ),
        StanzaError,
        r"^a passphrase stanza must be the only stanza, but recipient stanzas are there$",
        id="passphrase-and-recipient-stanzas",
    ),
    pytest.param(
        lambda _: _unlock([(FieldType.PASSPHRASE_STANZA, bytes(5))], passphrase="pass"),
        StanzaError,
        r"^the passphrase stanza has 5 bytes, expected 67$",
        id="passphrase-stanza-length",
    ),
    pytest.param(
        lambda _: _unlock([(FieldType.PASSPHRASE_STANZA, bytes([1, 8, 1]) + bytes(64))]),
        NoIdentityMatchedError,
        r"^the stream was sealed with a passphrase, not to recipients$",
        id="passphrase-stanza-for-identities",
    ),
    pytest.param(
        lambda _: _unlock(
            [(FieldType.RECIPIENT_STANZAS, b"\x00\x01" + struct.pack(">BBH", 1, 0, 80) + bytes(80))],
            passphrase="pass",
        ),
        NoIdentityMatchedError,
        r"^the stream was sealed to recipients, not with a passphrase$",
        id="recipient-stanzas-for-a-passphrase",
    ),
    pytest.param(
        lambda _: recipients_module.Unlocker(),
        ValueError,
        r"^give identities or a passphrase, not both$",
        id="unlocker-neither",
    ),
    pytest.param(
        lambda _: recipients_module.seal_stanzas(bytes(32)),
        ValueError,
        r"^give recipients or a passphrase, not both$",
        id="seal-neither",
    ),
]


@pytest.mark.parametrize(("provoke", "error", "message"), REFUSALS)
def test_each_refusal_says_what_was_wrong(
    tmp_path: Path, provoke: Callable[[Path], object], error: type[Exception], message: str
) -> None:
    """The refusals no other test reads the message of: each says what it found or expected
    (and those about a secret never show its bytes: 0x5a... is not in the identity's)."""
    with pytest.raises(error) as caught:
        provoke(tmp_path)
    assert re.search(message, str(caught.value))
    assert "5a5a" not in str(caught.value) and "WlpaWl" not in str(caught.value)


def test_an_unlocker_needs_identities_and_says_what_it_holds() -> None:
    identities = [Identity.generate(RecipientKind.X25519) for _ in range(2)]
    assert repr(recipients_module.Unlocker(identities=identities)) == "<Unlocker 2 identities>"
    assert repr(recipients_module.Unlocker(passphrase="pw")) == "<Unlocker a passphrase>"
    for bad in ([], [1]):
        with pytest.raises(ValueError, match=r"^identities must be one or more Identity objects$"):
            recipients_module.Unlocker(identities=bad)  # type: ignore[arg-type]


def test_identities_given_as_paths_or_text_say_to_read_the_identity_file(tmp_path: Path) -> None:
    """``identities=["me.id"]`` (or a str: its characters) said only "must be Identity
    objects": it now names read_identity_file, and never repeats the text (it may be the
    identity's secret line)."""
    identity = Identity.generate(RecipientKind.X25519)
    path = tmp_path / "me.id"
    write_identity_file(path, identity)
    secret = identity.to_text()
    for bad in (str(path), [str(path)], [path], [secret], secret, secret.encode()):
        with pytest.raises(
            ValueError, match=r"not paths or text: read an identity file with gcmstream\.read_identity_file"
        ) as refused:
            open_file(path, identities=bad)  # type: ignore[arg-type]
        assert secret not in str(refused.value) and str(path) not in str(refused.value)
        assert str(refused.value) == (  # the whole advice (mop5: its class names' case changed)
            "identities must be Identity objects, not paths or text: read an identity file "
            "with gcmstream.read_identity_file(path) (or parse a line with Identity.parse)"
        )


def test_an_unknown_kind_is_named_with_the_kinds_expected() -> None:
    with pytest.raises(RecipientError, match=r"unknown recipient kind \(expected .*x25519"):
        Recipient.parse("gcmstream-recipient-v1:rsa2048:AAAA")


def test_a_bad_line_in_a_recipients_or_identity_file_is_named_by_its_number_never_its_text() -> None:
    """A file of many lines names the bad one, as age does (a new user could not tell which of
    three was damaged), by its number only: an identity line is a secret."""
    good = Identity.generate()
    line = str(good.recipient)
    damaged = line[:-4] + ("AAAA" if not line.endswith("AAAA") else "BBBB")
    text = f"# team\n{line}\n\n{damaged}\n"
    with pytest.raises(RecipientError) as raised:
        recipients_module.parse_recipients_file(text)
    assert str(raised.value).startswith("line 4: "), raised.value
    assert damaged.split(":")[-1] not in str(raised.value)
    secret = good.to_text()
    bad_identity = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    with pytest.raises(RecipientError) as raised:
        recipients_module.parse_identities(f"{secret}\n# old one\n{bad_identity}\n")
    assert str(raised.value).startswith("line 3: "), raised.value
    assert bad_identity.split(":")[-1][:20] not in str(raised.value)
    assert [str(i.recipient) for i in recipients_module.parse_identities(f"\n{secret}\n")] == [line]
