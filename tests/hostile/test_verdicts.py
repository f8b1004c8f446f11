"""One verdict per fault, on every path (issue 21, section 3).

Every one-way invalid vector, key-sealed headers carrying typed fields a key reader does not
accept, and headers sealed to recipients or a passphrase altered byte by byte (read with the
identity or passphrase that opens them), go through every reading path: an Opener fed the
whole input, ``open_file``, ``decrypt_file`` (the file engine), ``decrypt_iter`` (the pipeline,
on asyncio and trio), the asyncio ``decrypting_reader`` (key cases only), and the command line's
``decrypt``, ``decrypt --offset`` and
``info`` (in process through ``gcmstream.cli.main``, and once each in a real subprocess). Each
case gets ONE error class on every library path and ONE exit status on every CLI path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

import gcmstream
from gcmstream import Sealer, cli
from gcmstream.aio import decrypting_reader
from gcmstream.files import fixed_layout_field
from gcmstream.format import (
    FLAG_FINAL,
    HEADER_FAULTS,
    MAX_STANZA_FIELDS_SIZE,
    RECORD_HEADER,
    FieldType,
    KeyExchange,
    KeyLimits,
    Role,
    Suite,
    TrafficKeys,
    header_fault,
    make_header,
    record_size_fault,
)
from gcmstream.keyfile import write_key_file
from gcmstream.recipients import Identity, RecipientKind, seal_stanzas

from ..helpers import CONTEXT, KEY, SALT, read_all, run_cli

VECTORS = sorted((Path(__file__).parent.parent / "vectors" / "invalid").glob("*.json"))
TIMEOUT = 60


@dataclass(frozen=True)
class Case:
    name: str
    wire: bytes
    key: bytes
    context: bytes
    max_record_size: int
    expect: str  # the class name every library path must raise
    exit_status: int | None = None  # when the case pins it (issue 21's own cases)
    identity: Identity | None = None  # read with this identity (-i) instead of the key
    passphrase: str | None = None  # read with this passphrase (--passphrase-file) instead
    says: str = ""  # what every CLI path's line must hold

    def keying(self) -> dict[str, Any]:
        if self.identity is not None:
            return {"identities": [self.identity]}
        if self.passphrase is not None:
            return {"passphrase": self.passphrase}
        return {"key": self.key}


def _vector_cases() -> list[Case]:
    cases = []
    for path in VECTORS:
        vector = json.loads(path.read_text())
        if vector["mode"] != "one-way":  # channel cases have no file paths
            continue
        cases.append(
            Case(
                vector["name"],
                bytes.fromhex(vector["input"]),
                bytes.fromhex(vector["key"]),
                bytes.fromhex(vector["context"]),
                int(vector.get("max_record_size", gcmstream.DEFAULT_MAX_RECORD_SIZE)),
                vector["expect"],
            )
        )
    return cases


def key_sealed_with_field(field: int, value: bytes = b"\x00" * 32) -> bytes:
    """A stream sealed with KEY (commitment valid: the key opens the header) whose header
    carries ``field``, and two good records."""
    header, secret = make_header(KEY, Role.ONE_WAY, 24, CONTEXT, SALT, fields=[(field, value)])
    keys, out = TrafficKeys(secret, Suite.AES_128_GCM), bytearray(header)
    for seq, (flags, plaintext) in enumerate(((0, b"a" * 24), (FLAG_FINAL, b"end"))):
        record_header = RECORD_HEADER.pack(flags, len(plaintext) + 16)
        out += record_header + keys.aead.encrypt(keys.nonce(seq), plaintext, record_header)
    return bytes(out)


# Issue 21's cases: a key reader refuses every stanza and channel field under a valid
# commitment as an unknown critical field (H14): unsupported (7), on every path.
FIELD_CASES = [
    Case(
        f"key_sealed_field_0x{field:04x}",
        key_sealed_with_field(field),
        KEY,
        CONTEXT,
        gcmstream.DEFAULT_MAX_RECORD_SIZE,
        "UnknownFieldError",
        cli.EXIT_UNSUPPORTED,
    )
    for field in (FieldType.X25519_SHARE, FieldType.IDENTITY, FieldType.RECIPIENT_STANZAS, 0x0012)
]

# Issue 21 item 7's exit table, pinned for the vectors it names: H3..H7 damage (4), magic and
# version (7), H8 over --max-record-size (8), R1 a record's length (4).
PINNED = {
    "bad_magic": cli.EXIT_UNSUPPORTED,
    "bad_version": cli.EXIT_UNSUPPORTED,
    "bad_role": cli.EXIT_TAMPERED,
    "bad_suite": cli.EXIT_TAMPERED,
    "key_exchange_on_one_way": cli.EXIT_TAMPERED,
    "record_size_zero": cli.EXIT_TAMPERED,
    "fields_too_long": cli.EXIT_TAMPERED,
    "record_size_over_reader_limit": cli.EXIT_RECORD_LIMIT,
    "valid_stream_length_over_record_size": cli.EXIT_TAMPERED,
    "unknown_critical_field": cli.EXIT_UNSUPPORTED,
}


def sealed_to(kind: RecipientKind, count: int) -> bytes:
    identities = [Identity(kind, bytes([n + 1]) * kind.private_size) for n in range(count)]
    sealer = Sealer(recipients=[identity.recipient for identity in identities], context=CONTEXT)
    return bytes(sealer.seal(b"sealed to recipients", final=True))


# A key given for a file sealed to recipients: its header names the file key's ID (H10), which
# a key's reader checks before the fields' bound (H7), so even stanzas over the key reader's
# 4,096 bytes are a wrong key, decided from the 62 fixed bytes on every path.
WRONG_KEY_CASES = [
    Case(
        "key_for_one_recipient",
        sealed_to(RecipientKind.X25519, 1),
        KEY,
        CONTEXT,
        gcmstream.DEFAULT_MAX_RECORD_SIZE,
        "UnknownKeyError",
        cli.EXIT_WRONG_KEY,
    ),
    Case(
        "key_for_many_recipients",
        sealed_to(RecipientKind.MLKEM768_X25519, 5),
        KEY,
        CONTEXT,
        gcmstream.DEFAULT_MAX_RECORD_SIZE,
        "UnknownKeyError",
        cli.EXIT_WRONG_KEY,
    ),
]


def _with_suite_flipped(wire: bytes) -> bytes:
    """``wire`` with its header's suite byte (offset 6) naming the other suite."""
    return wire[:6] + bytes([3 - wire[6]]) + wire[7:]


# The key ID names the key given, so the key fits: a suite that disagrees with its length (H11)
# was altered, which is damage (4), not a wrong key (3).
ALTERED_CASES = [
    Case(
        "key_id_held_suite_flipped",
        _with_suite_flipped(bytes(Sealer(KEY, context=CONTEXT).seal(b"x", final=True))),
        KEY,
        CONTEXT,
        gcmstream.DEFAULT_MAX_RECORD_SIZE,
        "KeyCommitmentError",
        cli.EXIT_TAMPERED,
    ),
]

# Headers sealed to recipients (ours first, then another's) or a passphrase, altered where a
# keyless writer can (a new user's finding: every alteration was called a wrong identity).
# What a reader can tell from "no identity matches" (FORMAT.md 4.4): a malformed stanza
# (StanzaError, 4); an altered key ID after our stanza opened (S8, 4); a header that fails its
# commitment after our stanza opened, which is a wrong context or an alteration, never a wrong
# identity (H12, 3, as a key's H12: the context is in no stanza, so the two cannot be told
# apart: the wrong_context case proves it). What it cannot: our stanza altered, or its kind,
# fails as another recipient's stanza does (S7, 3: as in age, the message names both).
STANZA_READER = Identity(RecipientKind.X25519, b"\x05" * 32)
STANZA_PASSPHRASE = "correct horse battery staple"
OPENED = "opened its stanza, but the stream header does not match the file key and the context given"
NOT_OPENED = "a wrong identity, or the header was altered"


def _flipped(wire: bytes, offset: int, mask: int = 1) -> bytes:
    return wire[:offset] + bytes([wire[offset] ^ mask]) + wire[offset + 1 :]


def _stanza_cases() -> list[Case]:
    other = Identity(RecipientKind.X25519, b"\x06" * 32)
    sealer = Sealer(recipients=[STANZA_READER.recipient, other.recipient], context=CONTEXT)
    two = bytes(sealer.seal(b"sealed to two recipients", final=True))
    # fixed part 62; field type and length 62..66; count 66..68; our stanza's kind 68, flags 69,
    # length 70..72, HPKE enc and ct 72..152; the other's from 152; the commitment last
    header_end = 62 + int.from_bytes(two[60:62], "big") + 32
    altered = {
        "recipients_our_stanza_ct_altered": (_flipped(two, 120), "NoIdentityMatchedError", 3, NOT_OPENED),
        "recipients_our_stanza_kind_unknown": (_flipped(two, 68, 2), "NoIdentityMatchedError", 3, NOT_OPENED),
        "recipients_no_stanza_field": (
            _flipped(two, 62),
            "NoIdentityMatchedError",
            3,
            "or the header was altered",
        ),
        "recipients_other_stanza_altered": (_flipped(two, 200), "KeyCommitmentError", 3, OPENED),
        "recipients_salt_altered": (_flipped(two, 30), "KeyCommitmentError", 3, OPENED),
        "recipients_record_size_altered": (_flipped(two, 11), "KeyCommitmentError", 3, OPENED),
        "recipients_commitment_altered": (_flipped(two, header_end - 1), "KeyCommitmentError", 3, OPENED),
        "recipients_key_id_altered": (_flipped(two, 12), "KeyCommitmentError", 4, "altered header"),
        "recipients_stanza_flags_unknown": (_flipped(two, 69, 2), "StanzaError", 4, "unknown flags"),
        "recipients_stanza_length_wrong": (_flipped(two, 71), "StanzaError", 4, "corrupt stream header"),
        "recipients_count_wrong": (_flipped(two, 67), "StanzaError", 4, "corrupt stream header"),
        "recipients_suite_altered": (_flipped(two, 6, 3), "StanzaError", 4, "32-byte file keys"),
        "recipients_passphrase_field_type": (_flipped(two, 63), "StanzaError", 4, "passphrase stanza"),
    }
    cases = [
        Case(
            name,
            wire,
            KEY,
            CONTEXT,
            gcmstream.DEFAULT_MAX_RECORD_SIZE,
            expect,
            status,
            STANZA_READER,
            None,
            says,
        )
        for name, (wire, expect, status, says) in altered.items()
    ]
    cases.append(  # not altered: the same verdict and words as recipients_salt_altered
        Case(
            "recipients_wrong_context",
            two,
            KEY,
            b"another context",
            gcmstream.DEFAULT_MAX_RECORD_SIZE,
            "KeyCommitmentError",
            3,
            STANZA_READER,
            None,
            OPENED,
        )
    )
    sealer = Sealer(passphrase=STANZA_PASSPHRASE, work_factor=1, context=CONTEXT)
    sealed = bytes(sealer.seal(b"sealed with a passphrase", final=True))
    # the passphrase stanza's value from 66: scrypt parameters 3, salt 16, wrapped file key 48
    for name, wire, expect, says in (
        ("passphrase_salt_altered", _flipped(sealed, 30), "KeyCommitmentError", "the passphrase " + OPENED),
        (
            "passphrase_wrapped_key_altered",
            _flipped(sealed, 100),
            "NoIdentityMatchedError",
            "wrong passphrase (or an altered passphrase stanza)",
        ),
    ):
        cases.append(
            Case(
                name,
                wire,
                KEY,
                CONTEXT,
                gcmstream.DEFAULT_MAX_RECORD_SIZE,
                expect,
                3,
                None,
                STANZA_PASSPHRASE,
                says,
            )
        )
    return cases


STANZA_CASES = _stanza_cases()
CASES = _vector_cases() + FIELD_CASES + WRONG_KEY_CASES + ALTERED_CASES + STANZA_CASES
HEADER_FAULT_NAMES = {kind.__name__ for kind in HEADER_FAULTS.values()}


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, gcmstream.StreamBrokenError):
        exc = exc.original
    return exc


def _raised(run: Callable[[], object]) -> str:
    try:
        run()
    except gcmstream.GcmStreamError as exc:
        return type(_leaf(exc)).__name__
    return "no error"


# -- the library's paths ------------------------------------------------------------------------


def via_opener(case: Case, path: Path) -> None:
    opener = gcmstream.Opener(**case.keying(), context=case.context, max_record_size=case.max_record_size)
    read_all(opener, case.wire)


def via_open_file(case: Case, path: Path) -> None:
    with gcmstream.open_file(
        path, **case.keying(), context=case.context, max_record_size=case.max_record_size
    ) as f:
        f.read()


def via_decrypt_file(case: Case, path: Path) -> None:
    gcmstream.decrypt_file(
        path,
        path.with_suffix(".out"),
        **case.keying(),
        context=case.context,
        max_record_size=case.max_record_size,
    )


async def _pipeline(case: Case) -> None:
    async def chunks() -> object:
        yield case.wire

    async for _ in gcmstream.decrypt_iter(
        chunks(),  # type: ignore[arg-type]
        **case.keying(),
        context=case.context,
        max_record_size=case.max_record_size,
    ):
        pass


def via_pipeline_asyncio(case: Case, path: Path) -> None:
    anyio.run(_pipeline, case, backend="asyncio")


def via_pipeline_trio(case: Case, path: Path) -> None:
    anyio.run(_pipeline, case, backend="trio")


async def _asyncio_reader(case: Case) -> None:
    inner = asyncio.StreamReader()
    inner.feed_data(case.wire)
    inner.feed_eof()
    reader = decrypting_reader(
        inner, key=case.key, context=case.context, max_record_size=case.max_record_size
    )
    for _ in range(10_000):  # bounded: every case is a few records
        if not await reader.read(4096):
            return


def via_asyncio_reader(case: Case, path: Path) -> None:
    asyncio.run(_asyncio_reader(case))


LIBRARY_PATHS = {
    "Opener": via_opener,
    "open_file": via_open_file,
    "decrypt_file": via_decrypt_file,
    "decrypt_iter/asyncio": via_pipeline_asyncio,
    "decrypt_iter/trio": via_pipeline_trio,
    "aio.decrypting_reader": via_asyncio_reader,
}
KEY_ONLY_PATHS = {"aio.decrypting_reader"}  # (it takes no identities or passphrase)


# -- the command line's paths -------------------------------------------------------------------


def cli_argvs(case: Case, path: Path, keyfile: Path) -> dict[str, list[str]]:
    """``keyfile``: the key file, or the identity or passphrase file of a case read with one."""
    flag = "-i" if case.identity else "--passphrase-file" if case.passphrase else "-k"
    common = [
        flag,
        str(keyfile),
        "--context",
        case.context.decode(),
        "--max-record-size",
        str(case.max_record_size),
    ]
    out = str(path.with_suffix(".plain"))
    return {
        "decrypt": ["decrypt", *common, str(path), "-o", out],
        "decrypt --offset": ["decrypt", *common, "--offset", "0", str(path), "-o", out],
        "info": ["info", *common, str(path)],
    }


@pytest.fixture
def case_files(tmp_path: Path) -> Callable[[Case], tuple[Path, Path]]:
    def write(case: Case) -> tuple[Path, Path]:
        path = tmp_path / "in.gcms"
        path.write_bytes(case.wire)
        keyfile = tmp_path / "key"
        keyfile.unlink(missing_ok=True)
        if case.identity is not None:
            gcmstream.recipients.write_identity_file(keyfile, case.identity)
        elif case.passphrase is not None:
            keyfile.write_text(case.passphrase + "\n")
            keyfile.chmod(0o600)
        else:
            write_key_file(keyfile, case.key)
        return path, keyfile

    return write


def _opens_by_arithmetic(case: Case, path: Path) -> bool:
    """open_file accepts the file as a fixed layout: its fault lies in a record not yet read."""
    try:
        with gcmstream.open_file(
            path, **case.keying(), context=case.context, max_record_size=case.max_record_size
        ) as file:
            return file.fixed_layout
    except gcmstream.errors.GcmStreamError:
        return False


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_class_and_one_exit_status_per_fault_on_every_path(
    case: Case, case_files: Callable[[Case], tuple[Path, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, keyfile = case_files(case)
    keyed_otherwise = case.identity is not None or case.passphrase is not None
    classes = {
        name: _raised(partial(run, case, path))
        for name, run in LIBRARY_PATHS.items()
        if not (keyed_otherwise and name in KEY_ONLY_PATHS)
    }
    assert set(classes.values()) == {case.expect}, classes
    statuses, lines = {}, {}
    for name, argv in cli_argvs(case, path, keyfile).items():
        statuses[name] = cli.main(argv)
        lines[name] = capsys.readouterr().err
    if _opens_by_arithmetic(case, path):
        # info reads a fixed-layout file's header and FINAL only (its "verified:" line says so
        # and counts the rest; FORMAT.md 8.3): a fault in another record is found by reading it
        assert statuses.pop("info") == cli.EXIT_OK, lines["info"]
    assert len(set(statuses.values())) == 1, (statuses, lines)
    status = next(iter(statuses.values()))
    assert status not in (cli.EXIT_OK, cli.EXIT_INTERNAL), lines
    pinned = case.exit_status if case.exit_status is not None else PINNED.get(case.name)
    if pinned is not None:
        assert status == pinned, lines
    for line in lines.values():
        assert case.says in line, (case.says, lines)
        assert not keyed_otherwise or "wrong key" not in line, lines
    if case.expect not in HEADER_FAULT_NAMES:
        return
    # a header fault is worded the same on both decrypt paths (records are found differently)
    decrypt_lines = {lines[name].split(": ", 1)[1] for name in ("decrypt", "decrypt --offset")}
    assert len(decrypt_lines) == 1, lines


@pytest.mark.parametrize("field", [FieldType.X25519_SHARE, FieldType.RECIPIENT_STANZAS])
def test_a_critical_field_in_a_key_sealed_header_is_unsupported_in_real_subprocesses(
    field: int, case_files: Callable[[Case], tuple[Path, Path]]
) -> None:
    """One real process per command: the exit status main() returns is the one the shell sees,
    and the key did open the header, so it is not "wrong key"."""
    case = next(c for c in FIELD_CASES if c.name == f"key_sealed_field_0x{field:04x}")
    path, keyfile = case_files(case)
    for name, argv in cli_argvs(case, path, keyfile).items():
        done = subprocess.run(
            [sys.executable, "-m", "gcmstream", *argv], capture_output=True, timeout=TIMEOUT, check=False
        )
        message = done.stderr.decode()
        assert done.returncode == cli.EXIT_UNSUPPORTED, (name, message)
        assert f"critical field 0x{field:04x}" in message and "wrong key" not in message, (name, message)


@pytest.mark.parametrize("name", ["recipients_salt_altered", "recipients_our_stanza_ct_altered"])
def test_an_altered_stanza_file_is_never_called_a_wrong_key_in_real_subprocesses(
    name: str, case_files: Callable[[Case], tuple[Path, Path]]
) -> None:
    """A new user's finding, as the shell sees it: an altered header of a file sealed to
    recipients exits 3 with a line that names the alteration beside what it cannot be told
    from (a wrong context, a wrong identity), never "wrong key"."""
    case = next(c for c in STANZA_CASES if c.name == name)
    path, identity_file = case_files(case)
    for command, argv in cli_argvs(case, path, identity_file).items():
        done = subprocess.run(
            [sys.executable, "-m", "gcmstream", *argv], capture_output=True, timeout=TIMEOUT, check=False
        )
        message = done.stderr.decode()
        assert done.returncode == cli.EXIT_WRONG_KEY, (command, message)
        assert case.says in message and "header was altered" in message, (command, message)
        assert "wrong key" not in message and message.count("\n") == 1, (command, message)


def test_a_key_for_many_recipients_is_a_wrong_key_from_a_pipe_that_pauses(
    case_files: Callable[[Case], tuple[Path, Path]],
) -> None:
    """The verdict depends only on the bytes read: a writer that pauses after the 62 fixed
    bytes gets the same exit status (3) as the file did, not 4 (H7) for want of the next ones."""
    case = next(c for c in WRONG_KEY_CASES if c.name == "key_for_many_recipients")
    assert len(case.wire) > 62 + 4096  # the stanzas pass a key reader's bound (H7)
    _, keyfile = case_files(case)
    argv = [
        sys.executable,
        "-m",
        "gcmstream",
        "decrypt",
        "-k",
        str(keyfile),
        "--context",
        case.context.decode(),
    ]
    with subprocess.Popen(
        [*argv, "-o", "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as child:
        assert child.stdin is not None and child.stderr is not None
        child.stdin.write(case.wire[:62])
        child.stdin.flush()
        try:
            child.wait(timeout=3)  # the pause: the CLI decides from the fixed part alone
        except subprocess.TimeoutExpired:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.write(case.wire[62:])
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
        message = child.stderr.read().decode()
        assert child.wait(timeout=TIMEOUT) == cli.EXIT_WRONG_KEY, message
    assert "wrong key" in message and "--identity" in message, message


# -- which typed fields each kind of reader accepts (docs/FORMAT.md "Typed fields by reader") ----

FILE_KEY = bytes(range(32))  # a stanza reader's file key: suite 2 (S2)
IDENTITY = Identity(RecipientKind.X25519, b"\x05" * 32)
PASSPHRASE = "correct horse battery staple"
SHARE = X25519PrivateKey.from_private_bytes(b"\x07" * 32).public_key().public_bytes_raw()
FIELD_VALUES: dict[int, bytes] = {
    FieldType.X25519_SHARE: SHARE,
    FieldType.MLKEM768_SHARE: bytes(1184),
    FieldType.IDENTITY: b"peer",
    FieldType.RECIPIENT_STANZAS: seal_stanzas(FILE_KEY, recipients=[IDENTITY.recipient])[0][1],
    FieldType.PASSPHRASE_STANZA: seal_stanzas(FILE_KEY, passphrase=PASSPHRASE, work_factor=1)[0][1],
    0x0012: b"reserved",
    FieldType.FIXED_LAYOUT: fixed_layout_field(24, KeyLimits())[1],
    0x7FFF: b"from the future",
    0x8001: b"ignore me",
}


def _with(base: dict[int, bytes], field: int) -> list[tuple[int, bytes]]:
    return sorted({**base, field: FIELD_VALUES[field]}.items())


def _opened_header(opener: gcmstream.Opener, header: bytes) -> str:
    opener.receive_data(header)
    try:
        opener.read()  # None: the header verified, records are awaited
    except gcmstream.ProtocolError as exc:
        return type(exc).__name__
    return "accepted"


def one_way_key_reader(field: int) -> str:
    header, _ = make_header(KEY, Role.ONE_WAY, 24, CONTEXT, fields=_with({}, field))
    return _opened_header(gcmstream.Opener(KEY, context=CONTEXT), header)


def _stanza_header(stanza: int, field: int) -> bytes:
    fields = _with({stanza: FIELD_VALUES[stanza]}, field)
    return make_header(
        FILE_KEY, Role.ONE_WAY, 24, CONTEXT, fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )[0]


def recipients_reader(field: int) -> str:
    header = _stanza_header(FieldType.RECIPIENT_STANZAS, field)
    return _opened_header(gcmstream.Opener(identities=[IDENTITY], context=CONTEXT), header)


def passphrase_reader(field: int) -> str:
    header = _stanza_header(FieldType.PASSPHRASE_STANZA, field)
    return _opened_header(gcmstream.Opener(passphrase=PASSPHRASE, context=CONTEXT), header)


def _channel_reads(role: Role, field: int) -> str:
    channel = gcmstream.Channel(KEY, role=role, context=CONTEXT, key_exchange=KeyExchange.X25519)
    channel.initial_data()
    fields = _with({FieldType.X25519_SHARE: SHARE}, field)
    header, _ = make_header(KEY, role.peer, 24, CONTEXT, key_exchange=KeyExchange.X25519, fields=fields)
    channel.opener.receive_data(header)
    try:
        channel.handshake_complete()  # False: the header verified, the peer's Finished is awaited
    except gcmstream.ProtocolError as exc:
        return type(exc).__name__
    return "accepted"


def channel_responder(field: int) -> str:
    return _channel_reads(Role.RESPONDER, field)


def channel_initiator(field: int) -> str:
    return _channel_reads(Role.INITIATOR, field)


def random_access_reader(field: int) -> str:
    header, secret = make_header(KEY, Role.ONE_WAY, 24, CONTEXT, fields=_with({}, field))
    keys, wire = TrafficKeys(secret, Suite.AES_128_GCM), bytearray(header)
    for seq, (flags, plaintext) in enumerate(((0, b"a" * 24), (FLAG_FINAL, b"end"))):
        record_header = RECORD_HEADER.pack(flags, len(plaintext) + 16)
        wire += record_header + keys.aead.encrypt(keys.nonce(seq), plaintext, record_header)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "in.gcms"
        path.write_bytes(wire)
        try:
            with gcmstream.open_file(path, key=KEY, context=CONTEXT) as file:
                file.read()
        except gcmstream.ProtocolError as exc:
            return type(exc).__name__
    return "accepted"


READERS: dict[str, Callable[[int], str]] = {
    "one-way, key": one_way_key_reader,
    "one-way, identities": recipients_reader,
    "one-way, passphrase": passphrase_reader,
    "channel responder": channel_responder,
    "channel initiator": channel_initiator,
    "random access (open_file), key": random_access_reader,
}


FORMAT_MD = Path(__file__).parent.parent.parent / "docs" / "FORMAT.md"
FIELDS_BY_READER = "### 4.2.1 Typed fields by reader"


def format_md_reader_table() -> tuple[list[int], dict[str, list[str]]]:
    """The field columns (each header cell's one backticked type) and the rows of FORMAT.md's
    table of typed fields by reader: the first table after its heading."""
    text = FORMAT_MD.read_text()
    lines = text[text.index(FIELDS_BY_READER) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, rows = table[0], table[2:]
    fields = [int(re.findall(r"`(0x[0-9a-fA-F]{4})`", cell)[0], 16) for cell in header[1:]]
    return fields, {row[0]: [cell.strip("`") for cell in row[1:]] for row in rows}


def test_format_md_table_of_fields_by_reader_is_what_each_reader_does() -> None:
    """docs/FORMAT.md 4.2.1 (reader kind x typed field -> accepted or the error): each cell run
    against the reader its row names, with a header carrying the field its column names."""
    fields, rows = format_md_reader_table()
    assert set(fields) == set(FIELD_VALUES) and set(rows) == set(READERS), (fields, sorted(rows))
    found = {name: [READERS[name](field) for field in fields] for name in rows}
    assert found == rows


def _broken_commitment(header: bytes) -> bytes:
    return header[:-1] + bytes([header[-1] ^ 1])


@pytest.mark.parametrize("stanza", [FieldType.RECIPIENT_STANZAS, FieldType.PASSPHRASE_STANZA])
def test_an_unknown_critical_field_beside_stanzas_is_judged_after_the_commitment(
    stanza: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """H14 runs after the commitment for identity and passphrase readers, as for a key: a
    keyless writer who adds critical field 0x7fff to a file sealed to recipients must break the
    commitment, and that is what the reader says (H12, exit 3), not "unsupported" (H14, exit 7,
    a row that requires a valid commitment); a non-matching identity is a non-match (S7)."""
    header = _broken_commitment(_stanza_header(stanza, 0x7FFF))
    keyed = (
        {"identities": [IDENTITY]} if stanza == FieldType.RECIPIENT_STANZAS else {"passphrase": PASSPHRASE}
    )
    assert _opened_header(gcmstream.Opener(**keyed, context=CONTEXT), header) == "KeyCommitmentError"
    if stanza == FieldType.PASSPHRASE_STANZA:
        return
    other = Identity(RecipientKind.X25519, b"\x06" * 32)
    opener = gcmstream.Opener(identities=[other], context=CONTEXT)
    assert _opened_header(opener, header) == "NoIdentityMatchedError"
    path, identity_file = tmp_path / "in.gcms", tmp_path / "identity"
    path.write_bytes(header)
    statuses = {}
    for name, identity in (("opens", IDENTITY), ("other", other)):
        identity_file.unlink(missing_ok=True)
        gcmstream.recipients.write_identity_file(identity_file, identity)
        argv = ["--identity", str(identity_file), "--context", CONTEXT.decode()]
        statuses[name] = cli.main(["decrypt", *argv, str(path), "-o", str(tmp_path / "out")])
        assert "critical field" not in capsys.readouterr().err
    assert statuses == {"opens": cli.EXIT_WRONG_KEY, "other": cli.EXIT_WRONG_KEY}


def test_a_header_naming_another_file_key_than_the_stanza_opened_is_altered_not_a_wrong_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """S8's key ID: the identity opened the stanza, so it fits; a key ID byte flipped (no key
    needed to do that) is an altered header, exit 4 on every path, not "wrong key" (3)."""
    wire = bytes(Sealer(recipients=[IDENTITY.recipient], context=CONTEXT).seal(b"sealed", final=True))
    altered = wire[:12] + bytes([wire[12] ^ 1]) + wire[13:]  # the key ID's first byte
    opener = gcmstream.Opener(identities=[IDENTITY], context=CONTEXT)
    opener.receive_data(altered)
    with pytest.raises(gcmstream.KeyCommitmentError, match="altered header") as raised:
        opener.read()
    assert raised.value.rule == "S8"
    path, identity_file = tmp_path / "in.gcms", tmp_path / "identity"
    path.write_bytes(altered)
    gcmstream.recipients.write_identity_file(identity_file, IDENTITY)
    common = ["--identity", str(identity_file), "--context", CONTEXT.decode()]
    argvs = {
        "decrypt": ["decrypt", *common, str(path), "-o", str(tmp_path / "out")],
        "decrypt --offset": [
            "decrypt",
            *common,
            "--offset",
            "0",
            str(path),
            "-o",
            str(tmp_path / "out"),
        ],
        "info": ["info", *common, str(path)],
    }
    for name, argv in argvs.items():
        status = cli.main(argv)
        message = capsys.readouterr().err
        assert status == cli.EXIT_TAMPERED and "wrong key" not in message, (name, message)


# -- the exit table: one table in the code, the README's and --help's ---------------------------

README = Path(__file__).parent.parent.parent / "README.md"


def test_readme_exit_table_is_the_one_in_the_code() -> None:
    text = README.read_text()
    block = text[text.index("| status | meaning |") :].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^ *\| (\d+) \| (.*) \|$", block, re.MULTILINE))
    assert {int(code): meaning for code, meaning in rows.items()} == cli.EXIT_CODES


def rules_named(text: str) -> set[str]:
    """The FORMAT.md checks a row names: "H3..H7" and "R8" style."""
    named = set()
    for letter, first, last in re.findall(r"\b([HRS])(\d+)(?:\.\.[HRS](\d+))?\b", text):
        named |= {f"{letter}{n}" for n in range(int(first), int(last or first) + 1)}
    return named


def _fault(rule: str) -> gcmstream.ProtocolError:
    if rule == "H8":
        return record_size_fault(2, 1)
    return header_fault(rule, "found")


# The record and stanza checks, each with an error of the class it raises (FORMAT.md 8.1, 4.4)
OTHER_CHECKS: dict[str, gcmstream.ProtocolError] = {
    "R1": gcmstream.RecordTooLargeError("record ciphertext", 2, 1),
    "R2": gcmstream.MalformedRecordError("below the tag"),
    "R5": gcmstream.AuthenticationError(0),
    "R6": gcmstream.MalformedRecordError("flag", record_number=0),
    "R8": gcmstream.TrailingDataError(record_number=0),
    "S2": gcmstream.StanzaError("both"),
    "S3": gcmstream.NoIdentityMatchedError("no stanza"),
    "S4": gcmstream.WorkFactorError("too costly"),
    "S5": gcmstream.StanzaError("count"),
    "S8": gcmstream.KeyCommitmentError("file key"),
}
OTHER_CHECKS["S8"].rule = "S8"  # as the Opener raises it


@pytest.mark.parametrize("rule", [*HEADER_FAULTS, *OTHER_CHECKS])
def test_each_check_gets_the_exit_status_whose_row_names_it(rule: str) -> None:
    """Every header check's error (from format.HEADER_FAULTS, as every reader raises it) and
    the record and stanza checks' get the exit status whose EXIT_CODES row names the check,
    and no other row names it."""
    error = OTHER_CHECKS[rule] if rule in OTHER_CHECKS else _fault(rule)
    naming = {code for code, text in cli.EXIT_CODES.items() if rule in rules_named(text)}
    assert naming == {cli.exit_status(error)}, (rule, naming)


def test_an_altered_key_id_is_h10_in_the_library_and_damage_only_where_the_cli_reads_the_file_again(
    tmp_path: Path,
) -> None:
    """docs/FORMAT.md 8.1 (H10): a key ID altered in a key's header is refused by every library
    reader at the 62 fixed bytes as UnknownKeyError (rule H10), whose exit status is 3, the
    command line's verdict wherever it cannot read the header again (a pipe). Given a regular
    file, the command line reads the header again, finds that the key given verifies it under
    its own key ID (only the ID was altered), and says damage (4). One classification
    (HEADER_FAULTS, then cli's map) for the bytes a reader has; the 4 needs bytes past H10."""
    key = bytes(range(32))
    plain, sealed, keyfile = tmp_path / "plain", tmp_path / "sealed", tmp_path / "k.key"
    plain.write_bytes(b"secret data" * 100)
    write_key_file(keyfile, key)
    gcmstream.pipeline.encrypt_file(plain, sealed, key=key)
    wire = bytearray(sealed.read_bytes())
    wire[15] ^= 0x40  # a byte of the key ID (offset 12, 16 bytes)
    sealed.write_bytes(wire)
    refusals = []
    for call in (
        partial(gcmstream.open_file, sealed, key=key),
        partial(gcmstream.pipeline.decrypt_file, sealed, tmp_path / "out", key=key),
        partial(read_all, gcmstream.Opener(key), bytes(wire)),
    ):
        with pytest.raises(gcmstream.UnknownKeyError) as refused:
            call()
        refusals.append(refused.value)
    assert all(error.rule == "H10" for error in refusals)
    assert {cli.exit_status(error) for error in refusals} == {cli.EXIT_WRONG_KEY}
    assert run_cli("decrypt", "-k", keyfile, input=bytes(wire)).status == cli.EXIT_WRONG_KEY  # a pipe
    assert run_cli("decrypt", "-k", keyfile, sealed, "-o", tmp_path / "out").status == cli.EXIT_TAMPERED
