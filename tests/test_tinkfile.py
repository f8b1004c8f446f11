"""Random access to Tink ciphertext files (``gcmstream.tinkfile.open_tink_file``), against
ciphertexts the real ``tink`` package wrote: every read equals the plaintext's slice; a cut or
extended file fails at open; an altered segment fails only the reads that touch it."""

from __future__ import annotations

import gc
import os
import random
from pathlib import Path

import pytest

from gcmstream import AuthenticationError, StreamClosedError, TruncatedStreamError, UnsupportedEndpointError
from gcmstream.tinkfile import open_tink_file
from gcmstream.tinkstream import TinkHash, TinkKeyset, read_tink_keyset, tink_encrypt

from .test_tinkstream import keyset_json, tink_handle, tink_seal


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinkKeyset, bytes, bytes, Path]:
    """A Tink ciphertext of 64-byte segments (24 bytes of plaintext in the first, 48 in the
    others) that Tink wrote, in a file."""
    handle = tink_handle(16, TinkHash.SHA256, 64)
    plaintext = random.Random(7).randbytes(24 + 48 * 20 + 30)
    ciphertext = tink_seal(handle, plaintext, b"ad")
    path = tmp_path_factory.mktemp("tink") / "c.tink"
    path.write_bytes(ciphertext)
    return read_tink_keyset(keyset_json(handle)), plaintext, ciphertext, path


def test_every_range_reads_the_plaintext_slice(written: tuple[TinkKeyset, bytes, bytes, Path]) -> None:
    keyset, plaintext, _, path = written
    with open_tink_file(path, keyset, b"ad") as file:
        assert file.length == len(plaintext)
        assert file.read() == plaintext
        rng = random.Random(1)
        for _ in range(400):
            start = rng.randrange(len(plaintext) + 10)
            size = rng.choice((1, 23, 24, 25, 48, 49, 100, 5000))
            file.seek(start)
            assert file.read(size) == plaintext[start : start + size], (start, size)
        file.seek(-5, os.SEEK_END)
        assert file.read() == plaintext[-5:]
    with pytest.raises(StreamClosedError):
        file.read(1)


@pytest.mark.parametrize("length", [0, 1, 23, 24, 25, 72, 73])
def test_short_streams_read_whole_and_by_place(tmp_path: Path, length: int) -> None:
    handle = tink_handle(32, TinkHash.SHA512, 80)  # 40-byte header: 24 bytes in the first segment
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = bytes(range(length))
    path = tmp_path / "c"
    path.write_bytes(tink_seal(handle, plaintext, b""))
    with open_tink_file(path, keyset) as file:
        assert file.read() == plaintext
        for start in range(length):
            file.seek(start)
            assert file.read(3) == plaintext[start : start + 3]


def test_a_cut_or_extended_file_fails_at_open(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    keyset, _, ciphertext, _ = written
    path = tmp_path / "bad"
    for bad, error in (
        (ciphertext[:-1], AuthenticationError),
        (ciphertext[:-30], AuthenticationError),
        (ciphertext[: 64 * 5], TruncatedStreamError),  # cut on a segment boundary
        (ciphertext[:30], TruncatedStreamError),
        (ciphertext + b"\0", AuthenticationError),
        (ciphertext + ciphertext[64:128], AuthenticationError),
        (b"", TruncatedStreamError),
    ):
        path.write_bytes(bad)
        with pytest.raises(error):
            open_tink_file(path, keyset, b"ad")


def test_an_altered_segment_fails_only_the_reads_that_touch_it(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    keyset, plaintext, ciphertext, _ = written
    bad = bytearray(ciphertext)
    bad[64 * 3 + 10] ^= 1  # segment 3: plaintext 24 + 2 * 48 = 120 .. 168
    path = tmp_path / "altered"
    path.write_bytes(bytes(bad))
    with open_tink_file(path, keyset, b"ad") as file:
        file.seek(100)
        assert file.read(20) == plaintext[100:120]
        with pytest.raises(AuthenticationError) as caught:
            file.read(1)
        assert caught.value.record_number == 3
        file.seek(168)
        assert file.read(48) == plaintext[168:216]


def test_gcmstream_written_files_read_by_place(tmp_path: Path) -> None:
    handle = tink_handle(16, TinkHash.SHA1, 4096)
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = random.Random(3).randbytes(50_000)
    path = tmp_path / "ours"
    path.write_bytes(tink_encrypt(keyset, plaintext, b"x"))
    with open_tink_file(path, keyset, b"x") as file:
        file.seek(4000)
        assert file.read(9000) == plaintext[4000:13000]


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    handle = tink_handle(16, TinkHash.SHA256, 4096)
    with pytest.raises(UnsupportedEndpointError):
        open_tink_file(fifo, read_tink_keyset(keyset_json(handle)))


def test_a_file_that_fails_at_open_never_closes_another_descriptor(
    written: tuple[TinkKeyset, bytes, bytes, Path],
) -> None:
    """open_tink_file closes the descriptor of a file that fails at open; the half-made file
    object, collected later, must not close that number again: by then it may be another
    file's (here a pipe opened right after, which then took the number)."""
    keyset, _, _, path = written
    with pytest.raises(AuthenticationError) as caught:  # keeps the error, and the half-made file
        open_tink_file(path, keyset, b"wrong associated data")
    read_end, write_end = os.pipe()  # takes the number the failed file's descriptor had
    try:
        del caught
        gc.collect()  # the half-made file goes
        os.fstat(read_end)  # EBADF if it closed its old number again
        os.fstat(write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
