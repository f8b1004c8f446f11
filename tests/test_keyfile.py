"""Key files (gcmstream.keyfile): written with mode 0600, never over an existing file unless
forced, and then replaced atomically and durably (gcmstream._atomic, which the file pipelines
share). Parsing and its messages are tested through the CLI (tests/test_cli.py) and here."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gcmstream import Identity, KeyFileError, generate_key, read_key_file, write_identity_file, write_key_file
from gcmstream.keyfile import format_key, parse_key

from .helpers import run_under_ascii_locale


def synced_directories(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the directories os.fsync is called on (by the descriptor's path)."""
    seen: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names descriptors through /proc")
@pytest.mark.parametrize("force", [False, True], ids=["new", "replaced"])
def test_written_with_mode_0600_and_the_directory_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    path = tmp_path / "k.key"
    if force:
        path.write_text("old\n")
        path.chmod(0o644)
    synced = synced_directories(monkeypatch)
    key = generate_key(256)
    write_key_file(path, key, force=force)
    assert read_key_file(path) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert synced == [str(tmp_path)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.key"]  # no temporary file left


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_text("precious\n")
    with pytest.raises(FileExistsError):
        write_key_file(path, generate_key())
    assert path.read_text() == "precious\n"


def test_a_failed_replacement_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.key"
    old = generate_key()
    write_key_file(path, old)

    def failing_replace(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        write_key_file(path, generate_key(), force=True)
    assert read_key_file(path) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.key"]


def test_text_round_trip_and_a_malformed_line_is_a_key_file_error() -> None:
    key = generate_key()
    assert parse_key(format_key(key)) == key
    with pytest.raises(KeyFileError, match="not a gcmstream key line") as info:
        parse_key("not:a key")
    assert isinstance(info.value, ValueError)


KEY_128 = bytes(range(16))
LINE_128 = "gcmstream-key-v1:aes128:AAECAwQFBgcICQoLDA0ODw"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected one key line, found 0"),
        ("gcmstream-key-v1:aes128", "not a gcmstream key line"),
        ("other:aes128:AAECAwQFBgcICQoLDA0ODw", "not a gcmstream key line"),
        ("# a comment only\n\n", "expected one key line, found 0"),
        (f"{LINE_128}\n{LINE_128}\n", "expected one key line, found 2"),
        ("gcmstream-key-v2:aes128:AAECAwQFBgcICQoLDA0ODw", "gcmstream-key-v2 is not supported"),
        ("gcmstream-key-old:aes128:AAECAwQFBgcICQoLDA0ODw", "this key format is not supported"),
        ("gcmstream-key-v1:aes192:AAECAwQFBgcICQoLDA0ODw", "unknown key suite in the second field"),
        ("gcmstream-key-v1:aes128:AAECAwQFBgcICQoLDA0OD", "key is not valid base64url"),
        ("gcmstream-key-v1:aes128:AAECAwQFBgcICQoLDA0O!w", "key is not valid base64url"),
        ("gcmstream-key-v1:aes256:AAECAwQFBgcICQoLDA0ODw", "an aes256 key has 32 bytes, this one has 16"),
        ("gcmstream-key-v1:aes128:AAECAwQFBgcICQoLDA0ODxA", "an aes128 key has 16 bytes, this one has 17"),
    ],
)
def test_each_malformed_key_line_is_refused_with_what_is_wrong(text: str, message: str) -> None:
    """Every refusal of parse_key, at the unit (the CLI tests see some through a subprocess):
    a KeyFileError naming what is wrong, never the key's characters."""
    with pytest.raises(KeyFileError, match=message) as info:
        parse_key(text)
    assert "AAECAwQFBgcICQoLDA0O" not in str(info.value)


def test_comments_and_blank_lines_around_the_key_line_are_ignored() -> None:
    assert parse_key(LINE_128) == KEY_128
    assert format_key(KEY_128) == LINE_128
    assert parse_key(f"# made by gcmstream keygen\n\n  {LINE_128}  \n\n") == KEY_128


def test_a_replacement_in_a_missing_directory_names_the_callers_path(tmp_path: Path) -> None:
    """The temporary file's failure is reported under the path the caller gave (never the
    temporary name, which means nothing to them)."""
    path = tmp_path / "missing" / "k.key"
    with pytest.raises(FileNotFoundError) as info:
        write_key_file(path, generate_key(), force=True)
    assert info.value.filename == str(path)


def test_a_temporary_file_whose_mode_cannot_be_set_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the new file cannot be given mode 0600, it is closed and removed, not left behind
    with the default mode."""
    path = tmp_path / "k.key"
    write_key_file(path, generate_key())

    def failing_fchmod(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", failing_fchmod)
    with pytest.raises(PermissionError):
        write_key_file(path, generate_key(), force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.key"]


@pytest.mark.parametrize("force", [False, True], ids=["new", "replaced"])
def test_a_write_that_fails_leaves_no_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    """A full disk while writing: no half-written key file (nor temporary file) stays behind,
    and a replaced file keeps its old key."""
    path = tmp_path / "k.key"
    old = generate_key()
    if force:
        write_key_file(path, old)

    def failing_write(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(OSError, match="No space left"):
        write_key_file(path, generate_key(), force=force)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["k.key"] if force else [])
    if force:
        assert read_key_file(path) == old


def test_a_key_file_is_read_as_utf_8_with_bad_bytes_replaced(tmp_path: Path) -> None:
    """A comment in another encoding does not stop the key line from being read."""
    path = tmp_path / "k.key"
    path.write_bytes(b"# cl\xe9 \xff\xfe (latin-1, not UTF-8)\n" + LINE_128.encode() + b"\n")
    assert read_key_file(path) == KEY_128


def test_a_key_file_is_read_only_to_its_first_4096_characters(tmp_path: Path) -> None:
    """Reading stops at 4,096 characters, whatever the file's size: a line starting at
    character 4,096 is not read (so it cannot be a second key line)."""
    head = LINE_128 + "\n" + "#" * (4096 - len(LINE_128) - 2) + "\n"
    assert len(head) == 4096
    path = tmp_path / "k.key"
    path.write_text(head + "a second line, beyond the limit\n")
    assert read_key_file(path) == KEY_128


def test_a_key_file_is_read_as_utf_8_whatever_the_locale(tmp_path: Path) -> None:
    """UTF-8 is named, not taken from the locale: under an ASCII locale a comment of 2,100
    "\u00e9" (4,200 bytes) is still 2,100 characters, so the key line after it lies within the
    first 4,096 characters and is read (decoded as ASCII, each byte would be a character of
    its own and the key line would fall past the limit)."""
    path = tmp_path / "k.key"
    path.write_text("#" + "\u00e9" * 2100 + "\n" + LINE_128 + "\n", encoding="utf-8")
    code = "import sys; from gcmstream import read_key_file; print(read_key_file(sys.argv[1]).hex())"
    encoding, key_hex = run_under_ascii_locale(code, str(path))
    assert encoding.lower() not in ("utf-8", "utf8")
    assert key_hex == KEY_128.hex()


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX modes")
def test_a_new_key_file_is_created_0600_not_widened_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mode is given when the file is created, not only by the fchmod after it: a file
    that existed for a moment with the umask's mode could be opened by another user then."""
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: None)
    old_umask = os.umask(0)
    try:
        write_key_file(tmp_path / "k.key", generate_key())
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600


def test_a_failed_replacement_closes_only_its_own_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.key"
    write_key_file(path, generate_key())
    closed: list[int] = []
    real_close = os.close

    def recording_close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    def failing_replace(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "close", recording_close)
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        write_key_file(path, generate_key(), force=True)
    monkeypatch.undo()
    # only descriptors it opened (the temporary file's, the path's entries): never
    # stdin/out/err; a second close of one would have raised EBADF instead of the write's error
    assert closed and min(closed) > 2, closed


def test_a_failed_write_whose_cleanup_fails_raises_the_writes_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_write(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    def failing_unlink(path: str, **dir_fd: int) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "write", failing_write)
    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(OSError, match="No space left"):
        write_key_file(tmp_path / "k.key", generate_key())


def test_discarding_a_temporary_file_that_is_gone_already_is_fine(tmp_path: Path) -> None:
    from gcmstream._atomic import discard_at

    (tmp_path / "temp").write_bytes(b"x")
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        discard_at(directory, "temp")
        discard_at(directory, "temp")  # gone already: nothing to do, no error
    finally:
        os.close(directory)
    assert not (tmp_path / "temp").exists()


def test_a_tink_keyset_given_as_a_key_file_names_format_tink() -> None:
    """A new user's slip: a Tink keyset where a gcmstream key file goes is named as such, with
    the option that reads it, and no byte of it in the message."""
    keyset = '{"primaryKeyId": 7, "key": [{"keyData": {"value": "c2VjcmV0IGtleSBtYXRlcmlhbA=="}}]}'
    with pytest.raises(KeyFileError, match=r"Tink keyset.*--format tink") as raised:
        parse_key(keyset)
    assert "c2Vj" not in str(raised.value)


def test_an_identity_or_recipient_file_read_as_a_key_file_is_named(tmp_path: Path) -> None:
    """A new user's finding: ``read_key_file`` on an identity file said only "not a gcmstream
    key line (expected three fields...)". It names the file's kind and the reader to use, never
    a slice of the line (which holds the private key)."""
    identity = Identity.generate()
    path = tmp_path / "alice.identity"
    write_identity_file(path, identity)
    with pytest.raises(KeyFileError, match=r"looks like an identity file.*read_identity_file") as info:
        read_key_file(path)
    line = next(line for line in path.read_text().splitlines() if not line.startswith("#"))
    assert line.rsplit(":", 1)[-1][:12] not in str(info.value)
    with pytest.raises(KeyFileError, match="this is a recipient line, not a key file") as info:
        parse_key(str(identity.recipient))
    assert str(identity.recipient).rsplit(":", 1)[-1][:12] not in str(info.value)
