"""gcmstream.pipeline: async iterables, anyio and asyncio streams, files (sync and async)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import AsyncIterator, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketAttribute, SocketStream

import gcmstream
from gcmstream import files, pipeline

from .helpers import KEY, read_all, record_offset

RECORD = gcmstream.DEFAULT_RECORD_SIZE
SIZES = [0, 1, RECORD - 1, RECORD, RECORD + 1, 3 * 1024 * 1024 + 5]


def payload(size: int) -> bytes:
    return (bytes(range(251)) * (size // 251 + 1))[:size]


def seal(data: bytes, *, context: bytes = b"", record_size: int = RECORD) -> bytes:
    sealer = gcmstream.Sealer(KEY, context=context, record_size=record_size)
    return bytes(sealer.seal(data)) + bytes(sealer.close())


def open_all(wire: bytes, *, context: bytes = b"") -> bytes:
    return read_all(gcmstream.Opener(KEY, context=context), wire)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def agen(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


class ListReceiveStream(ByteReceiveStream):
    """A ByteReceiveStream over a list of chunks (receive() returns at most max_bytes)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._data = bytearray(b"".join(chunks))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._data:
            raise anyio.EndOfStream
        chunk = bytes(self._data[:max_bytes])
        del self._data[:max_bytes]
        return chunk

    async def aclose(self) -> None:
        pass


class CollectSendStream(ByteSendStream):
    def __init__(self) -> None:
        self.data = bytearray()
        self.sends = 0

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        assert isinstance(item, bytes)  # the pipeline hands transports memory they may keep
        self.data += item
        self.sends += 1

    async def aclose(self) -> None:
        pass


# -- async iterables -------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("size", SIZES)
async def test_iter_round_trip_interoperates_with_the_codec(size: int) -> None:
    data = payload(size)
    wire = await collect(pipeline.encrypt_iter(agen(pieces(data, 10_000)), key=KEY, context=b"c"))
    assert open_all(wire, context=b"c") == data
    for piece in (1 if size < 300 else 7_777, 1 << 20):
        chunks = pieces(seal(data, context=b"c"), piece)
        assert await collect(pipeline.decrypt_iter(agen(chunks), key=KEY, context=b"c")) == data


@pytest.mark.anyio
async def test_iter_yields_whole_records_and_takes_any_buffer() -> None:
    data = payload(2 * RECORD + 10)
    chunks = [bytearray(c) for c in pieces(data, 1000)] + [memoryview(b"tail")]
    wire = await collect(pipeline.encrypt_iter(agen(chunks), key=KEY))  # type: ignore[arg-type]
    out = [chunk async for chunk in pipeline.decrypt_iter(agen([wire]), key=KEY)]
    assert [len(c) for c in out] == [RECORD, RECORD, 14]
    assert b"".join(out) == data + b"tail"


@pytest.mark.anyio
async def test_decrypt_iter_releases_only_records_before_a_tampered_one() -> None:
    data = payload(5 * RECORD)
    wire = bytearray(seal(data))
    wire[record_offset(3) + 100] ^= 1
    got = bytearray()
    with pytest.raises(gcmstream.AuthenticationError, match="record 3"):
        async for chunk in pipeline.decrypt_iter(agen(pieces(bytes(wire), 50_000)), key=KEY):
            got += chunk
    assert got == data[: 3 * RECORD]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mangle", "error"),
    [
        pytest.param(lambda w: w[:-1], gcmstream.TruncatedStreamError, id="cut-final"),
        pytest.param(lambda w: w[: record_offset(2)], gcmstream.TruncatedStreamError, id="cut-boundary"),
        pytest.param(lambda w: w[:40], gcmstream.TruncatedStreamError, id="cut-header"),
        pytest.param(lambda w: b"", gcmstream.TruncatedStreamError, id="empty"),
        pytest.param(lambda w: w + b"x", gcmstream.TrailingDataError, id="trailing-byte"),
        pytest.param(lambda w: w + w, gcmstream.TrailingDataError, id="two-streams"),
        pytest.param(lambda w: b"XXXX" + w[4:], gcmstream.UnsupportedFormatError, id="magic"),
    ],
)
async def test_decrypt_iter_errors(mangle: object, error: type[Exception]) -> None:
    wire = seal(payload(3 * RECORD + 5))
    mangled = mangle(wire)  # type: ignore[operator]
    for piece in (1 << 20, 4096):
        with pytest.raises(error):
            await collect(pipeline.decrypt_iter(agen(pieces(mangled, piece)), key=KEY))


@pytest.mark.anyio
@pytest.mark.parametrize("record_size", [16 * 1024, RECORD, 1024 * 1024])
@pytest.mark.parametrize("mutable", [True, False], ids=["bytearray", "bytes"])
async def test_final_is_withheld_when_bytes_follow_it_in_the_same_chunk(
    record_size: int, mutable: bool
) -> None:
    """FORMAT.md 8.2 on the pipeline: four full records (the ring's worth), the last FINAL,
    then one byte, all in one chunk. The pipeline keeps what the full ring cannot take outside
    the opener; FINAL's plaintext must still be withheld, not released before the error."""
    data = os.urandom(4 * record_size)
    wire = bytes(gcmstream.Sealer(KEY, record_size=record_size).seal(data, final=True)) + b"x"
    chunk = bytearray(wire) if mutable else wire

    async def one_chunk() -> AsyncIterator[bytes | bytearray]:
        yield chunk

    got = bytearray()
    with pytest.raises(gcmstream.TrailingDataError):
        async for plain in pipeline.decrypt_iter(one_chunk(), key=KEY, max_record_size=record_size):
            got += plain
    assert got == data[: 3 * record_size]  # everything but FINAL's plaintext
    sink = CollectSendStream()
    with pytest.raises(gcmstream.TrailingDataError):
        await pipeline.decrypt_stream(one_chunk(), sink, key=KEY, max_record_size=record_size)
    assert sink.data == data[: 3 * record_size]


@pytest.mark.anyio
async def test_decrypt_iter_wrong_key_or_context() -> None:
    wire = seal(b"secret", context=b"one")
    with pytest.raises(gcmstream.KeyCommitmentError):
        await collect(pipeline.decrypt_iter(agen([wire]), key=KEY, context=b"two"))
    with pytest.raises(gcmstream.KeyCommitmentError):
        await collect(pipeline.decrypt_iter(agen([wire]), key=bytes(16), context=b"one"))


# -- anyio and asyncio streams ---------------------------------------------------------------


@pytest.mark.anyio
async def test_streams_with_anyio_byte_streams() -> None:
    data = payload(RECORD * 3 + 77)
    ciphertext = CollectSendStream()
    seen: list[int] = []
    await pipeline.encrypt_stream(
        ListReceiveStream(pieces(data, 5000)), ciphertext, key=KEY, progress=seen.append
    )
    assert sum(seen) == len(data)
    assert open_all(bytes(ciphertext.data)) == data
    plaintext = CollectSendStream()
    await pipeline.decrypt_stream(ListReceiveStream([bytes(ciphertext.data)]), plaintext, key=KEY)
    assert plaintext.data == data


@pytest.mark.anyio
async def test_decrypt_stream_writes_the_authenticated_prefix_before_raising() -> None:
    data = payload(4 * RECORD)
    wire = bytearray(seal(data))
    wire[record_offset(2) + 7] ^= 0x80
    sink = CollectSendStream()
    with pytest.raises(gcmstream.AuthenticationError):
        await pipeline.decrypt_stream(ListReceiveStream([bytes(wire)]), sink, key=KEY)
    assert sink.data == data[: 2 * RECORD]


@pytest.mark.anyio
async def test_streams_over_tcp_both_ways() -> None:
    """File -> encrypt_stream -> TCP -> decrypt_stream -> memory, over 127.0.0.1."""
    data = payload(2 * 1024 * 1024 + 3)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    received = CollectSendStream()

    async def serve_one(stream: SocketStream) -> None:
        async with stream:
            await pipeline.decrypt_stream(stream, received, key=KEY, context=b"tcp")
        tg.cancel_scope.cancel()

    with anyio.fail_after(20):
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, serve_one)
            async with await anyio.connect_tcp("127.0.0.1", port) as client:
                await pipeline.encrypt_stream(ListReceiveStream([data]), client, key=KEY, context=b"tcp")
                await client.send_eof()
    assert received.data == data


@pytest.mark.asyncio
async def test_asyncio_reader_and_writer() -> None:
    data = payload(RECORD * 5 + 1)
    done = asyncio.get_running_loop().create_future()
    received = bytearray()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sink = CollectSendStream()
        try:
            await pipeline.decrypt_stream(reader, sink, key=KEY)
            received.extend(sink.data)
            done.set_result(None)
        except Exception as exc:
            done.set_exception(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        source = asyncio.StreamReader()
        source.feed_data(data)
        source.feed_eof()
        await asyncio.wait_for(pipeline.encrypt_stream(source, writer, key=KEY), 20)
        writer.write_eof()
        await asyncio.wait_for(done, 20)
        writer.close()
        await writer.wait_closed()
    assert received == data


# -- files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_file_round_trip(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "plain").write_bytes(data)
    pipeline.encrypt_file(tmp_path / "plain", tmp_path / "cipher", key=KEY, context=b"f")
    assert open_all((tmp_path / "cipher").read_bytes(), context=b"f") == data
    pipeline.decrypt_file(tmp_path / "cipher", tmp_path / "out", key=KEY, context=b"f")
    assert (tmp_path / "out").read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "out", "plain"]


@pytest.mark.anyio
async def test_file_functions_async(tmp_path: Path) -> None:
    data = payload(RECORD * 2 + 9)
    await anyio.Path(tmp_path / "plain").write_bytes(data)
    seen: list[int] = []
    await pipeline.encrypt_file_async(tmp_path / "plain", tmp_path / "cipher", key=KEY, progress=seen.append)
    assert sum(seen) == len(data)
    await pipeline.decrypt_file_async(tmp_path / "cipher", tmp_path / "out", key=KEY)
    assert await anyio.Path(tmp_path / "out").read_bytes() == data


@pytest.mark.parametrize(
    ("mangle", "error"),
    [
        pytest.param(lambda w: w[: len(w) // 2], gcmstream.TruncatedStreamError, id="truncated"),
        pytest.param(
            lambda w: w[:-30] + bytes([w[-30] ^ 1]) + w[-29:], gcmstream.ProtocolError, id="tampered"
        ),
        pytest.param(lambda w: w + b"\0", gcmstream.TrailingDataError, id="trailing"),
    ],
)
def test_failed_decrypt_file_leaves_target_untouched(tmp_path: Path, mangle: object, error: type) -> None:
    wire = seal(payload(3 * RECORD))
    (tmp_path / "cipher").write_bytes(mangle(wire))  # type: ignore[operator]
    target = tmp_path / "out"
    with pytest.raises(error):
        pipeline.decrypt_file(tmp_path / "cipher", target, key=KEY)
    assert not target.exists()
    target.write_bytes(b"precious")
    with pytest.raises(error):
        pipeline.decrypt_file(tmp_path / "cipher", target, key=KEY)
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "out"]  # no temporary file left


def test_wrong_key_file_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "cipher").write_bytes(seal(b"x" * 1000))
    with pytest.raises(gcmstream.KeyCommitmentError):
        pipeline.decrypt_file(tmp_path / "cipher", tmp_path / "out", key=bytes(16))
    assert [p.name for p in tmp_path.iterdir()] == ["cipher"]


def test_output_modes_and_non_regular_targets(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    pipeline.encrypt_file(tmp_path / "plain", tmp_path / "cipher", key=KEY)
    pipeline.decrypt_file(tmp_path / "cipher", tmp_path / "new", key=KEY)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o600  # plaintext: private by default
    existing = tmp_path / "existing"
    existing.write_bytes(b"old")
    existing.chmod(0o666)
    pipeline.decrypt_file(tmp_path / "cipher", existing, key=KEY)
    assert existing.read_bytes() == b"data"
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600  # never the wider mode found there
    link = tmp_path / "link"
    link.symlink_to(existing)
    pipeline.encrypt_file(tmp_path / "plain", link, key=KEY)  # replaces what the link points to
    assert link.is_symlink()
    assert open_all(existing.read_bytes()) == b"data"
    pipeline.decrypt_file(tmp_path / "cipher", os.devnull, key=KEY)  # written in place, not replaced
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_file_function_refuses_its_input_as_its_output(tmp_path: Path) -> None:
    """``decrypt_file(F, F)`` replaced the ciphertext by its plaintext where the command line
    refuses (a hostile review): every file function now raises SameFileError (a UsageError and
    a ValueError) before anything is read or written, by any path or link to the input."""
    plain, cipher = tmp_path / "plain", tmp_path / "cipher"
    plain.write_bytes(b"precious")
    pipeline.encrypt_file(plain, cipher, key=KEY)
    wire = cipher.read_bytes()
    (tmp_path / "link").symlink_to(plain)
    for call in (
        partial(pipeline.encrypt_file, plain, plain, key=KEY),
        partial(pipeline.encrypt_file, plain, tmp_path / "link", key=KEY),
        partial(pipeline.encrypt_file, tmp_path / "link", tmp_path / "." / "plain", key=KEY),
        partial(pipeline.decrypt_file, cipher, cipher, key=KEY),
        partial(anyio.run, partial(pipeline.encrypt_file_async, plain, plain, key=KEY)),
        partial(anyio.run, partial(pipeline.decrypt_file_async, cipher, cipher, key=KEY)),
    ):
        with pytest.raises(gcmstream.SameFileError, match="is both the input file and the output") as found:
            call()
        assert isinstance(found.value, gcmstream.UsageError) and isinstance(found.value, ValueError)
        assert found.value.what == "input file"
    assert plain.read_bytes() == b"precious" and cipher.read_bytes() == wire
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "link", "plain"]  # no temporary file
    # a character device is never "the same file": what is read and what is written are apart
    pipeline.encrypt_file(os.devnull, os.devnull, key=KEY)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a FIFO is fine, a block device node needs root")
def test_a_fifo_or_block_device_as_input_and_output_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    """A FIFO or a block device is written in place: as both ends, the output would be read
    back (and a FIFO's open waited for ever for a writer). Refused before either is opened."""
    os.mkfifo(tmp_path / "fifo")
    os.mknod(tmp_path / "disk", stat.S_IFBLK | 0o600, os.makedev(7, 250))  # never opened
    for node in ("fifo", "disk"):
        with pytest.raises(gcmstream.SameFileError, match=f"'{tmp_path / node}' is both"):
            pipeline.decrypt_file(tmp_path / node, tmp_path / node, key=KEY)


@pytest.mark.anyio
async def test_atomic_output_mode_is_what_the_caller_asks(tmp_path: Path) -> None:
    target = tmp_path / "t"
    async with pipeline.atomic_output(target, mode=0o644) as file:
        await file.write(b"shared on purpose")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's symlink needs root")
def test_output_refuses_a_symlink_or_fifo_owned_by_another_user(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    bait = tmp_path / "bait"
    bait.write_bytes(b"theirs")
    planted = tmp_path / "planted"
    planted.symlink_to(bait)
    os.lchown(planted, 65534, 65534)
    with pytest.raises(PermissionError, match="symbolic link owned by another user") as info:
        pipeline.encrypt_file(tmp_path / "plain", planted, key=KEY)
    assert info.value.filename == str(planted) and info.value.errno == errno.EPERM
    assert bait.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bait", "plain", "planted"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.chown(fifo, 65534, 65534)
    with pytest.raises(PermissionError, match="FIFO, socket or device owned by another user"):
        pipeline.encrypt_file(tmp_path / "plain", fifo, key=KEY)  # refused before it could block


def test_output_through_a_dangling_link_of_ours_is_created_where_it_points(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")  # nothing there yet
    pipeline.encrypt_file(tmp_path / "plain", link, key=KEY)
    assert link.is_symlink() and open_all((tmp_path / "target").read_bytes()) == b"data"


def test_output_through_a_loop_of_links_is_eloop(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="Too many levels of symbolic links") as info:
        pipeline.encrypt_file(tmp_path / "plain", tmp_path / "a", key=KEY)
    assert info.value.errno == errno.ELOOP and info.value.filename == str(tmp_path / "a")


def test_output_through_a_link_into_a_missing_directory_names_the_callers_path(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere" / "out")
    with pytest.raises(FileNotFoundError) as info:
        pipeline.encrypt_file(tmp_path / "plain", link, key=KEY)
    assert info.value.filename == str(link)  # what the caller named, not where the link points


def test_a_temporary_output_that_cannot_be_opened_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gcmstream._output

    (tmp_path / "plain").write_bytes(b"data")

    def failing_open(*args: object, **kwargs: object) -> None:
        raise MemoryError("no memory for the file object")

    monkeypatch.setattr(gcmstream._output, "open", failing_open, raising=False)
    with pytest.raises(MemoryError):
        pipeline.encrypt_file(tmp_path / "plain", tmp_path / "out", key=KEY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_output_in_a_missing_directory_names_the_callers_path(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    with pytest.raises(FileNotFoundError) as info:
        pipeline.encrypt_file(tmp_path / "plain", tmp_path / "nowhere" / "out", key=KEY)
    assert info.value.filename == str(tmp_path / "nowhere" / "out")  # not the temporary file


@pytest.mark.anyio
async def test_atomic_output_discards_on_exception_and_cancellation(tmp_path: Path) -> None:
    target = tmp_path / "t"
    with pytest.raises(RuntimeError):
        async with pipeline.atomic_output(target) as file:
            await file.write(b"partial")
            raise RuntimeError("boom")
    with anyio.move_on_after(0.05):
        async with pipeline.atomic_output(target) as file:
            await file.write(b"partial")
            await anyio.sleep_forever()
    assert [p async for p in anyio.Path(tmp_path).iterdir()] == []
    async with pipeline.atomic_output(target) as file:
        await file.write(b"whole")
    assert await anyio.Path(target).read_bytes() == b"whole"


class GatedReceiveStream(ByteReceiveStream):
    """Delivers its first part at once; before each later part (and before its end) it signals
    ``waiting[i]`` and waits for ``gates[i]``."""

    def __init__(self, parts: list[bytes]) -> None:
        self._parts = parts
        self._calls = 0
        self.waiting = [anyio.Event() for _ in parts]
        self.gates = [anyio.Event() for _ in parts]

    async def receive(self, max_bytes: int = 65536) -> bytes:
        call, self._calls = self._calls, self._calls + 1
        if call:
            self.waiting[call - 1].set()
            await self.gates[call - 1].wait()
        if call >= len(self._parts):
            raise anyio.EndOfStream
        return self._parts[call]

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
async def test_decrypt_stream_passes_on_records_before_waiting_for_input() -> None:
    data = payload(3 * RECORD + 10)
    wire = seal(data)
    source = GatedReceiveStream([wire[: record_offset(2)], wire[record_offset(2) :]])
    sink = CollectSendStream()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(pipeline.decrypt_stream, source, sink, key=KEY))
            await source.waiting[0].wait()  # two records in, the rest not yet sent
            assert sink.data == data[: 2 * RECORD]
            source.gates[0].set()
            await source.waiting[1].wait()  # FINAL in, the source has not ended yet
            assert sink.data == data
            source.gates[1].set()


def test_plain_file_objects_are_refused_with_the_way_out(tmp_path: Path) -> None:
    """The README once said decrypt_stream takes "files": a plain open() file is not one."""
    (tmp_path / "plain").write_bytes(b"data")

    async def attempts() -> None:
        with open(tmp_path / "plain", "rb") as source, open(tmp_path / "out", "wb") as sink:  # noqa: ASYNC230
            with pytest.raises(gcmstream.UnsupportedEndpointError, match=r"anyio\.wrap_file") as info:
                await pipeline.encrypt_stream(source, sink, key=KEY)  # type: ignore[arg-type]
            assert isinstance(info.value, TypeError)
            async with await anyio.open_file(tmp_path / "plain", "rb") as wrapped:
                refused = r"cannot write to .*anyio\.wrap_file"
                with pytest.raises(gcmstream.UnsupportedEndpointError, match=refused):
                    await pipeline.encrypt_stream(wrapped, sink, key=KEY)  # type: ignore[arg-type]
            with pytest.raises(gcmstream.UnsupportedEndpointError, match=r"cannot read from a builtins\.int"):
                await pipeline.decrypt_stream(42, wrapped, key=KEY)  # type: ignore[arg-type]

    anyio.run(attempts)


# -- config= on the file and pipeline functions (issue 24.1) -------------------------------------

SEALING = ("encrypt_iter", "encrypt_stream", "encrypt_file_async", "encrypt_file", "encrypt_path")
OPENING = (
    "decrypt_iter",
    "decrypt_stream",
    "decrypt_file_async",
    "decrypt_file",
    "decrypt_path",
    "open_file",
    "open_file_async",
)


def _function(name: str) -> Any:
    from gcmstream import files

    return getattr(files, name) if name.endswith("_path") else getattr(gcmstream, name)


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _seal(name: str, data: bytes, where: Path, **options: Any) -> bytes:
    """``data`` sealed by function ``name`` with ``options``; its ciphertext."""
    function, src, dst = _function(name), where / "plain", where / "sealed"
    src.write_bytes(data)
    if name == "encrypt_iter":
        return b"".join([chunk async for chunk in function(_chunks(data), **options)])
    if name == "encrypt_stream":
        async with await anyio.open_file(dst, "wb") as sink:
            await function(_chunks(data), sink, **options)
    elif name == "encrypt_file_async":
        await function(src, dst, **options)
    else:
        function(src, dst, **options)
    return dst.read_bytes()


async def _open(name: str, wire: bytes, where: Path, **options: Any) -> object:
    """``wire`` opened by function ``name`` with ``options``: the plaintext, or the error's type."""
    function, src, dst = _function(name), where / "wire", where / "opened"
    src.write_bytes(wire)
    try:
        if name == "decrypt_iter":
            return b"".join([chunk async for chunk in function(_chunks(wire), **options)])
        if name == "decrypt_stream":
            async with await anyio.open_file(dst, "wb") as sink:
                await function(_chunks(wire), sink, **options)
        elif name == "decrypt_file_async":
            await function(src, dst, **options)
        elif name == "open_file":
            with function(src, **options) as file:
                return file.read()
        elif name == "open_file_async":
            async with await function(src, **options) as file:
                return await file.read()
        else:
            function(src, dst, **options)
        return dst.read_bytes()
    except gcmstream.GcmStreamError as exc:
        return type(exc)


# a configuration shared with sockets: the channel's options and timeouts do not apply to files
FILE_CONFIG = gcmstream.Configuration(
    key=KEY,
    context=b"files",
    record_size=1000,
    max_record_size=1000,
    key_exchange=gcmstream.KeyExchange.X25519,
    local_id="a host",
    idle_timeout=5,
)


@pytest.mark.parametrize("name", SEALING)
def test_a_sealing_function_given_config_seals_as_given_the_keywords(name: str, tmp_path: Path) -> None:
    """config= seals with its key, context and record size, as those keywords do."""
    data = os.urandom(2500)

    async def both() -> list[bytes]:
        keywords = {"key": KEY, "context": b"files", "record_size": 1000}
        return [
            await _seal(name, data, tmp_path, **options) for options in (keywords, {"config": FILE_CONFIG})
        ]

    for wire in asyncio.run(both()):
        assert read_all(gcmstream.Opener(KEY, context=b"files"), wire) == data
        with pytest.raises(gcmstream.RecordTooLargeError):  # its records are 1,000 bytes
            read_all(gcmstream.Opener(KEY, context=b"files", max_record_size=999), wire)
        with pytest.raises(gcmstream.KeyCommitmentError):  # (another context: refused)
            read_all(gcmstream.Opener(KEY, context=b"other"), wire)


@pytest.mark.parametrize("name", OPENING)
def test_an_opening_function_given_config_opens_as_given_the_keywords(name: str, tmp_path: Path) -> None:
    """config= opens with its key (any of a KeyRing's), context and max_record_size, as those
    keywords do: a stream of 1,000-byte records opens, one of 2,000-byte records is refused."""
    data = os.urandom(2500)
    small, large = (seal(data, context=b"files", record_size=size) for size in (1000, 2000))
    config = FILE_CONFIG.replace(key=gcmstream.KeyRing([gcmstream.generate_key(), KEY]))

    async def both() -> list[list[object]]:
        keywords = {"key": KEY, "context": b"files", "max_record_size": 1000}
        return [
            [await _open(name, wire, tmp_path, **options) for wire in (small, large)]
            for options in (keywords, {"config": config})
        ]

    assert asyncio.run(both()) == [[data, gcmstream.RecordTooLargeError]] * 2


_FILE_CONFLICTS: list[tuple[str, str, object]] = [
    (name, option, value)
    for name in SEALING + OPENING
    for option, value in (
        ("key", KEY),
        ("passphrase", "words"),
        ("context", b""),
        ("record_size" if name in SEALING else "max_record_size", 65536),
        ("recipients" if name in SEALING else "identities", []),
    )
]


@pytest.mark.parametrize(("name", "option", "value"), _FILE_CONFLICTS)
def test_a_file_option_beside_config_is_a_type_error_naming_it(
    name: str, option: str, value: object, tmp_path: Path
) -> None:
    """As every entry point: config= holds the key and the sizes, so any of them (or another
    way to key it) given beside it is refused by name, even at its default value, before any
    file is written."""
    work = _seal if name in SEALING else _open
    with pytest.raises(TypeError, match=rf"\b{option}= given beside config="):
        asyncio.run(work(name, b"", tmp_path, config=FILE_CONFIG, **{option: value}))
    for output in (tmp_path / "sealed", tmp_path / "opened"):  # (a stream's sink is opened by the test)
        assert not output.exists() or not output.stat().st_size


def test_an_output_made_a_link_to_the_input_after_the_first_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same-file rule looked at the paths once, before the key or passphrase was read
    (scrypt, a FIFO): an output name made a link to the input in that gap was then followed,
    and the rename replaced the input by its ciphertext (a hostile review). It is now also
    applied to what is open: the input's descriptor against what ``output_target`` found."""
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"precious")
    made = pipeline.sealer_for  # what files.encrypt_path calls (imported from pipeline)

    def then_link(*args: Any, **kwargs: Any) -> Any:
        sealer = made(*args, **kwargs)  # the keying done: now the name leads to the input
        out.symlink_to(plain)
        return sealer

    monkeypatch.setattr(files, "sealer_for", then_link)
    with pytest.raises(gcmstream.SameFileError, match="is both the input file and the output"):
        pipeline.encrypt_file(plain, out, key=KEY)
    assert plain.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "plain"]  # no temporary file


def test_an_input_moved_to_the_output_name_while_it_is_read_is_kept(tmp_path: Path) -> None:
    """The rename at the end replaces whatever is at the output's name then: the input
    itself, if it was moved there meanwhile. Checked again just before the rename."""
    plain, cipher, out = tmp_path / "plain", tmp_path / "cipher", tmp_path / "out"
    plain.write_bytes(b"precious")
    pipeline.encrypt_file(plain, cipher, key=KEY)
    for function, source in ((files.encrypt_path, plain), (files.decrypt_path, cipher)):
        kept = source.read_bytes()
        moved: list[int] = []

        def move(done: int, source: Path = source, moved: list[int] = moved) -> None:
            if not moved:  # read through its descriptor: the work goes on
                moved.append(done)
                source.rename(out)

        with pytest.raises(gcmstream.SameFileError, match="is both the input file and the output"):
            function(source, out, key=KEY, progress=move)
        assert moved and out.read_bytes() == kept, function
        out.rename(source)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]  # no temporary file
