"""open_file (gcmstream.seekable): random access compared with io.BytesIO over the plaintext,
tampering, truncation and trailing data at open, the invalid vectors, the disk-read bound, and
tarfile/zipfile/shutil on top."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import random
import re
import shutil
import tarfile
import threading
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gcmstream
from gcmstream import KeyLimits, Sealer, files, seekable
from gcmstream.format import FLAG_FINAL, FLAG_KEY_UPDATE, RECORD_HEADER, FieldType, Suite, TrafficKeys
from gcmstream.header import HeaderSpec

KEY = bytes(range(16))
VECTORS = sorted((Path(__file__).parent / "vectors" / "invalid").glob("*.json"))
CASES = [case for case in (json.loads(p.read_text()) for p in VECTORS) if case["mode"] == "one-way"]
RECORD_SIZES = [1, 2, 7, 64, 1000, 4096, 65536, 1 << 20]


def plaintext_for(record_size: int) -> bytes:
    """About 3,000 records of small sizes, a few MiB for the large ones."""
    length = min(3000 * record_size + 1, 3_500_000)
    return hashlib.shake_256(str(record_size).encode()).digest(length)


def engine_file(directory: Path, data: bytes, record_size: int, limits: KeyLimits | None = None) -> Path:
    plain, sealed = directory / f"p{record_size}", directory / f"c{record_size}-{id(limits)}"
    plain.write_bytes(data)
    files.encrypt_path(plain, sealed, key=KEY, record_size=record_size, limits=limits)
    return sealed


def flushed_file(directory: Path, data: bytes, record_size: int, seed: int) -> Path:
    """A stream of short flushed records, empty KEY_UPDATE records and full ones: walked."""
    sealer = Sealer(KEY, record_size=record_size)
    out = bytearray()
    pos, step = 0, 0
    while pos < len(data):
        step += 1
        size = (seed * step * 7919) % (3 * record_size) + 1
        chunk = data[pos : pos + size]
        pos += len(chunk)
        if step % 5 == 0:
            sealer.update_key()
            out += sealer.flush()  # an empty KEY_UPDATE record (or a short one)
        out += sealer.seal(chunk, flush=step % 2 == 0)
    out += sealer.close()
    path = directory / f"f{record_size}-{seed}"
    path.write_bytes(out)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], tuple[Path, bytes]]:
    directory = tmp_path_factory.mktemp("seekable")
    made: dict[tuple[int, str], tuple[Path, bytes]] = {}
    for record_size in RECORD_SIZES:
        data = plaintext_for(record_size)
        made[record_size, "fixed"] = engine_file(directory, data, record_size), data
        limits = KeyLimits(update_after_records=3)
        made[record_size, "key updates"] = engine_file(directory, data, record_size, limits), data
        made[record_size, "flushed"] = flushed_file(directory, data, record_size, 3), data
    return made


operation = st.tuples(
    st.sampled_from(["seek0", "seek1", "seek2", "read", "readinto", "read1"]),
    st.integers(-5000, 5_000_000),
)


@pytest.mark.slow  # 2 to 4 s
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    record_size=st.sampled_from(RECORD_SIZES),
    kind=st.sampled_from(["fixed", "key updates", "flushed"]),
    operations=st.lists(operation, max_size=25),
)
def test_random_seeks_and_reads_match_bytesio(
    corpus: dict[tuple[int, str], tuple[Path, bytes]],
    record_size: int,
    kind: str,
    operations: list[tuple[str, int]],
) -> None:
    """Every seek, tell and read gives what io.BytesIO over the plaintext gives, errors included."""
    path, data = corpus[record_size, kind]
    reference = io.BytesIO(data)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.fixed_layout == (kind != "flushed")
        assert file.length == len(data)
        for name, number in operations:
            size = abs(number) % (3 * record_size + 10)
            if name.startswith("seek"):
                whence = int(name[-1])
                results: list[object] = []
                offset = number % (len(data) + 20) - (10 if whence else 0)
                for target in (reference, file):
                    try:
                        results.append(target.seek(offset, whence))
                    except (ValueError, OSError) as exc:
                        results.append(type(exc))
                if whence and (file.tell() if whence == 1 else len(data)) + offset < 0:
                    # the one deliberate difference (DecryptedFile.seek's docstring): BytesIO
                    # clamps a relative seek before the start to 0, a file refuses it
                    assert results == [0, ValueError]
                    reference.seek(file.tell())
                else:
                    assert results[0] == results[1]
            elif name == "readinto":
                mine, theirs = bytearray(size), bytearray(size)
                assert file.readinto(mine) == reference.readinto(theirs)
                assert mine == theirs
            elif name == "read1":
                assert file.read() == reference.read()
            else:
                assert file.read(size) == reference.read(size)
            assert file.tell() == reference.tell()


def record_places(stream: bytes) -> list[tuple[int, int, int]]:
    """[(wire offset, wire length, plaintext start)] of every record, read without a key."""
    fields = int.from_bytes(stream[60:62], "big")
    pos, plain, places = 62 + fields + 32, 0, []
    while pos < len(stream):
        _, length = RECORD_HEADER.unpack_from(stream, pos)
        places.append((pos, 5 + length, plain))
        pos += 5 + length
        plain += length - 16
    return places


@pytest.mark.parametrize("kind", ["fixed", "flushed"])
def test_a_tampered_record_fails_exactly_the_reads_that_touch_it(tmp_path: Path, kind: str) -> None:
    """In a FIXED_LAYOUT file; a walked file is refused at open (the places of the records
    after a tampered one could not be authenticated)."""
    data = os.urandom(1000)
    path = engine_file(tmp_path, data, 100) if kind == "fixed" else flushed_file(tmp_path, data, 100, 5)
    stream = path.read_bytes()
    places = record_places(stream)
    for index, (offset, length, start) in enumerate(places):
        size = length - 21
        damaged = bytearray(stream)
        damaged[offset + length - 1] ^= 1  # the tag: the body and its header stay in place
        path.write_bytes(damaged)
        # FINAL, and every record of a walked file (its places are authenticated at open)
        if index == len(places) - 1 or kind == "flushed":
            with pytest.raises(gcmstream.AuthenticationError) as caught:
                gcmstream.open_file(path, key=KEY)
            assert caught.value.record_number == index
            continue
        with gcmstream.open_file(path, key=KEY) as file:
            for first in range(0, len(data), 37):
                for count in (1, 50, 250):
                    file.seek(first)
                    if not (first < start + size and start < first + count):
                        assert file.read(count) == data[first : first + count]
                        continue
                    if first < start:  # what authenticated before the record, then the error
                        assert file.read(count) == data[first:start]
                    with pytest.raises(gcmstream.AuthenticationError) as caught:
                        file.read(count)
                    assert caught.value.record_number == index
            file.seek(start)
            with pytest.raises(gcmstream.AuthenticationError):
                file.read(1)
            file.seek(0)  # still usable
            assert file.read(start) == data[:start]


def test_a_failing_read_at_the_record_raises_with_its_number(tmp_path: Path) -> None:
    data = os.urandom(1000)
    path = engine_file(tmp_path, data, 100)
    damaged = bytearray(path.read_bytes())
    offset, length, _ = record_places(bytes(damaged))[4]
    damaged[offset + 10] ^= 0x80
    path.write_bytes(damaged)
    with gcmstream.open_file(path, key=KEY) as file:
        file.seek(450)
        with pytest.raises(gcmstream.AuthenticationError) as caught:
            file.read(10)
        assert caught.value.record_number == 4
        file.seek(300)
        assert file.read(100) == data[300:400]
        with pytest.raises(gcmstream.AuthenticationError):  # again, at every read that touches it
            file.read(1)
        file.seek(500)
        assert file.read() == data[500:]


@pytest.mark.parametrize("kind", ["fixed", "flushed"])
def test_truncation_and_trailing_data_fail_at_open(tmp_path: Path, kind: str) -> None:
    data = os.urandom(700)
    path = engine_file(tmp_path, data, 100) if kind == "fixed" else flushed_file(tmp_path, data, 100, 2)
    stream = path.read_bytes()
    with gcmstream.open_file(path, key=KEY) as whole:
        header_size = len(whole.header.raw)
    for cut in range(len(stream)):
        path.write_bytes(stream[:cut])
        with pytest.raises(gcmstream.TruncatedStreamError) as raised:
            gcmstream.open_file(path, key=KEY)
        if cut in (header_size, header_size + 2):
            where = "at a record boundary after 0 records" if cut == header_size else "inside a record header"
            assert str(raised.value).startswith(f"input ended {where}"), str(raised.value)
        if cut >= header_size:  # in the sequential reader's words (the walk names the fault)
            where = r"input ended (at a record boundary after \d+ records|inside a record header"
            where += r"|inside record \d+)"
            assert re.match(where, str(raised.value)), (cut, str(raised.value))
    for extra in (b"\x00", b"x" * 121, stream[94:215], stream[-137:]):
        path.write_bytes(stream + extra)
        with pytest.raises(gcmstream.TrailingDataError):
            gcmstream.open_file(path, key=KEY)


@pytest.mark.parametrize("case", CASES, ids=lambda case: str(case["name"]))
def test_invalid_vectors(tmp_path: Path, case: dict[str, Any]) -> None:
    """Each invalid vector fails with its error: at open, or at the read that reaches the
    faulty record after the plaintext a sequential reader releases first."""
    path = tmp_path / "in.gcms"
    path.write_bytes(bytes.fromhex(case["input"]))
    expected = getattr(gcmstream, case["expect"])
    key, context = bytes.fromhex(case["key"]), bytes.fromhex(case["context"])
    limit = int(case.get("max_record_size", gcmstream.DEFAULT_MAX_RECORD_SIZE))
    released = bytearray()
    with (
        pytest.raises(expected),
        gcmstream.open_file(path, key=key, context=context, max_record_size=limit) as file,
    ):
        while chunk := file.read(7):
            released += chunk
    assert bytes.fromhex(case["plaintext"]).startswith(released)
    assert len(released) <= case["released_length"]


class CountingReads:
    """Counts the bytes open_file reads from disk (its only reads: os.pread and os.preadv)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        real_pread, real_preadv = os.pread, os.preadv

        def pread(fd: int, count: int, offset: int) -> bytes:
            data = real_pread(fd, count, offset)
            self.bytes += len(data)
            return data

        def preadv(fd: int, buffers: list[Any], offset: int) -> int:
            got = real_preadv(fd, buffers, offset)
            self.bytes += got
            return got

        monkeypatch.setattr(os, "pread", pread)  # (seekable.py calls os.pread at each use)
        monkeypatch.setattr(os, "preadv", preadv)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingReads:
    return CountingReads(monkeypatch)


def test_one_byte_near_the_end_reads_at_most_two_records(tmp_path: Path, counting: CountingReads) -> None:
    data = os.urandom(8 * 1024 * 1024 + 12345)
    path = engine_file(tmp_path, data, 65536)
    header = 94 + 8  # the FIXED_LAYOUT field: 4 + 4 bytes
    bound = header + 2 * (65536 + 21)
    for position in (len(data) - 1, len(data) - 12346, len(data) - 70000, 5):
        counting.bytes = 0
        with gcmstream.open_file(path, key=KEY) as file:
            file.seek(position)
            assert file.read(1) == data[position : position + 1]
        assert header + 12345 + 21 <= counting.bytes <= bound, position  # (FINAL holds 12,345)


def test_tarfile_lists_the_last_member_without_reading_the_rest(
    tmp_path: Path, counting: CountingReads
) -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for number in range(12):
            content = os.urandom(700_000) if number < 11 else b"the last member"
            info = tarfile.TarInfo(f"member-{number}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    path = engine_file(tmp_path, archive.getvalue(), 65536)
    counting.bytes = 0
    with gcmstream.open_file(path, key=KEY) as file, tarfile.open(fileobj=file, mode="r:") as tar:
        member = tar.getmember("member-11")
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == b"the last member"
    # one record per member header, and FINAL: not the 120 records of the archive
    assert 65536 < counting.bytes < 16 * (65536 + 21), counting.bytes
    assert path.stat().st_size > 7_000_000  # 118 records


def test_zipfile_and_copyfileobj(tmp_path: Path) -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        for number in range(5):
            zipped.writestr(f"f{number}", os.urandom(100_000))
    data = archive.getvalue()
    path = engine_file(tmp_path, data, 4096)
    with gcmstream.open_file(path, key=KEY) as file, zipfile.ZipFile(file) as zipped:
        reference = zipfile.ZipFile(io.BytesIO(data))
        for name in reference.namelist():
            assert zipped.read(name) == reference.read(name)
    with gcmstream.open_file(path, key=KEY) as file, (tmp_path / "copy").open("wb") as out:
        shutil.copyfileobj(file, out)
    assert (tmp_path / "copy").read_bytes() == data
    with gcmstream.open_file(path, key=KEY) as file:  # buffered on top, as open() does
        buffered = io.BufferedReader(file)
        buffered.seek(123_456)
        assert buffered.read(10) == data[123_456:123_466]


def test_closed_file_refuses_reads(tmp_path: Path) -> None:
    path = engine_file(tmp_path, b"abc", 10)
    file = gcmstream.open_file(path, key=KEY)
    assert file.readable() and file.seekable() and file.mode == "rb"
    file.close()
    for call in (file.read, file.tell, lambda: file.seek(0), file.readable, file.seekable, file.readall):
        with pytest.raises(ValueError, match="closed file"):
            call()
    with pytest.raises(gcmstream.KeyCommitmentError):
        gcmstream.open_file(path, key=KEY, context=b"other")


@pytest.mark.anyio
async def test_async_counterpart(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    path = await anyio.to_thread.run_sync(engine_file, tmp_path, data, 1000)
    async with await gcmstream.open_file_async(path, key=KEY) as file:
        assert await file.seek(-1000, io.SEEK_END) == len(data) - 1000
        assert await file.read(10) == data[-1000:-990]
        assert await file.tell() == len(data) - 990
        await file.seek(5)
        assert await file.read(3) == data[5:8]
    with pytest.raises(gcmstream.TruncatedStreamError):
        (tmp_path / "cut").write_bytes(path.read_bytes()[:-1])
        await gcmstream.open_file_async(tmp_path / "cut", key=KEY)


@pytest.mark.anyio
async def test_async_open_passes_every_option_on(tmp_path: Path) -> None:
    """open_file_async hands identities, passphrase, context and max_record_size to open_file."""
    data = os.urandom(5000)
    (tmp_path / "plain").write_bytes(data)
    identity = gcmstream.Identity.generate(gcmstream.RecipientKind.X25519)
    sealed: dict[str, dict[str, Any]] = {
        "recipients": {"recipients": [identity.recipient]},
        "passphrase": {"passphrase": "correct horse"},
    }
    for name, how in sealed.items():
        path = tmp_path / name
        seal = functools.partial(files.encrypt_path, context=b"ctx", record_size=1024, **how)
        await anyio.to_thread.run_sync(seal, tmp_path / "plain", path)
        opened = {"identities": [identity]} if name == "recipients" else how
        async with await gcmstream.open_file_async(path, context=b"ctx", **opened) as file:
            assert await file.read() == data
        with pytest.raises(gcmstream.RecordTooLargeError):
            await gcmstream.open_file_async(path, context=b"ctx", max_record_size=512, **opened)


# -- tampering without the key (review of issue 13, C2 and H1) ----------------------------------


def tampered_variants(stream: bytes, rng: random.Random) -> list[tuple[str, bytes]]:
    """What a tamperer without the key can do to the record sequence: edit a record's length
    field and delete (or add) that many bytes of its body, drop, duplicate or swap records,
    split one record into two by writing a second record header inside it."""
    places = record_places(stream)
    head = stream[: places[0][0]]
    bodies = [stream[offset : offset + length] for offset, length, _ in places]
    made: list[tuple[str, bytes]] = []
    for index in range(len(bodies)):
        offset, length, _ = places[index]
        flags, wire_length = RECORD_HEADER.unpack_from(stream, offset)
        for shift in (-1, -7, 3):
            if wire_length + shift < 16:
                continue
            body = bytearray(bodies[index])
            body[:5] = RECORD_HEADER.pack(flags, wire_length + shift)
            body = body[: len(body) + shift] if shift < 0 else body + bytes(shift)
            made.append(
                (
                    f"length {shift:+} of {index}",
                    head + b"".join(bodies[:index]) + body + b"".join(bodies[index + 1 :]),
                )
            )
        others = bodies[:index] + bodies[index + 1 :]
        made.append((f"drop {index}", head + b"".join(others)))
        made.append((f"duplicate {index}", head + b"".join(bodies[: index + 1] + bodies[index:])))
        if wire_length > 16 + 5 + 16 + 1:
            split = rng.randrange(17, wire_length - 5 - 16)
            body = bytearray(bodies[index])
            body[:5] = RECORD_HEADER.pack(flags, split)
            body[5 + split : 10 + split] = RECORD_HEADER.pack(0, wire_length - split - 5)
            made.append(
                (f"split {index}", head + b"".join(bodies[:index]) + body + b"".join(bodies[index + 1 :]))
            )
    for _ in range(len(bodies)):
        first, second = rng.sample(range(len(bodies)), 2)
        swapped = bodies[:]
        swapped[first], swapped[second] = swapped[second], swapped[first]
        made.append((f"swap {first} {second}", head + b"".join(swapped)))
    return made


def refused_or_true(path: Path, data: bytes, rng: random.Random) -> bool:
    """Read as an attacked reader would: True when open refuses the file; else (False) assert
    that the length is the true one and every byte any read returns is the plaintext at its
    offset (reads touching a damaged record raise)."""
    try:
        file = gcmstream.open_file(path, key=KEY)
    except gcmstream.ProtocolError:
        return True
    with file:
        assert file.length == len(data)
        for _ in range(40):
            start = rng.randrange(len(data) + 1)
            try:
                file.seek(start)
                got = file.read(rng.randrange(1, 400))
            except gcmstream.ProtocolError:
                continue
            assert got == data[start : start + len(got)], start
    return False


def test_tampering_without_the_key_never_moves_plaintext(tmp_path: Path) -> None:
    """Over fixed files with and without key updates and walked files with flushes and empty
    KEY_UPDATE records: no tampered sequence opens with a wrong length or serves a genuine
    byte at another offset (the walk used to trust every length field it passed)."""
    rng = random.Random(13)
    originals = []
    for record_size, length, limits in [
        (7, 70, None),
        (7, 71, KeyLimits(update_after_records=2)),
        (16, 16 * 9 + 5, KeyLimits(update_after_records=3)),
        (100, 1000, None),
        (100, 1050, KeyLimits(update_after_records=5)),
    ]:
        data = os.urandom(length)
        originals.append((engine_file(tmp_path, data, record_size, limits), data))
    for record_size, seed in [(8, 1), (64, 2), (100, 5)]:
        data = os.urandom(40 * record_size)
        originals.append((flushed_file(tmp_path, data, record_size, seed), data))
    mutant = tmp_path / "mutant"
    refused: dict[bool, int] = {True: 0, False: 0}
    for path, data in originals:
        for label, stream in tampered_variants(path.read_bytes(), rng):
            mutant.write_bytes(stream)
            walked = path.name.startswith("f")
            outcome = refused_or_true(mutant, data, rng)
            assert outcome or not walked, (path.name, label)  # a walked file: refused at open
            refused[outcome] += 1
    assert refused[True] > 500 and refused[False] > 20, refused  # (swaps in fixed files open)


def test_a_fixed_layout_file_with_its_final_record_elsewhere_is_refused(tmp_path: Path) -> None:
    """The reviewer's example: a record's length field shortened by 1,000 and 1,000 bytes of
    its body deleted; every later record still authenticates, at the wrong plaintext offset."""
    data = hashlib.shake_256(b"shifted").digest(40 * 4096 + 123)
    path = engine_file(tmp_path, data, 4096)
    stream = bytearray(path.read_bytes())
    offset, length, _ = record_places(bytes(stream))[1]
    flags, wire_length = RECORD_HEADER.unpack_from(stream, offset)
    stream[offset : offset + 5] = RECORD_HEADER.pack(flags, wire_length - 1000)
    del stream[offset + length - 1000 : offset + length]
    path.write_bytes(stream)
    with pytest.raises(gcmstream.AuthenticationError) as caught:
        gcmstream.open_file(path, key=KEY)
    assert caught.value.record_number == 1


def test_a_writer_breaking_the_fixed_layout_promise_is_refused(tmp_path: Path) -> None:
    """A genuine stream whose header says FIXED_LAYOUT but that has a short record: refused,
    not walked (the walk would be sound here, but the header's promise is part of the format)."""
    sealer = files.new_sealer(KEY, record_size=10, fixed_layout=True)
    stream = bytes(sealer.seal(b"a" * 15, flush=True)) + bytes(sealer.seal(b"b" * 20, final=True))
    path = tmp_path / "liar"
    path.write_bytes(stream)
    with pytest.raises(gcmstream.MalformedRecordError, match="FIXED_LAYOUT"):
        gcmstream.open_file(path, key=KEY)


@pytest.mark.parametrize("kind", ["fixed", "flushed"])
def test_a_file_forged_without_the_key_costs_one_record_at_open(
    tmp_path: Path, kind: str, counting: CountingReads
) -> None:
    """A genuine header (any file sealed under the key) followed by 100,000 forged one-byte
    records flagged KEY_UPDATE (2.1 MiB) and a forged FINAL: open fails at record 0, holding
    less than 1 MiB and reading at most one walk block (it used to derive a key generation per
    forged record: about 3 KiB each)."""
    data = os.urandom(300)
    genuine = engine_file(tmp_path, data, 100) if kind == "fixed" else flushed_file(tmp_path, data, 100, 3)
    header = genuine.read_bytes()[: record_places(genuine.read_bytes())[0][0]]
    forged = RECORD_HEADER.pack(FLAG_KEY_UPDATE, 17) + bytes(17)
    path = tmp_path / "forged"
    path.write_bytes(header + forged * 100_000 + RECORD_HEADER.pack(FLAG_FINAL, 17) + bytes(17))
    counting.bytes = 0
    tracemalloc.start()
    try:
        with pytest.raises(gcmstream.AuthenticationError) as caught:
            gcmstream.open_file(path, key=KEY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, peak
    assert caught.value.record_number == 0
    assert counting.bytes <= len(header) + 2 * (256 * 1024 + 121), counting.bytes


def test_threads_seeking_and_reading_one_file_take_turns(tmp_path: Path) -> None:
    """Two readers and a seeker on one file object (review of issue 13, M1): no exception, and
    every read returns the plaintext at one offset (not two pieces spliced, not a bad size)."""
    data = os.urandom(200_000)
    path = engine_file(tmp_path, data, 64)
    failures: list[str] = []
    reads = [0]
    deadline = time.monotonic() + 1.5

    with gcmstream.open_file(path, key=KEY) as file:

        def reader() -> None:
            rng = random.Random(threading.get_ident())
            while time.monotonic() < deadline:
                try:
                    got = file.read(rng.randrange(32, 300))
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                    continue
                if len(got) >= 32 and data.find(got) < 0:
                    failures.append(f"{len(got)} bytes found nowhere in the plaintext")
                reads[0] += 1

        def seeker() -> None:
            rng = random.Random(7)
            while time.monotonic() < deadline:
                try:
                    file.seek(rng.randrange(len(data)))
                    file.seek(rng.randrange(300), io.SEEK_CUR)
                    file.seek(-rng.randrange(1, 1000), io.SEEK_END)
                    file.tell()
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")

        threads = [
            threading.Thread(target=reader),
            threading.Thread(target=reader),
            threading.Thread(target=seeker),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert not failures, failures[:5]
    assert reads[0] > 100


def test_a_fifo_or_directory_is_refused_without_waiting(tmp_path: Path) -> None:
    """A FIFO with no writer used to block open_file forever (review of issue 13, L1)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt(target: Path) -> None:
        try:
            gcmstream.open_file(target, key=KEY).close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    for target in (fifo, tmp_path):
        outcome.clear()
        worker = threading.Thread(target=attempt, args=(target,), daemon=True)
        worker.start()
        worker.join(timeout=10)
        if worker.is_alive():  # unblock it: open for writing lets the FIFO's open return
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(timeout=10)
            pytest.fail(f"open_file({target.name}) blocked")
        assert isinstance(outcome[0], gcmstream.UnsupportedEndpointError), outcome
    if Path("/proc/self/fd").is_dir():  # and its descriptor closed
        before = sorted(os.listdir("/proc/self/fd"))
        with pytest.raises(gcmstream.UnsupportedEndpointError, match="random access needs a regular file"):
            gcmstream.open_file(tmp_path, key=KEY)
        assert sorted(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x00", b"\x80\x00\x00\x01", b"\x00\x00\x00\x01\x00"])
def test_a_layout_field_to_ignore_is_ignored(tmp_path: Path, value: bytes) -> None:
    """FORMAT.md 4.3: N of 0, not 4 bytes, or past the hard limits: the file is walked (and
    authenticated record by record), not refused."""
    sealer = Sealer(KEY, record_size=10, header_spec=HeaderSpec(fields=((FieldType.FIXED_LAYOUT, value),)))
    stream = bytes(sealer.seal(b"a" * 15, flush=True)) + bytes(sealer.seal(b"b" * 20, final=True))
    path = tmp_path / "ignored"
    path.write_bytes(stream)
    with gcmstream.open_file(path, key=KEY) as file:
        assert not file.fixed_layout
        assert file.read() == b"a" * 15 + b"b" * 20


def test_key_generations_far_apart_match_the_chain() -> None:
    """The key chain keeps a few generations but gives each one's keys, in any order."""
    first = TrafficKeys(bytes(32), Suite.AES_128_GCM, 0)
    chain = [first]
    for _ in range(3000):
        chain.append(chain[-1].next())
    keys = seekable._KeyChain(first)
    for generation in [*random.Random(5).sample(range(3001), 100), 3000, 0, 2049, 2048, 1]:
        assert keys(generation).secret == chain[generation].secret
    assert len(keys._checkpoints) <= 3


def test_open_file_takes_identities_and_passphrases_as_the_opener_does(tmp_path: Path) -> None:
    """A file sealed to a recipient (or with a passphrase) by the file engine opens for random
    access with the identity (or passphrase) alone, and not with another identity."""
    data = hashlib.shake_256(b"recipients seek").digest(300_000)
    (tmp_path / "plain").write_bytes(data)
    alice, mallory = gcmstream.Identity.generate(), gcmstream.Identity.generate()
    gcmstream.encrypt_file(tmp_path / "plain", tmp_path / "to-alice", recipients=[alice.recipient])
    with gcmstream.open_file(tmp_path / "to-alice", identities=[alice]) as file:
        file.seek(123_456)
        assert file.read(1000) == data[123_456:124_456]
        assert file.length == len(data)
    with pytest.raises(gcmstream.NoIdentityMatchedError):
        gcmstream.open_file(tmp_path / "to-alice", identities=[mallory])
    sealer = Sealer(passphrase="correct horse", work_factor=10)  # a walked file, not the engine's
    (tmp_path / "by-pass").write_bytes(bytes(sealer.seal(data, final=True)))
    with gcmstream.open_file(tmp_path / "by-pass", passphrase="correct horse") as file:
        file.seek(-10, io.SEEK_END)
        assert file.read() == data[-10:]


@pytest.mark.parametrize("tampered", [0, 3, 7], ids=["first", "middle", "last"])
def test_read_to_the_end_raises_at_a_tampered_record_never_returns_a_short_file(
    tmp_path: Path, tampered: int
) -> None:
    """A fixed-layout file with one record's ciphertext flipped: ``read()`` (and ``readall``)
    raise AuthenticationError; they never return the authenticated prefix as if the file ended
    there (one short readinto taken for the end of the file silently cut it: the invalid vector
    fixed_layout_edited_stored_header read back 16 of its 100 bytes without an error)."""
    data = plaintext_for(1024)[: 8 * 1024]
    path = engine_file(tmp_path, data, 1024)
    stream = bytearray(path.read_bytes())
    offset, length, _ = record_places(bytes(stream))[tampered]
    stream[offset + length - 1] ^= 1
    path.write_bytes(stream)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.fixed_layout and file.length == len(data)
        with pytest.raises(gcmstream.AuthenticationError, match=f"record {tampered}"):
            file.read()
        file.seek(0)
        with pytest.raises(gcmstream.AuthenticationError):
            file.readall()
        file.seek(0)
        with pytest.raises(gcmstream.AuthenticationError):
            shutil.copyfileobj(file, io.BytesIO())


@pytest.mark.parametrize(
    ("flags", "after"),
    [(0x80, b""), (FLAG_FINAL | FLAG_KEY_UPDATE, b""), (FLAG_FINAL, b"\x00")],
    ids=["unknown flags", "FINAL and KEY_UPDATE", "data after FINAL"],
)
def test_a_walked_file_fails_as_the_sequential_reader_does(tmp_path: Path, flags: int, after: bytes) -> None:
    """The walk opens each record through the record layer, as the Opener does: a flag rule
    broken by record 1 of a file without FIXED_LAYOUT raises the Opener's error, its message
    and its ``record_number`` (the walk's own copy of the rules dropped the number)."""
    from . import helpers

    wire, _ = helpers.forge([(0, b"first"), (flags, b"second"), (FLAG_FINAL, b"")])
    if after:  # FINAL as record 1, then a byte
        wire, _ = helpers.forge([(0, b"first"), (FLAG_FINAL, b"second")])
        wire += after
    path = tmp_path / "forged"
    path.write_bytes(wire)
    opener = gcmstream.Opener(helpers.KEY, context=helpers.CONTEXT)
    broken: tuple[type[gcmstream.MalformedRecordError | gcmstream.TrailingDataError], ...] = (
        gcmstream.MalformedRecordError,
        gcmstream.TrailingDataError,
    )
    with pytest.raises(broken) as sequential:
        helpers.read_all(opener, wire)
    with pytest.raises(broken) as walked:
        gcmstream.open_file(path, key=helpers.KEY, context=helpers.CONTEXT)
    assert sequential.value.record_number == 1
    assert (type(walked.value), str(walked.value), walked.value.record_number) == (
        type(sequential.value),
        str(sequential.value),
        1,
    )


def test_a_bad_seek_raises_and_leaves_the_position(tmp_path: Path) -> None:
    """seek's docstring: before the start raises ValueError whatever ``whence`` is, and an
    unknown ``whence`` too; the position stays where it was."""
    with gcmstream.open_file(engine_file(tmp_path, b"abcdef", 4), key=KEY) as file:
        file.seek(3)
        for offset, whence, message in (
            (-4, io.SEEK_SET, "negative seek position -4"),
            (-4, io.SEEK_CUR, "negative seek position -1"),
            (-7, io.SEEK_END, "negative seek position -1"),
            (0, 3, r"invalid whence \(3, should be 0, 1 or 2\)"),
        ):
            with pytest.raises(ValueError, match=message):
                file.seek(offset, whence)
            assert file.tell() == 3
        assert file.read() == b"def"


def test_a_file_shrunk_after_open_fails_the_reads_past_the_cut(tmp_path: Path) -> None:
    """The places are those found at open: a record cut since is TruncatedStreamError naming
    it, never a read of whatever bytes the buffer held."""
    data = plaintext_for(100)[:1000]
    path = engine_file(tmp_path, data, 100)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.read(150) == data[:150]
        size = path.stat().st_size
        os.truncate(path, size - 400)  # cuts into record 6 (121 bytes each on disk), drops 7 to 9
        file.seek(100)
        assert file.read(100) == data[100:200]  # before the cut: still read
        file.seek(750)
        with pytest.raises(gcmstream.TruncatedStreamError, match="ended inside record 7: it shrank"):
            file.read(10)
        file.seek(650)
        with pytest.raises(gcmstream.TruncatedStreamError, match="ended inside record 6: it shrank"):
            file.read(10)
        assert file.tell() == 650


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("fixed", "the file ended inside record 7: it shrank since it was opened"),  # FINAL's place
        ("flushed", "the file shrank while it was being opened"),  # the walk
    ],
)
def test_a_file_cut_while_it_is_being_opened_is_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, message: str
) -> None:
    """Its size was taken first: bytes gone by the time the walk reads them are
    TruncatedStreamError, not a short buffer read as a record."""
    data = os.urandom(700)
    path = engine_file(tmp_path, data, 100) if kind == "fixed" else flushed_file(tmp_path, data, 100, 2)
    read_header = files.read_header  # what seekable calls, by its name there

    def read_then_cut(fd: int, opener: Any) -> Any:
        header = read_header(fd, opener)
        os.truncate(path, path.stat().st_size - 300)
        return header

    monkeypatch.setattr(seekable, "read_header", read_then_cut)
    with pytest.raises(gcmstream.TruncatedStreamError, match=message):
        gcmstream.open_file(path, key=KEY)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd")
def test_a_file_refused_at_open_leaves_no_descriptor_open(tmp_path: Path) -> None:
    path = engine_file(tmp_path, b"abc" * 100, 100)
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(gcmstream.KeyCommitmentError):
        gcmstream.open_file(path, key=KEY, context=b"other")
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(gcmstream.TruncatedStreamError):
        gcmstream.open_file(path, key=KEY)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_a_walked_record_length_below_the_tag_names_its_record(tmp_path: Path) -> None:
    """Record 1's length field says 3 bytes: refused before anything is read for it, in the
    sequential reader's words, with its record number, as the Opener's error (which lacked it,
    docs/mutation-2026-12-04-mfiles.md: one rule now, records.check_record_length)."""
    from . import helpers

    wire, _ = helpers.forge([(0, b"first"), (0, b"second"), (FLAG_FINAL, b"")])
    path = tmp_path / "forged"
    path.write_bytes(wire)
    with gcmstream.open_file(path, key=helpers.KEY, context=helpers.CONTEXT) as whole:
        record_1 = len(whole.header.raw) + RECORD_HEADER.size + len(b"first") + 16
    forged = bytearray(wire)
    RECORD_HEADER.pack_into(forged, record_1, 0, 3)
    path.write_bytes(forged)
    with pytest.raises(gcmstream.MalformedRecordError) as sequential:
        helpers.read_all(gcmstream.Opener(helpers.KEY, context=helpers.CONTEXT), bytes(forged))
    with pytest.raises(gcmstream.MalformedRecordError, match="record 1 has length 3, shorter") as walked:
        gcmstream.open_file(path, key=helpers.KEY, context=helpers.CONTEXT)
    assert str(walked.value) == str(sequential.value)
    assert walked.value.record_number == sequential.value.record_number == 1


def test_a_walked_file_is_read_across_its_key_updates(tmp_path: Path) -> None:
    """Every record after a key update opens under the next generation, from the first one:
    a generation start off by one fails the reads after it (deterministic, where the
    hypothesis test above reaches it only by chance)."""
    data = os.urandom(3000)
    path = flushed_file(tmp_path, data, 100, 2)
    with gcmstream.open_file(path, key=KEY) as file:
        assert not file.fixed_layout
        assert file.read() == data
        for start in range(0, len(data), 97):
            file.seek(start)
            assert file.read(97) == data[start : start + 97]
    stream = path.read_bytes()
    updates = [offset for offset, _, _ in record_places(stream) if stream[offset] & FLAG_KEY_UPDATE]
    assert len(updates) >= 3
    sealer = Sealer(KEY, record_size=100)  # and a FINAL record that carries data, read by place
    tail = bytes(sealer.seal(data[:250], flush=True))  # (each output is a view the next call reuses)
    tail += bytes(sealer.seal(data[250:330]))
    tail += bytes(sealer.close())
    path.write_bytes(tail)
    with gcmstream.open_file(path, key=KEY) as file:
        assert not file.fixed_layout and file.records == 4
        file.seek(310)
        assert file.read(15) == data[310:325]
        file.seek(0)
        assert file.read() == data[:330]


def test_readinto_a_read_only_buffer_is_refused_and_reads_nothing(tmp_path: Path) -> None:
    with gcmstream.open_file(engine_file(tmp_path, b"abcdef", 4), key=KEY) as file:
        for buffer in (bytes(4), bytes(2), memoryview(bytearray(4)).toreadonly()):
            with pytest.raises(gcmstream.UnsupportedBufferError, match="read-only"):
                file.readinto(buffer)
            assert file.tell() == 0
        assert file.read() == b"abcdef"


def test_readall_allocates_only_what_is_left(tmp_path: Path) -> None:
    """readall near the end of a large file allocates the bytes it returns, not the file's
    length (a mutant sized its buffer length + position: 2 MB here, unnoticed)."""
    data = os.urandom(1_000_000)
    path = engine_file(tmp_path, data, 4096)
    with gcmstream.open_file(path, key=KEY) as file:
        file.seek(len(data) - 10)
        tracemalloc.start()
        try:
            got = file.readall()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        file.seek(len(data) + 5)
        assert file.readall() == b""
    assert got == data[-10:]
    assert peak < 4096, peak  # 1,555 bytes measured (pytest -s, a print of peak)


# -- mutation run of 2026-12-04, part mseek2 (docs/mutation-2026-12-04-mseek2.md): each test
# below failed with a mutant of seekable.py that no test noticed ------------------------------


def test_a_walked_file_is_read_from_disk_once_at_open(tmp_path: Path, counting: CountingReads) -> None:
    """The walk reads each byte after the header once (a file under one 256 KiB block: one
    read, each record a view into it), then FINAL once more to keep it decrypted; reading
    FINAL after that reads nothing."""
    data = os.urandom(200_000)
    path = flushed_file(tmp_path, data, 4096, 7)
    wire = path.read_bytes()
    places = record_places(wire)
    header, (final_offset, final_length, _) = places[0][0], places[-1]
    counting.bytes = 0
    with gcmstream.open_file(path, key=KEY) as file:
        assert not file.fixed_layout
        opened = counting.bytes
        final_plain = final_length - 21
        file.seek(len(data) - final_plain)
        assert file.read() == data[len(data) - final_plain :]
        assert counting.bytes == opened  # FINAL stays decrypted: no disk read
    assert final_offset + final_length == len(wire)
    assert opened == header + (len(wire) - header) + final_length


def test_the_final_record_read_whole_after_open_reads_nothing_from_disk(
    tmp_path: Path, counting: CountingReads
) -> None:
    data = os.urandom(10 * 4096 + 100)
    path = engine_file(tmp_path, data, 4096)
    with gcmstream.open_file(path, key=KEY) as file:
        counting.bytes = 0
        file.seek(10 * 4096)
        assert file.read() == data[10 * 4096 :]  # FINAL, read whole from its start
        assert file.read(1) == b""
        assert counting.bytes == 0


def test_a_read_covering_a_whole_record_leaves_no_copy_in_the_files_buffer(tmp_path: Path) -> None:
    """A read covering a whole record decrypts it straight into the caller's buffer (module
    docstring): the record's plaintext is not also left in the file's own buffer."""
    data = os.urandom(10 * 64 + 30)
    path = engine_file(tmp_path, data, 64)
    with gcmstream.open_file(path, key=KEY) as file:
        for start, size in ((128, 64), (192, 128), (0, 64 + 10)):
            file.seek(start)
            target = bytearray(size)
            assert file.readinto(target) == size
            assert target == data[start : start + size]
            whole = data[start : start + 64]
            assert whole not in bytes(file._plain), start


def test_close_wipes_the_plaintext_and_releases_the_descriptor(tmp_path: Path) -> None:
    data = os.urandom(1000)
    path = engine_file(tmp_path, data, 100)
    before = sorted(os.listdir("/proc/self/fd"))
    file = gcmstream.open_file(path, key=KEY)
    file.seek(250)
    assert file.read(10) == data[250:260]
    held = file._plain
    assert any(held)
    file.close()
    assert not any(held)
    assert sorted(os.listdir("/proc/self/fd")) == before
    file.close()  # a second close does nothing
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_the_file_names_its_path(tmp_path: Path) -> None:
    path = engine_file(tmp_path, b"abc" * 100, 100)
    with gcmstream.open_file(path, key=KEY) as file:
        assert file.name == str(path)
        assert repr(file) == f"<DecryptedFile {str(path)!r} length=300 records=4>"


def test_a_walked_file_with_records_larger_than_the_walk_block_opens(tmp_path: Path) -> None:
    """Records of 1 MiB (the walk reads blocks of 256 KiB, or one record when larger)."""
    data = os.urandom(3 * (1 << 20) + 5)
    sealer = Sealer(KEY, record_size=1 << 20)
    wire = bytes(sealer.seal(data[:100], flush=True)) + bytes(sealer.seal(data[100:], final=True))
    path = tmp_path / "large"
    path.write_bytes(wire)
    with gcmstream.open_file(path, key=KEY) as file:
        assert not file.fixed_layout
        assert file.records == 4
        file.seek(100 + (1 << 20) - 7)
        assert file.read(20) == data[100 + (1 << 20) - 7 : 100 + (1 << 20) + 13]
        file.seek(0)
        assert file.read() == data


def test_opening_a_small_walked_file_allocates_no_whole_walk_block(tmp_path: Path) -> None:
    """The walk's block is capped by what the file holds after its header: a 3 KB file does
    not cost 256 KiB."""
    data = os.urandom(3000)
    path = flushed_file(tmp_path, data, 1000, 3)
    tracemalloc.start()
    try:
        with gcmstream.open_file(path, key=KEY) as file:
            peak = tracemalloc.get_traced_memory()[1]
            assert file.read() == data
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024, peak  # 18,065 bytes measured (a print of peak, pytest -s)


def test_a_damaged_fixed_layout_file_is_walked_without_an_index(tmp_path: Path) -> None:
    """A FIXED_LAYOUT file that breaks its promise after 20,000 genuine records is walked to
    name its fault, keeping no index of places (module docstring): 8 bytes per record would
    be 160 KB here."""
    sealer = files.new_sealer(KEY, record_size=16, fixed_layout=True)
    stream = bytes(sealer.seal(b"a" * (16 * 20_000 + 5), flush=True)) + bytes(sealer.seal(b"b", final=True))
    path = tmp_path / "liar"
    path.write_bytes(stream)
    tracemalloc.start()
    try:
        with pytest.raises(gcmstream.MalformedRecordError, match="FIXED_LAYOUT"):
            gcmstream.open_file(path, key=KEY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 320 * 1024, peak  # 274,836 bytes measured (a print of peak): the walk's block


def test_a_file_descriptor_is_read_as_it_is_and_stays_the_callers(tmp_path: Path) -> None:
    """``open_file(fd)`` reads the file that descriptor is open on, even once its name leads
    elsewhere (the command line's ``decrypt --offset`` reads its input so), through a copy of
    the descriptor: the caller's own stays open and at its place. A bool is no descriptor."""
    data = os.urandom(5000)
    path = engine_file(tmp_path, data, 1024)
    fd = os.open(path, os.O_RDONLY)
    try:
        path.unlink()
        path.write_bytes(b"something else now")
        with gcmstream.open_file(fd, key=KEY) as file:
            file.seek(100)
            assert file.read(50) == data[100:150]
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0 and os.fstat(fd)  # still open, not moved
    finally:
        os.close(fd)
    with pytest.raises(TypeError, match="not a bool"):
        gcmstream.open_file(True, key=KEY)
