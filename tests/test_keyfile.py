"""Key files (gcmstream.keyfile): written with mode 0600, never over an existing file unless
forced, and then replaced atomically and durably (gcmstream._atomic, which the file pipelines
share). Parsing and its messages are tested through the CLI (tests/test_cli.py) and here."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gcmstream import KeyFileError, generate_key, read_key_file, write_key_file
from gcmstream.keyfile import format_key, parse_key


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
