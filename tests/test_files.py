"""The file engine (gcmstream.files): round trips over files and pipes, the FIXED_LAYOUT header
field and its promise, the strict FINAL rule on the invalid vectors, stop requests and
cancellation leaving no output."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import struct
import termios
import threading
import time
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

import gcmstream
from gcmstream import KeyLimits, Opener, files, pipeline
from gcmstream.format import FLAG_FINAL, FLAG_KEY_UPDATE, RECORD_HEADER, FieldType, parse_header

from .helpers import read_all

KEY = bytes(range(16))
VECTORS = sorted((Path(__file__).parent / "vectors" / "invalid").glob("*.json"))
FileWork = Callable[..., Coroutine[Any, Any, None]]
CASES = [case for case in (json.loads(p.read_text()) for p in VECTORS) if case["mode"] == "one-way"]


def record_flags(stream: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(header size, [(flags, plaintext size)] of every record), read without a key."""
    fixed = struct.unpack_from(">H", stream, 60)[0]
    pos = header_size = 62 + fixed + 32
    records = []
    while pos < len(stream):
        flags, length = RECORD_HEADER.unpack_from(stream, pos)
        records.append((flags, length - 16))
        pos += 5 + length
    assert pos == len(stream)
    return header_size, records


def encrypt_bytes(tmp_path: Path, data: bytes, **options: object) -> bytes:
    src, dst = tmp_path / "plain", tmp_path / "sealed"
    src.write_bytes(data)
    files.encrypt_path(src, dst, key=KEY, **options)  # type: ignore[arg-type]
    return dst.read_bytes()


@pytest.mark.parametrize("record_size", [1, 7, 1000, 65536])
@pytest.mark.parametrize("length", [0, 1, 6999, 7000, 200_001])
def test_round_trip_through_files(tmp_path: Path, record_size: int, length: int) -> None:
    if record_size == 1 and length > 7000:
        pytest.skip("200,000 one-byte records: slow and nothing new")
    data = os.urandom(length)
    sealed = encrypt_bytes(tmp_path, data, record_size=record_size)
    files.decrypt_path(tmp_path / "sealed", tmp_path / "back", key=KEY)
    assert (tmp_path / "back").read_bytes() == data
    opener = Opener(KEY)  # a plain reader reads it too: the layout field is optional
    opener.receive_data(sealed)
    opener.receive_eof()
    read = bytearray()
    while chunk := opener.read():  # (one call opens at most 1,024 records)
        read += chunk
    assert read == data


def test_the_header_promises_the_layout_the_sealer_makes(tmp_path: Path) -> None:
    """Every record but FINAL is full and every N-th carries KEY_UPDATE, N as the field says,
    whichever limit triggers the update."""
    data = os.urandom(25_500)
    cases = [
        KeyLimits(update_after_records=3),
        KeyLimits(update_after_bytes=2500),  # ceil(2500 / 1000) = 3 records
        KeyLimits(update_after_bytes=3000),  # exactly 3 records
        KeyLimits(update_after_records=50, hard_bytes=4200, update_after_bytes=4000),  # next would pass
        KeyLimits(),
    ]
    for limits in cases:
        sealed = encrypt_bytes(tmp_path, data, record_size=1000, limits=limits)
        header_size, records = record_flags(sealed)
        header = parse_header(sealed[:header_size], known_fields=())
        value = header.field(FieldType.FIXED_LAYOUT)
        assert value is not None
        per_generation = files.layout_generation_size(value)
        assert per_generation == files.records_per_generation(1000, limits)
        for index, (flags, size) in enumerate(records):
            last = index == len(records) - 1
            assert size == (len(data) - 1000 * index if last else 1000), (limits, index)
            expected = (
                FLAG_FINAL if last else FLAG_KEY_UPDATE if index % per_generation == per_generation - 1 else 0
            )
            assert flags == expected, (limits, index)


def test_pipes_in_and_out(tmp_path: Path) -> None:
    """stdin/stdout-like descriptors: a pipe in, a pipe out, data larger than a pipe's buffer."""
    data = os.urandom(3 * 1024 * 1024 + 5)
    sealed = bytearray()
    for source, sink, work in (
        (data, sealed, lambda i, o: files.encrypt_fd(i, o, files.new_sealer(KEY, fixed_layout=True))),
    ):
        pump(source, sink, work)
    plain = bytearray()
    pump(bytes(sealed), plain, lambda i, o: files.decrypt_fd(i, o, files.new_opener(KEY), eager=True))
    assert plain == data


def pump(source: bytes, sink: bytearray, work: object, pieces: int = 7) -> None:
    """Run ``work(in_fd, out_fd)`` with ``source`` written into a pipe in ``pieces`` and the
    output pipe collected into ``sink``."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    errors: list[BaseException] = []

    def feed() -> None:
        step = max(1, -(-len(source) // pieces))
        for start in range(0, len(source), step):
            os.write(in_write, source[start : start + step])
        os.close(in_write)

    def drain() -> None:
        while chunk := os.read(out_read, 1 << 20):
            sink.extend(chunk)

    threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
    for thread in threads:
        thread.start()
    try:
        work(in_read, out_write)  # type: ignore[operator]
    except BaseException as exc:
        errors.append(exc)
    finally:
        os.close(out_write)
        for thread in threads:
            thread.join(10)
        os.close(in_read)
        os.close(out_read)
    if errors:
        raise errors[0]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("case", CASES, ids=lambda case: str(case["name"]))
def test_invalid_vectors_release_exactly_what_authenticated(case: dict[str, object]) -> None:
    """FORMAT.md 8.2 on the engine, stricter than the rule: whether the input comes at once
    (a file) or in pieces (a pipe), the engine releases exactly the plaintext the vector
    allows when given at once: never the FINAL record's when bytes follow it."""
    data = bytes.fromhex(str(case["input"]))
    key = bytes.fromhex(str(case["key"]))
    context = bytes.fromhex(str(case["context"]))
    limit = int(str(case.get("max_record_size", gcmstream.DEFAULT_MAX_RECORD_SIZE)))
    expected = getattr(gcmstream, str(case["expect"]))
    for pieces in (1, 3, len(data) or 1):
        released = bytearray()

        def work(src: int, dst: int) -> None:
            opener = files.new_opener(key, context=context, max_record_size=limit)
            files.decrypt_fd(src, dst, opener, eager=True)

        with pytest.raises(expected):
            pump(data, released, work, pieces=min(pieces, 200))
        assert sha(bytes(released)) == case["released_sha256"], (case["name"], pieces, len(released))


def test_final_is_held_back_until_the_end_of_input_is_seen(tmp_path: Path) -> None:
    """Bytes arriving after FINAL in a later read: the FINAL record's plaintext is not written,
    the records before it are."""
    sealer = files.new_sealer(KEY, record_size=10)
    stream = bytes(sealer.seal(b"a" * 25, final=True))
    released = bytearray()

    def work(src: int, dst: int) -> None:
        files.decrypt_fd(src, dst, files.new_opener(KEY), eager=True)

    in_read, in_write = os.pipe()
    os.write(in_write, stream)

    def trailing_byte() -> None:
        os.write(in_write, b"x")
        os.close(in_write)

    later = threading.Timer(0.2, trailing_byte)
    later.start()
    out_read, out_write = os.pipe()
    with pytest.raises(gcmstream.TrailingDataError):
        work(in_read, out_write)
    os.close(out_write)
    released += os.read(out_read, 100)
    later.join()
    os.close(in_read)
    os.close(out_read)
    assert released == b"a" * 20


@pytest.mark.parametrize("eager", [True, False])
def test_a_stop_while_final_waits_for_the_end_of_input_releases_none_of_it(eager: bool) -> None:
    """The whole stream sent, the pipe left open, then a stop (Ctrl-C, SIGTERM in the CLI)
    while the engine holds FINAL back waiting for the input's end: the records before FINAL
    are written, no byte of FINAL's plaintext (review 2, finding 2)."""
    sealer = files.new_sealer(KEY, record_size=10)
    stream = bytes(sealer.seal(b"a" * 20 + b"FINAL", final=True))
    stop = threading.Event()
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, stream)

    def stop_once_all_is_read() -> None:
        # the pipe drained: FINAL is read and the engine goes on to look for the end
        for _ in range(1000):
            if not struct.unpack("i", fcntl.ioctl(in_read, termios.FIONREAD, b"\0" * 4))[0]:
                break
            time.sleep(0.005)
        stop.set()

    stopper = threading.Thread(target=stop_once_all_is_read)
    stopper.start()
    try:
        with pytest.raises(gcmstream.StoppedError):
            files.decrypt_fd(in_read, out_write, files.new_opener(KEY), eager=eager, stop=stop)
        os.close(out_write)
        released = os.read(out_read, 100)
    finally:
        stopper.join()
        for fd in (in_read, in_write, out_read):
            os.close(fd)
    assert released == b"a" * 20


def test_a_stop_before_the_end_of_input_is_seen_releases_none_of_final() -> None:
    """A stop, then the input's end at once (a shell's pipe closed as Ctrl-C reaches the
    command): the probe's poll sees the end, not the stop. The stop came first: FINAL's
    plaintext is not released (review 2's PoC of finding 2, whose communicate() closed stdin
    right after the signal)."""
    stream = bytes(files.new_sealer(KEY, record_size=10).seal(b"a" * 20 + b"FINAL", final=True))
    header_size, _ = record_flags(stream)
    first = header_size + RECORD_HEADER.size + 10 + 16  # the header and the first record
    stop = threading.Event()
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, stream[:first])
    reads: list[int] = []

    def progress(count: int) -> None:
        reads.append(count)
        if sum(reads) == first:
            os.write(in_write, stream[first:])  # the rest, once the first record is out
        elif sum(reads) == len(stream):  # after the loop's last read, before the end's
            stop.set()
            os.close(in_write)

    try:
        with pytest.raises(gcmstream.StoppedError):
            files.decrypt_fd(
                in_read, out_write, files.new_opener(KEY), eager=True, progress=progress, stop=stop
            )
        os.close(out_write)
        released = os.read(out_read, 100)
    finally:
        os.close(in_read)
        os.close(out_read)
    assert (sum(reads), released) == (len(stream), b"a" * 20)


@pytest.mark.parametrize("engine", ["encrypt", "decrypt"])
def test_a_non_blocking_input_is_read_to_its_end(engine: str) -> None:
    """An O_NONBLOCK pipe whose writer is slow, with no stop request: read() answers EAGAIN
    (None) while no input is there, which is not the end. Encrypting used to seal FINAL there,
    a complete-looking empty stream; decrypting raised TruncatedStreamError for an intact
    stream (review 2, finding 1)."""
    data = os.urandom(2000)
    sealed = bytes(files.new_sealer(KEY).seal(data, final=True))
    source = data if engine == "encrypt" else sealed
    in_read, in_write = os.pipe()
    os.set_blocking(in_read, False)

    def slow_writer() -> None:
        for start in range(0, len(source), 1000):
            time.sleep(0.1)
            os.write(in_write, source[start : start + 1000])
        os.close(in_write)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    out_read, out_write = os.pipe()
    try:
        if engine == "encrypt":
            files.encrypt_fd(in_read, out_write, files.new_sealer(KEY))
        else:
            files.decrypt_fd(in_read, out_write, files.new_opener(KEY))
        os.close(out_write)
        written = b"".join(iter(partial(os.read, out_read, 1 << 16), b""))
    finally:
        writer.join()
        os.close(in_read)
        os.close(out_read)
    if engine == "encrypt":
        written = read_all(Opener(KEY), written)
    assert written == data


def test_a_stop_request_stops_the_engine(tmp_path: Path) -> None:
    """A caller of ``encrypt_path``/``decrypt_path(stop=)`` and of ``check_stop`` gets a
    documented exception of the tree: StoppedError (a GcmStreamError). It was the private
    ``gcmstream.StoppedError``, a plain Exception no caller could name (a hostile review)."""
    stop = threading.Event()
    stop.set()
    src = tmp_path / "plain"
    src.write_bytes(b"x" * 100)
    pipeline.encrypt_file(src, tmp_path / "cipher", key=KEY)
    for call in (
        partial(files.encrypt_path, src, tmp_path / "out", key=KEY, stop=stop),
        partial(files.decrypt_path, tmp_path / "cipher", tmp_path / "out", key=KEY, stop=stop),
        partial(files.check_stop, stop),
    ):
        with pytest.raises(gcmstream.StoppedError, match="stopped on request") as stopped:
            call()
        assert isinstance(stopped.value, gcmstream.GcmStreamError)
        assert type(stopped.value).__module__ == "gcmstream.errors"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]
    files.check_stop(None)  # no stop asked for: nothing raised
    files.check_stop(threading.Event())


@pytest.mark.anyio
async def test_cancellation_stops_within_a_read_and_leaves_no_output(tmp_path: Path) -> None:
    src = tmp_path / "plain"
    with src.open("wb") as file:
        file.truncate(256 * 1024 * 1024)  # sparse: reading it costs no disk
    for work in (pipeline.encrypt_file_async,):
        started = time.monotonic()
        with anyio.move_on_after(0.3) as scope:
            await work(src, tmp_path / "out", key=KEY)
        assert scope.cancelled_caught
        assert time.monotonic() - started < 2.0  # one 1 MiB read, not the remaining GiB
        assert listing(tmp_path) == ["plain"]
    sealed = tmp_path / "sealed"
    small = tmp_path / "small"
    small.write_bytes(bytes(128 * 1024 * 1024))
    await pipeline.encrypt_file_async(small, sealed, key=KEY)
    # cancel once the engine has started (its first progress call), not after a fixed time: on
    # a loaded machine a timer could fire only after the whole file was done
    progressed: list[int] = []
    async with anyio.create_task_group() as tg:

        async def cancel_once_started() -> None:
            with anyio.fail_after(30):
                while not progressed:  # noqa: ASYNC110 (set by the engine's worker thread)
                    await anyio.sleep(0.001)
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_once_started)
        await pipeline.decrypt_file_async(sealed, tmp_path / "out", key=KEY, progress=progressed.append)
    assert tg.cancel_scope.cancel_called
    assert sum(progressed) < small.stat().st_size  # stopped before the end
    assert listing(tmp_path) == ["plain", "sealed", "small"]


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


# Seconds from the cancellation to the return of encrypt_file_async/decrypt_file_async reading
# a FIFO whose writer is silent, on asyncio and trio (three runs of `nice -n 10 .venv/bin/python
# -m pytest -q -s -p no:cacheprovider tests/test_files.py -k fifo_is_idle` printing the figure, 2
# shared cores at load 5-7): 5.00 s before the engine polled pipes (its worker, blocked in read(),
# was given up after 5 s, files.STOP_WAIT), 0.006-0.021 s after (one poll is files._POLL_MS).
IDLE_FIFO_STOP_BOUND = 0.2


@pytest.mark.anyio
@pytest.mark.parametrize("work", [pipeline.encrypt_file_async, pipeline.decrypt_file_async])
async def test_cancellation_while_a_fifo_is_idle_stops_at_once(tmp_path: Path, work: FileWork) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(work, fifo, tmp_path / "out", key=KEY))
        # connected once the worker opened the FIFO for reading; then silent
        writer = await anyio.to_thread.run_sync(os.open, fifo, os.O_WRONLY | os.O_CLOEXEC)
        try:
            with anyio.fail_after(30):
                while listing(tmp_path) == ["fifo"]:  # noqa: ASYNC110 (the temporary output: the engine started)
                    await anyio.sleep(0.01)
            await anyio.sleep(0.3)  # and its read of the FIFO has begun
            cancelled = time.monotonic()
            tg.cancel_scope.cancel()
        except BaseException:
            os.close(writer)
            raise
    elapsed = time.monotonic() - cancelled
    os.close(writer)  # (after the measure: at EOF an engine that missed the stop would finish)
    assert elapsed < IDLE_FIFO_STOP_BOUND, f"returned {elapsed:.2f} s after the cancellation"
    assert listing(tmp_path) == ["fifo"]


# FINAL straddling the end of the engine's output buffer (review of issue 13, C1), 512 KiB
# (half of CHUNK_SIZE) since issue 25, 1 MiB before: the Opener authenticates FINAL with only
# its start delivered; the rest must still be written.
STRADDLING = [
    (100, pipeline.CHUNK_SIZE // 2 + 5),
    (1000, pipeline.CHUNK_SIZE // 2 + 5),
    (100, pipeline.CHUNK_SIZE + 5),
    (1000, pipeline.CHUNK_SIZE + 5),
    (1000, 2 * pipeline.CHUNK_SIZE + 500),
]


@pytest.mark.parametrize(("record_size", "length"), STRADDLING)
def test_a_final_record_straddling_the_output_buffer_is_written_whole(
    tmp_path: Path, record_size: int, length: int
) -> None:
    data = hashlib.shake_256(b"straddle %d" % length).digest(length)
    (tmp_path / "plain").write_bytes(data)
    gcmstream.encrypt_file(tmp_path / "plain", tmp_path / "sealed", key=KEY, record_size=record_size)
    gcmstream.decrypt_file(tmp_path / "sealed", tmp_path / "back", key=KEY)
    assert (tmp_path / "back").read_bytes() == data
    # with a byte after FINAL: every record before FINAL is written, no byte of FINAL
    (tmp_path / "sealed").write_bytes((tmp_path / "sealed").read_bytes() + b"x")
    src = os.open(tmp_path / "sealed", os.O_RDONLY)
    dst = os.open(tmp_path / "partial", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(gcmstream.TrailingDataError):
            files.decrypt_fd(src, dst, files.new_opener(KEY))
    finally:
        os.close(src)
        os.close(dst)
    final = length % record_size or record_size
    assert (tmp_path / "partial").read_bytes() == data[: length - final]
    with pytest.raises(gcmstream.TrailingDataError):
        gcmstream.decrypt_file(tmp_path / "sealed", tmp_path / "none", key=KEY)
    assert not (tmp_path / "none").exists()


def test_a_sealer_or_opener_whose_loop_failed_is_refused_after(tmp_path: Path) -> None:
    """A write that fails mid-run (the reader of a pipe went away), then a retry with the same
    Sealer (review of issue 13, L3): it used to write records without the stream header. Now
    the failure is sticky for the Sealer and for the Opener."""
    data = os.urandom(300_000)
    (tmp_path / "plain").write_bytes(data)
    sealer = files.new_sealer(KEY, record_size=1000, fixed_layout=True)
    src = os.open(tmp_path / "plain", os.O_RDONLY)
    retry = os.open(tmp_path / "retry", os.O_WRONLY | os.O_CREAT, 0o600)
    gone, closed = os.pipe()
    os.close(gone)
    try:
        with pytest.raises(BrokenPipeError) as first:
            files.encrypt_fd(src, closed, sealer)
        os.lseek(src, 0, os.SEEK_SET)
        for _ in range(2):
            with pytest.raises(gcmstream.StreamBrokenError) as again:
                files.encrypt_fd(src, retry, sealer)
            assert again.value.original is first.value
        assert os.fstat(retry).st_size == 0
    finally:
        for fd in (src, retry, closed):
            os.close(fd)
    files.encrypt_path(tmp_path / "plain", tmp_path / "sealed", key=KEY)
    opener = files.new_opener(KEY)
    src = os.open(tmp_path / "sealed", os.O_RDONLY)
    retry = os.open(tmp_path / "retry", os.O_WRONLY)
    gone, closed = os.pipe()
    os.close(gone)
    try:
        with pytest.raises(BrokenPipeError):
            files.decrypt_fd(src, closed, opener, eager=True)
        with pytest.raises(gcmstream.StreamBrokenError):
            files.decrypt_fd(src, retry, opener)
        assert os.fstat(retry).st_size == 0
    finally:
        for fd in (src, retry, closed):
            os.close(fd)


@pytest.mark.parametrize(
    ("sealing", "told"),
    [
        ("recipients", r"sealed to recipients .*: pass identities= \(gcmstream\.read_identity_file\)"),
        ("passphrase", r"sealed with a passphrase .*: pass passphrase= instead of key="),
    ],
)
def test_a_key_given_for_a_file_sealed_to_recipients_or_a_passphrase_says_what_reads_it(
    tmp_path: Path, sealing: str, told: str
) -> None:
    """``open_file(path, key=...)`` (and ``decrypt_file``, one worker or more) of a file sealed
    to recipients raised "the stream's key ID ... names no key held here", where the command
    line says what the file is sealed to: the library says it too, same class and rule (H10)."""
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    plain.write_bytes(b"secret data" * 1000)
    if sealing == "recipients":
        pipeline.encrypt_file(plain, sealed, recipients=[gcmstream.Identity.generate().recipient])
    else:
        pipeline.encrypt_file(plain, sealed, passphrase="correct horse battery staple")
    for call in (
        partial(gcmstream.open_file, sealed, key=bytes(32)),
        partial(pipeline.decrypt_file, sealed, tmp_path / "out", key=bytes(32)),
        partial(pipeline.decrypt_file, sealed, tmp_path / "out", key=bytes(32), jobs=2),
    ):
        with pytest.raises(gcmstream.UnknownKeyError, match=told) as refused:
            call()
        assert refused.value.rule == "H10"
    # a key's header the key does not name keeps its words (no stanza to speak of)
    pipeline.encrypt_file(plain, sealed, key=bytes(32))
    with pytest.raises(gcmstream.UnknownKeyError, match="names no key held here"):
        gcmstream.open_file(sealed, key=bytes(range(32)))
