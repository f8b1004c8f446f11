"""Random access to Tink ciphertext files (``gcmstream.tinkfile.open_tink_file``), against
ciphertexts the real ``tink`` package wrote: every read equals the plaintext's slice; a cut or
extended file fails at open; an altered segment fails only the reads that touch it."""

from __future__ import annotations

import gc
import os
import random
from pathlib import Path

import anyio
import pytest

from gcmstream import (
    AuthenticationError,
    MalformedHeaderError,
    StreamClosedError,
    TruncatedStreamError,
    UnsupportedBufferError,
    UnsupportedEndpointError,
)
from gcmstream.tinkfile import open_tink_file, open_tink_file_async
from gcmstream.tinkstream import (
    TinkHash,
    TinkKeyset,
    TinkStreamingKey,
    read_tink_keyset,
    tink_decrypt,
    tink_encrypt,
)

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


# -- mutation run of 2026-12-04 (docs/mutation-2026-12-04-mseek2.md): each test below failed
# with a mutant or a hand-made removal of tinkfile.py that no test noticed --------------------


def test_a_bad_seek_raises_and_leaves_the_position(written: tuple[TinkKeyset, bytes, bytes, Path]) -> None:
    keyset, plaintext, _, path = written
    with open_tink_file(path, keyset, b"ad") as file:
        assert file.seek(5) == 5
        for offset, whence, words in (
            (0, 3, r"invalid whence \(3, should be 0, 1 or 2\)"),
            (-1, os.SEEK_SET, "negative seek position -1"),
            (-6, os.SEEK_CUR, "negative seek position -1"),
            (-len(plaintext) - 2, os.SEEK_END, "negative seek position -2"),
        ):
            with pytest.raises(ValueError, match=words):
                file.seek(offset, whence)
            assert file.tell() == 5
        assert file.seek(3, os.SEEK_CUR) == 8
        assert file.seek(-3, os.SEEK_END) == len(plaintext) - 3
        assert file.read() == plaintext[-3:]
        assert file.seek(0, os.SEEK_CUR) == len(plaintext)


def test_a_closed_file_refuses_every_call_and_wipes_its_plaintext(
    written: tuple[TinkKeyset, bytes, bytes, Path],
) -> None:
    keyset, plaintext, _, path = written
    file = open_tink_file(path, keyset, b"ad")
    file.seek(30)
    assert file.read(10) == plaintext[30:40]  # segment 1 is held decrypted
    held = file._plain
    assert any(held)
    assert file.readable() and file.seekable()
    assert file.name == str(path)
    assert repr(file) == f"<TinkDecryptedFile name={str(path)!r} length={len(plaintext)} segments=22>"
    file.close()
    assert not any(held)  # the plaintext held for the next read is wiped, not left for the GC
    for call in (file.readable, file.seekable, file.tell, lambda: file.seek(0), lambda: file.read(1)):
        with pytest.raises(StreamClosedError, match=r"^I/O operation on a closed TinkDecryptedFile$"):
            call()
    file.close()  # a second close does nothing


def test_a_full_last_segment_altered_is_a_failed_segment_not_a_cut(tmp_path: Path) -> None:
    """A file ending on a segment boundary whose last segment is altered: it neither opens as
    the last nor as a middle segment, so it is AuthenticationError, not a file cut at that
    boundary (which it is only when the segment opens as a middle one). At open and after it
    the error names the segment that failed, as the sequential reader does (segment 0 opened:
    the key is the stream's)."""
    handle = tink_handle(16, TinkHash.SHA256, 64)
    keyset = read_tink_keyset(keyset_json(handle))
    ciphertext = tink_seal(handle, bytes(24 + 48 * 4), b"")
    assert len(ciphertext) == 5 * 64  # the last segment is a full one
    bad = bytearray(ciphertext)
    bad[-1] ^= 1
    path = tmp_path / "c"
    path.write_bytes(bytes(bad))
    with pytest.raises(AuthenticationError) as at_open:
        open_tink_file(path, keyset)
    with pytest.raises(AuthenticationError) as sequential:
        tink_decrypt(keyset, bytes(bad))
    assert at_open.value.record_number == sequential.value.record_number == 4
    path.write_bytes(ciphertext)
    with open_tink_file(path, keyset) as file:
        path.write_bytes(bytes(bad))  # altered after open: the read names it
        file.seek(24 + 48 * 2)
        assert file.read(1) == b"\0"  # segment 3, in the buffer that held the last one
        file.seek(24 + 48 * 3)
        with pytest.raises(AuthenticationError) as caught:
            file.read(1)
        assert caught.value.record_number == 4


def test_a_file_cut_before_the_tag_of_its_last_segment_is_a_truncation(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    keyset, _, ciphertext, _ = written
    path = tmp_path / "cut"
    for cut in (1, 5, 15):  # 1 to 15 bytes into segment 21: less than its tag
        path.write_bytes(ciphertext[: 64 * 21 + cut])
        with pytest.raises(TruncatedStreamError, match=f"ends {cut} bytes into segment 21, before its tag"):
            open_tink_file(path, keyset, b"ad")
    for size in (10, 24, 39):  # inside the 24-byte header, or before segment 0's tag
        path.write_bytes(ciphertext[:size])
        with pytest.raises(TruncatedStreamError, match=f"ends after {size} bytes, inside its header"):
            open_tink_file(path, keyset, b"ad")
    path.write_bytes(b"")
    with pytest.raises(TruncatedStreamError, match="the Tink file is empty: no header"):
        open_tink_file(path, keyset, b"ad")
    for segments in (1, 5):  # cut after a whole segment, the first or another
        path.write_bytes(ciphertext[: 64 * segments])
        with pytest.raises(
            TruncatedStreamError, match=f"ends after segment {segments - 1}, which is not its last segment"
        ):
            open_tink_file(path, keyset, b"ad")
    path.write_bytes(b"\x07" + ciphertext[1:])
    with pytest.raises(MalformedHeaderError, match="length byte is 7, and no key of this keyset makes"):
        open_tink_file(path, keyset, b"ad")


def test_a_file_shrunk_after_open_fails_the_reads_past_the_cut_as_truncated(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    keyset, plaintext, ciphertext, _ = written
    path = tmp_path / "shrinks"
    path.write_bytes(ciphertext)
    with open_tink_file(path, keyset, b"ad") as file:
        os.truncate(path, 64 * 10 + 30)  # segment 10 is cut, 11.. are gone
        file.seek(24 + 48 * 11)
        with pytest.raises(TruncatedStreamError, match="segment 12: the file is shorter than at open"):
            file.read(10)
        file.seek(24 + 48 * 9)
        with pytest.raises(TruncatedStreamError, match="segment 10: the file is shorter than at open"):
            file.read(10)
        file.seek(24 + 48 * 8)
        assert file.read(48) == plaintext[24 + 48 * 8 : 24 + 48 * 9]  # before the cut: read


def test_a_keyset_opens_the_file_any_of_its_keys_wrote(tmp_path: Path) -> None:
    """Every key of the keyset is tried, as Tink's reader tries them: a key under which
    segment 0 does not authenticate is passed over, not the verdict."""
    first, second = (TinkStreamingKey(os.urandom(16), ciphertext_segment_size=size) for size in (64, 100))
    plaintext = random.Random(5).randbytes(1000)
    for writer in (first, second):
        keyset = TinkKeyset([first, second], primary=first if writer is second else second)
        path = tmp_path / f"by-{writer.ciphertext_segment_size}"
        path.write_bytes(tink_encrypt(writer, plaintext))
        with open_tink_file(path, keyset) as file:
            assert file.key is writer
            assert file.read() == plaintext


def test_a_segment_that_fails_is_never_served_from_the_wiped_buffer(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    """A failed segment wipes the buffer it was opened into, the one holding the segment read
    before: that one must be opened again, not served as zeros."""
    keyset, plaintext, ciphertext, _ = written
    bad = bytearray(ciphertext)
    bad[64 * 3 + 10] ^= 1  # segment 3: plaintext 120 .. 168
    path = tmp_path / "altered"
    path.write_bytes(bytes(bad))
    with open_tink_file(path, keyset, b"ad") as file:
        file.seek(100)
        assert file.read(10) == plaintext[100:110]  # segment 2 held
        file.seek(130)
        with pytest.raises(AuthenticationError):
            file.read(5)  # segment 3 opened into the same buffer, and fails
        file.seek(110)
        assert file.read(10) == plaintext[110:120]
        file.seek(130)
        with pytest.raises(AuthenticationError):
            file.read(5)
        file.seek(30)  # segment 1, never held: opened, not taken from the wiped buffer
        assert file.read(10) == plaintext[30:40]


def test_a_file_refused_at_open_leaves_no_descriptor_open(
    written: tuple[TinkKeyset, bytes, bytes, Path], tmp_path: Path
) -> None:
    keyset, _, ciphertext, path = written
    cut = tmp_path / "cut"
    cut.write_bytes(ciphertext[: 64 * 5])
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(AuthenticationError) as caught:
        open_tink_file(path, keyset, b"other")
    assert caught.value.record_number == 0  # segment 0, as the sequential reader says
    with pytest.raises(TruncatedStreamError):
        open_tink_file(cut, keyset, b"ad")
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_the_last_segment_is_held_from_open_and_each_segment_read_from_disk_once(
    written: tuple[TinkKeyset, bytes, bytes, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open leaves the last segment decrypted (reading the end reads nothing from disk), and
    reads within one segment open it once."""
    keyset, plaintext, _, path = written
    reads: list[int] = []
    real_preadv = os.preadv

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        reads.append(offset)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    with open_tink_file(path, keyset, b"ad") as file:
        assert reads == [24, 64 * 21]  # segment 0 and the last, at open
        file.seek(24 + 48 * 20)
        assert file.read() == plaintext[24 + 48 * 20 :]  # the last segment, whole
        file.seek(len(plaintext) - 5)
        assert file.read(2) == plaintext[-5:-3]
        assert reads == [24, 64 * 21]
        file.seek(100)
        assert file.read(3) + file.read(3) == plaintext[100:106]  # segment 2: one read
        assert reads == [24, 64 * 21, 64 * 2]


def test_a_read_covering_a_whole_segment_leaves_no_copy_in_the_files_buffer(
    written: tuple[TinkKeyset, bytes, bytes, Path],
) -> None:
    keyset, plaintext, _, path = written
    with open_tink_file(path, keyset, b"ad") as file:
        for start, size in ((24, 48), (72, 96), (0, 24 + 10)):
            file.seek(start)
            target = bytearray(size)
            assert file.readinto(target) == size
            assert target == plaintext[start : start + size]
            whole = plaintext[start : start + (24 if start == 0 else 48)]
            assert whole not in bytes(file._plain), start


def test_readinto_a_read_only_buffer_is_refused_and_reads_nothing(
    written: tuple[TinkKeyset, bytes, bytes, Path],
) -> None:
    keyset, plaintext, _, path = written
    with open_tink_file(path, keyset, b"ad") as file:
        for buffer in (bytes(48), bytes(2), memoryview(bytearray(4)).toreadonly()):
            with pytest.raises(UnsupportedBufferError, match="read-only"):
                file.readinto(buffer)
            assert file.tell() == 0
        assert file.read(30) == plaintext[:30]


def test_the_async_open_reads_without_associated_data(tmp_path: Path) -> None:
    handle = tink_handle(16, TinkHash.SHA256, 64)
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = bytes(range(200))
    path = tmp_path / "c"
    path.write_bytes(tink_seal(handle, plaintext, b""))

    async def read() -> bytes:
        async with await open_tink_file_async(path, keyset) as file:
            return bytes(await file.read())

    assert anyio.run(read) == plaintext
