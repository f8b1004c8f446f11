"""The temporary file, the rename and the directory fsync (gcmstream._atomic) that every writer
of files uses; the rules about where an output goes are tests/test_output.py's, key files'
tests/test_keyfile.py's. Written for the mutants of docs/mutation-2026-12-04-mfiles.md."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gcmstream import _atomic


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def _random_bytes(*values: bytes) -> tuple[list[int], object]:
    """An ``os.urandom`` stand-in giving ``values`` in turn (the last one again once they run
    out), and the list of its calls' sizes."""
    calls: list[int] = []

    def fake(size: int) -> bytes:
        calls.append(size)
        return values[min(len(calls), len(values)) - 1]

    return calls, fake


def test_a_taken_temporary_name_is_passed_over_untouched(
    tmp_path: Path, directory: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatted = tmp_path / ".gcmstream-0000000000000000.partial"
    squatted.write_bytes(b"theirs")
    calls, fake = _random_bytes(bytes(8), b"\x01" * 8)
    monkeypatch.setattr(os, "urandom", fake)
    fd, name = _atomic.temporary_in(directory, 0o600, suffix=".partial")
    os.close(fd)
    assert name == ".gcmstream-0101010101010101.partial"
    assert calls == [8, 8]
    assert squatted.read_bytes() == b"theirs"
    assert (tmp_path / name).stat().st_size == 0


def test_a_temporary_name_taken_every_time_gives_up_after_100_attempts(
    tmp_path: Path, directory: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".gcmstream-0000000000000000").write_bytes(b"theirs")
    calls, fake = _random_bytes(bytes(8))
    monkeypatch.setattr(os, "urandom", fake)
    with pytest.raises(OSError, match="no free temporary name") as raised:
        _atomic.temporary_in(directory, 0o600)
    assert raised.value.errno == errno.EEXIST
    assert len(calls) == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gcmstream-0000000000000000"]
