"""Tink's AES-GCM-HKDF streaming format through every gcmstream surface, against the real
``tink`` package (issue 26): the asyncio one-way reader and writer (``decrypting_reader`` /
``encrypting_writer`` with ``tink=``), the pipelines (iterables, streams, files, sync and async,
``tink=``), ``open_tink_file_async`` and the command line (``--format tink``). Tink writes and
each surface reads; each surface writes and Tink reads; across both key sizes, every HKDF hash,
small, 4 KB and 1 MiB segments, plaintext lengths around the segment boundaries and associated
data from empty to 64 KiB. Tampered ciphertexts are refused by Tink and by every surface, which
releases only whole authenticated segments (files and the CLI's ``-o``: no output at all)."""

from __future__ import annotations

import asyncio
import io
import os
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gcmstream import (
    AuthenticationError,
    MalformedHeaderError,
    ProtocolError,
    StreamBrokenError,
    TruncatedStreamError,
    aio,
    pipeline,
)
from gcmstream.cli import EXIT_TAMPERED, EXIT_TRUNCATED, EXIT_USAGE
from gcmstream.tinkfile import open_tink_file_async
from gcmstream.tinkstream import TinkHash, TinkKeyset, TinkOpener, TinkSealer, read_tink_keyset

from .helpers import run_cli
from .test_tinkstream import keyset_json, lengths, tink, tink_handle, tink_open, tink_seal

TIMEOUT = 120  # only there to turn a hang into a failure


# -- each surface as "ciphertext in, plaintext out" and "plaintext in, ciphertext out" ----------

Read = Callable[[TinkKeyset, bytes, bytes, Path], bytes]
Write = Callable[[TinkKeyset, bytes, bytes, Path], bytes]


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    """``data`` in pieces of ``size`` bytes (odd sizes, so that segments straddle them), or of
    64 KiB for inputs of a MiB or more (a few thousand awaits, not tens of thousands)."""
    for piece in pieces(data, size if len(data) < 1 << 20 else 1 << 16):
        yield piece


async def _aio_read(
    keyset: TinkKeyset, ciphertext: bytes, ad: bytes, got: bytearray, piece: int, read_size: int = 17
) -> None:
    """decrypting_reader(tink=) over a StreamReader fed in pieces, read ``read_size`` bytes at
    a time into ``got`` (what it released, kept if it raises)."""
    inner = asyncio.StreamReader()
    reader = aio.decrypting_reader(inner, tink=keyset, context=ad)

    async def feed() -> None:
        for part in pieces(ciphertext, piece):
            inner.feed_data(part)
            await asyncio.sleep(0)
        inner.feed_eof()

    feeder = asyncio.create_task(feed())
    try:
        while chunk := await reader.read(read_size):
            got += chunk
        assert reader.at_eof()
    finally:
        await feeder


def aio_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, _: Path) -> bytes:
    got = bytearray()
    asyncio.run(_aio_read(keyset, ciphertext, ad, got, 101 if len(ciphertext) < 1 << 20 else 1 << 16, 4096))
    return bytes(got)


async def _aio_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes) -> bytes:
    """encrypting_writer(tink=) into one end of a socketpair, in writes of varied sizes with
    drains; the other end's bytes."""
    ours, theirs = socket.socketpair()
    _, inner = await asyncio.open_unix_connection(sock=ours)
    peer_reader, peer_writer = await asyncio.open_unix_connection(sock=theirs)
    writer = aio.encrypting_writer(inner, tink=keyset, context=ad)
    received = asyncio.create_task(peer_reader.read())
    rng = random.Random(len(plaintext))
    position = 0
    while position < len(plaintext):
        size = rng.choice((1, 7, 100, 5000))
        writer.write(plaintext[position : position + size])
        position += size
        if rng.random() < 0.3:
            await writer.drain()
    writer.write_eof()
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    data = await received
    peer_writer.close()
    await peer_writer.wait_closed()
    return data


def aio_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, _: Path) -> bytes:
    return asyncio.run(_aio_write(keyset, plaintext, ad))


def iter_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, _: Path) -> bytes:
    async def run() -> bytes:
        return b"".join(
            [part async for part in pipeline.decrypt_iter(chunks(ciphertext, 97), tink=keyset, context=ad)]
        )

    return anyio.run(run)


def iter_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, _: Path) -> bytes:
    async def run() -> bytes:
        return b"".join(
            [part async for part in pipeline.encrypt_iter(chunks(plaintext, 89), tink=keyset, context=ad)]
        )

    return anyio.run(run)


def stream_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, _: Path) -> bytes:
    sink = io.BytesIO()

    async def run() -> None:
        await pipeline.decrypt_stream(chunks(ciphertext, 61), anyio.wrap_file(sink), tink=keyset, context=ad)

    anyio.run(run)
    return sink.getvalue()


def stream_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, _: Path) -> bytes:
    sink = io.BytesIO()

    async def run() -> None:
        source = anyio.wrap_file(io.BytesIO(plaintext))
        await pipeline.encrypt_stream(source, anyio.wrap_file(sink), tink=keyset, context=ad)

    anyio.run(run)
    return sink.getvalue()


def file_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "c").write_bytes(ciphertext)
    pipeline.decrypt_file(tmp / "c", tmp / "p", tink=keyset, context=ad)
    return (tmp / "p").read_bytes()


def file_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "p").write_bytes(plaintext)
    pipeline.encrypt_file(tmp / "p", tmp / "c", tink=keyset, context=ad)
    return (tmp / "c").read_bytes()


def file_async_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "c").write_bytes(ciphertext)
    anyio.run(lambda: pipeline.decrypt_file_async(tmp / "c", tmp / "p", tink=keyset, context=ad))
    return (tmp / "p").read_bytes()


def file_async_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "p").write_bytes(plaintext)
    anyio.run(lambda: pipeline.encrypt_file_async(tmp / "p", tmp / "c", tink=keyset, context=ad))
    return (tmp / "c").read_bytes()


def random_access_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "c").write_bytes(ciphertext)

    async def run() -> bytes:
        async with await open_tink_file_async(tmp / "c", keyset, ad) as file:
            whole = await file.read()
            await file.seek(len(whole) // 2)
            assert await file.read() == whole[len(whole) // 2 :]
            return whole

    return anyio.run(run)


def write_keyset(keyset_text: str, tmp: Path) -> Path:
    path = tmp / "keyset.json"
    path.write_text(keyset_text)
    path.chmod(0o600)
    return path


KEYSETS: dict[int, str] = {}  # id(keyset) -> its JSON text, for the CLI surfaces


def cli_args(keyset: TinkKeyset, ad: bytes, tmp: Path) -> list[str | Path]:
    return [
        "--format",
        "tink",
        "-k",
        write_keyset(KEYSETS[id(keyset)], tmp),
        "--context",
        ad.decode("latin-1"),
    ]


def cli_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "c").write_bytes(ciphertext)
    run = run_cli("decrypt", *cli_args(keyset, ad, tmp), "-o", tmp / "p", tmp / "c")
    assert run.status == 0, run.stderr
    return (tmp / "p").read_bytes()


def cli_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, tmp: Path) -> bytes:
    (tmp / "p").write_bytes(plaintext)
    run = run_cli("encrypt", *cli_args(keyset, ad, tmp), "-o", tmp / "c", tmp / "p")
    assert run.status == 0, run.stderr
    return (tmp / "c").read_bytes()


def cli_pipe_read(keyset: TinkKeyset, ciphertext: bytes, ad: bytes, tmp: Path) -> bytes:
    run = run_cli("decrypt", *cli_args(keyset, ad, tmp), input=ciphertext)
    assert run.status == 0, run.stderr
    return run.stdout


def cli_pipe_write(keyset: TinkKeyset, plaintext: bytes, ad: bytes, tmp: Path) -> bytes:
    run = run_cli("encrypt", *cli_args(keyset, ad, tmp), input=plaintext)
    assert run.status == 0, run.stderr
    return run.stdout


# The CLI's --context is text: its associated data here is ASCII.
SURFACES: dict[str, tuple[Read, Write | None]] = {
    "aio": (aio_read, aio_write),
    "iter": (iter_read, iter_write),
    "stream": (stream_read, stream_write),
    "file": (file_read, file_write),
    "file_async": (file_async_read, file_async_write),
    "open_tink_file_async": (random_access_read, None),
    "cli": (cli_read, cli_write),
    "cli_pipe": (cli_pipe_read, cli_pipe_write),
}
TEXT_ONLY = {"cli", "cli_pipe"}


def keyset_for(key_size: int, hkdf_hash: TinkHash, segment: int) -> tuple[Any, TinkKeyset]:
    handle = tink_handle(key_size, hkdf_hash, segment)
    text = keyset_json(handle)
    keyset = read_tink_keyset(text)
    KEYSETS[id(keyset)] = text
    return handle, keyset


# every key size and HKDF hash at the smallest segment Tink accepts, and 4 KB (Tink's template)
SMALL = [(size, hkdf_hash, size + 25) for size in (16, 32) for hkdf_hash in TinkHash]
PARAMETERS = [*SMALL, (16, TinkHash.SHA256, 4096), (32, TinkHash.SHA1, 4096)]


def associated_data(surface: str, rng: random.Random) -> bytes:
    if surface in TEXT_ONLY:
        return rng.choice((b"", b"a", b"backup v1"))
    return rng.randbytes(rng.choice((0, 1, 100)))


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("key_size", "hkdf_hash", "segment"), PARAMETERS)
def test_tink_and_every_surface_interoperate(
    surface: str, key_size: int, hkdf_hash: TinkHash, segment: int, tmp_path: Path
) -> None:
    read, write = SURFACES[surface]
    handle, keyset = keyset_for(key_size, hkdf_hash, segment)
    rng = random.Random(f"{surface} {key_size} {hkdf_hash} {segment}")
    for length in lengths(keyset.primary):
        plaintext = rng.randbytes(length)
        ad = associated_data(surface, rng)
        assert read(keyset, tink_seal(handle, plaintext, ad), ad, tmp_path) == plaintext, length
        if write is not None:
            ours = write(keyset, plaintext, ad, tmp_path)
            assert tink_open(handle, ours, ad) == plaintext, length


@pytest.mark.parametrize("surface", SURFACES)
def test_one_mib_segments_through_every_surface(surface: str, tmp_path: Path) -> None:
    read, write = SURFACES[surface]
    handle, keyset = keyset_for(32, TinkHash.SHA512, 1 << 20)
    first = (1 << 20) - 40 - 16
    rng = random.Random(surface)
    for length in (first, first + 1, first + (1 << 20) - 16 + 1):
        plaintext = rng.randbytes(length)
        assert read(keyset, tink_seal(handle, plaintext, b"big"), b"big", tmp_path) == plaintext, length
        if write is not None:
            assert tink_open(handle, write(keyset, plaintext, b"big", tmp_path), b"big") == plaintext, length


@pytest.mark.parametrize("surface", sorted(set(SURFACES) - TEXT_ONLY))
@pytest.mark.parametrize("ad_size", [0, 65536])
def test_associated_data_empty_and_64_kib_through_every_surface(
    surface: str, ad_size: int, tmp_path: Path
) -> None:
    read, write = SURFACES[surface]
    handle, keyset = keyset_for(16, TinkHash.SHA256, 4096)
    ad = random.Random(ad_size).randbytes(ad_size)
    plaintext = random.Random(surface).randbytes(10000)
    assert read(keyset, tink_seal(handle, plaintext, ad), ad, tmp_path) == plaintext
    if write is not None:
        assert tink_open(handle, write(keyset, plaintext, ad, tmp_path), ad) == plaintext
    with pytest.raises(AuthenticationError):  # the associated data is bound: one byte more fails
        read(keyset, tink_seal(handle, plaintext, ad), ad + b"x", tmp_path)


def test_64_kib_context_through_the_command_line(tmp_path: Path) -> None:
    handle, keyset = keyset_for(16, TinkHash.SHA256, 4096)
    ad = b"c" * 65536  # the CLI's --context bound is 64 KiB
    plaintext = b"sixty-four " * 1000
    assert cli_read(keyset, tink_seal(handle, plaintext, ad), ad, tmp_path) == plaintext
    assert tink_open(handle, cli_write(keyset, plaintext, ad, tmp_path), ad) == plaintext


# -- tampering ---------------------------------------------------------------------------------

# 64-byte segments: 24 bytes of plaintext in segment 0 (after the 24-byte header), 48 in the others
SEGMENT_PLAIN = (24, 48)


def tampered(ciphertext: bytes) -> Iterator[tuple[str, bytes, type[ProtocolError]]]:
    flipped = bytearray(ciphertext)
    flipped[64 * 2 + 5] ^= 0x80
    yield "flip in segment 2", bytes(flipped), AuthenticationError
    yield "cut after segment 2", ciphertext[: 64 * 3], TruncatedStreamError
    yield "segment 1 dropped", ciphertext[:64] + ciphertext[128:], AuthenticationError
    yield (
        "segments 1 and 2 swapped",
        ciphertext[:64] + ciphertext[128:192] + ciphertext[64:128] + ciphertext[192:],
        (AuthenticationError),
    )
    yield "one byte appended", ciphertext + b"\x00", AuthenticationError
    yield "header length byte edited", b"\x28" + ciphertext[1:], MalformedHeaderError
    salt = bytearray(ciphertext)
    salt[3] ^= 1
    yield "salt edited", bytes(salt), AuthenticationError


@pytest.fixture(scope="module")
def victim() -> tuple[Any, TinkKeyset, bytes, bytes]:
    handle, keyset = keyset_for(16, TinkHash.SHA256, 64)
    plaintext = random.Random(64).randbytes(24 + 48 * 4 + 10)
    return handle, keyset, plaintext, tink_seal(handle, plaintext, b"ad")


def on_a_segment_boundary(plaintext: bytes, got: bytes) -> bool:
    first, middle = SEGMENT_PLAIN
    return plaintext.startswith(got) and (len(got) == 0 or (len(got) - first) % middle == 0)


def streaming_release(
    surface: str, keyset: TinkKeyset, ciphertext: bytes, ad: bytes
) -> tuple[bytes, BaseException]:
    """What a streaming surface released before it raised, and what it raised."""
    got = bytearray()
    try:
        if surface == "aio":
            asyncio.run(_aio_read(keyset, ciphertext, ad, got, 13))
        elif surface == "iter":

            async def run_iter() -> None:
                async for part in pipeline.decrypt_iter(chunks(ciphertext, 13), tink=keyset, context=ad):
                    got.extend(part)

            anyio.run(run_iter)
        else:
            sink = io.BytesIO()
            try:

                async def run_stream() -> None:
                    await pipeline.decrypt_stream(
                        chunks(ciphertext, 13), anyio.wrap_file(sink), tink=keyset, context=ad
                    )

                anyio.run(run_stream)
            finally:
                got.extend(sink.getvalue())
    except ProtocolError as exc:
        return bytes(got), exc
    raise AssertionError(f"{surface} did not refuse the tampered ciphertext")


@pytest.mark.parametrize("surface", ["aio", "iter", "stream"])
def test_streaming_surfaces_refuse_tampering_and_release_only_authenticated_segments(
    surface: str, victim: tuple[Any, TinkKeyset, bytes, bytes]
) -> None:
    handle, keyset, plaintext, ciphertext = victim
    for name, bad, error in tampered(ciphertext):
        with pytest.raises(tink.TinkError):
            tink_open(handle, bad, b"ad")
        got, raised = streaming_release(surface, keyset, bad, b"ad")
        assert isinstance(raised, error), (name, raised)
        assert on_a_segment_boundary(plaintext, got), (name, len(got))
    got, raised = streaming_release(surface, keyset, ciphertext, b"other")
    assert isinstance(raised, AuthenticationError) and raised.record_number == 0 and not got


def test_the_aio_reader_raises_again_after_a_failure(victim: tuple[Any, TinkKeyset, bytes, bytes]) -> None:
    _, keyset, plaintext, ciphertext = victim
    bad = bytearray(ciphertext)
    bad[64 * 2 + 5] ^= 0x80

    async def run() -> None:
        inner = asyncio.StreamReader()
        inner.feed_data(bytes(bad))
        inner.feed_eof()
        reader = aio.decrypting_reader(inner, tink=keyset, context=b"ad")
        assert await reader.readexactly(24 + 48) == plaintext[: 24 + 48]
        with pytest.raises(AuthenticationError):
            await reader.read()
        for call in (reader.read(), reader.readline(), reader.readinto(bytearray(10))):
            with pytest.raises(StreamBrokenError):
                await call
        assert not reader.at_eof()

    asyncio.run(run())


def test_the_aio_reader_verbs_read_tink_streams(victim: tuple[Any, TinkKeyset, bytes, bytes]) -> None:
    _, keyset, _, _ = victim
    plaintext = b"".join(b"line %d\n" % n for n in range(200))
    ciphertext = pipeline_free_seal(keyset, plaintext, b"ad")

    async def run() -> None:
        inner = asyncio.StreamReader()
        inner.feed_data(ciphertext)
        inner.feed_eof()
        reader = aio.decrypting_reader(inner, tink=keyset, context=b"ad")
        assert await reader.readline() == b"line 0\n"
        assert await reader.readuntil(b"2\n") == b"line 1\nline 2\n"
        buffer = bytearray(5)
        assert await reader.readinto(buffer) == 5 and buffer == b"line "
        rest = bytearray()
        async for chunk in reader.iter_chunks():
            rest += chunk
        assert b"line " + bytes(rest) == plaintext[len(b"line 0\nline 1\nline 2\n") :]
        assert reader.at_eof()

    asyncio.run(run())


def pipeline_free_seal(keyset: TinkKeyset, plaintext: bytes, ad: bytes) -> bytes:
    sealer = TinkSealer(keyset, ad)
    return bytes(sealer.seal(plaintext)) + bytes(sealer.close())


def test_the_aio_writer_reports_tink_figures_and_waits_for_full_segments() -> None:
    _, keyset = keyset_for(16, TinkHash.SHA256, 64)

    async def run() -> None:
        ours, theirs = socket.socketpair()
        _, inner = await asyncio.open_unix_connection(sock=ours)
        peer_reader, peer_writer = await asyncio.open_unix_connection(sock=theirs)
        writer = aio.encrypting_writer(inner, tink=keyset, context=b"ad")
        writer.write(b"x" * 10)
        await writer.drain()  # no short segment: only the header goes out
        assert writer.sealer.pending == 10 and writer.get_extra_info("gcmstream_records_sealed") == 0
        writer.write(b"y" * 100)  # fills segment 0 (24) and 1 (48), holds 38
        await writer.drain()
        assert writer.get_extra_info("gcmstream_records_sealed") == 2
        assert writer.get_extra_info("gcmstream_bytes_sealed") == 72
        assert writer.get_extra_info("gcmstream_suite") == "AES_128_GCM"
        writer.write_eof()
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        data = await peer_reader.read()
        peer_writer.close()
        await peer_writer.wait_closed()
        opener = TinkOpener(keyset, b"ad")
        opener.receive_data(data)
        opener.receive_eof()
        assert opener.read() == b"x" * 10 + b"y" * 100

    asyncio.run(run())


@pytest.mark.parametrize("surface", ["file", "file_async"])
def test_file_surfaces_leave_no_output_for_a_tampered_file(
    surface: str, victim: tuple[Any, TinkKeyset, bytes, bytes], tmp_path: Path
) -> None:
    read, _ = SURFACES[surface]
    _, keyset, _, ciphertext = victim
    for name, bad, error in tampered(ciphertext):
        with pytest.raises(error):
            read(keyset, bad, b"ad", tmp_path)
        assert not (tmp_path / "p").exists(), name


def test_random_access_refuses_tampering(
    victim: tuple[Any, TinkKeyset, bytes, bytes], tmp_path: Path
) -> None:
    _, keyset, _, ciphertext = victim
    for _name, bad, error in tampered(ciphertext):
        with pytest.raises(error):  # at open, or by the read that touches the segment
            random_access_read(keyset, bad, b"ad", tmp_path)


def test_options_beside_tink_are_refused(tmp_path: Path) -> None:
    _, keyset = keyset_for(16, TinkHash.SHA256, 64)

    async def make_reader() -> None:
        aio.decrypting_reader(asyncio.StreamReader(), tink=keyset, max_record_size=1 << 20)

    with pytest.raises(TypeError, match="max_record_size cannot be given with tink="):
        asyncio.run(make_reader())
    with pytest.raises(TypeError, match="key, record_size cannot be given with tink="):
        pipeline.encrypt_file(tmp_path / "a", tmp_path / "b", tink=keyset, key=bytes(16), record_size=4096)
    assert not (tmp_path / "b").exists()


# -- the command line ---------------------------------------------------------------------------

MIDDLE_ONLY = {"flip in segment 2", "segments 1 and 2 swapped"}  # header, first and last intact
EXPECTED_EXIT = {
    AuthenticationError: EXIT_TAMPERED,
    MalformedHeaderError: EXIT_TAMPERED,
    TruncatedStreamError: EXIT_TRUNCATED,
}


def test_the_cli_refuses_tampering_naming_the_file_and_leaves_no_output(
    victim: tuple[Any, TinkKeyset, bytes, bytes], tmp_path: Path
) -> None:
    _, keyset, plaintext, ciphertext = victim
    keyset_file = write_keyset(KEYSETS[id(keyset)], tmp_path)
    for name, bad, error in tampered(ciphertext):
        (tmp_path / "bad").write_bytes(bad)
        run = run_cli(
            "decrypt",
            "--format",
            "tink",
            "-k",
            keyset_file,
            "--context",
            "ad",
            "-o",
            tmp_path / "out",
            tmp_path / "bad",
        )
        assert run.status == EXPECTED_EXIT[error], (name, run.stderr)
        assert str(tmp_path / "bad") in run.stderr and run.stderr.count("\n") == 1, run.stderr
        assert not (tmp_path / "out").exists(), name
        piped = run_cli("decrypt", "--format", "tink", "-k", keyset_file, "--context", "ad", input=bad)
        assert piped.status == EXPECTED_EXIT[error], (name, piped.stderr)
        assert on_a_segment_boundary(plaintext, piped.stdout), (name, len(piped.stdout))
        # info authenticates the header, segment 0 and the last segment (as for gcmstream's
        # files: the header and FINAL), so a middle segment's damage is decrypt's to find
        info = run_cli("info", "--format", "tink", "-k", keyset_file, "--context", "ad", tmp_path / "bad")
        expected = 0 if name in MIDDLE_ONLY else EXPECTED_EXIT[error]
        assert info.status == expected, (name, info.stderr)
    (tmp_path / "good").write_bytes(ciphertext)
    wrong = run_cli(
        "decrypt",
        "--format",
        "tink",
        "-k",
        keyset_file,
        "--context",
        "other",
        "-o",
        tmp_path / "out",
        tmp_path / "good",
    )
    assert wrong.status == EXIT_TAMPERED and "wrong keyset or --context" in wrong.stderr, wrong.stderr
    assert not (tmp_path / "out").exists()


def test_a_wrong_keyset_or_context_exits_as_tampering_does(
    victim: tuple[Any, TinkKeyset, bytes, bytes], tmp_path: Path
) -> None:
    """Tink's format commits to no key: segment 0 failing under every key of the keyset is a
    wrong keyset, a wrong --context or an altered file, which no reader can tell apart, so the
    command line says all three and exits 4 (gcmstream's own files: 3 for a wrong key, from
    the header's commitment). README, "Tink's format"."""
    _, keyset, _, ciphertext = victim
    (tmp_path / "c.tink").write_bytes(ciphertext)
    other = tink_handle(16, TinkHash.SHA256, 64)
    for keyset_text, context in ((keyset_json(other), "ad"), (KEYSETS[id(keyset)], "another context")):
        run = run_cli(
            "decrypt",
            "--format",
            "tink",
            "-k",
            write_keyset(keyset_text, tmp_path),
            "--context",
            context,
            "-o",
            tmp_path / "out",
            tmp_path / "c.tink",
        )
        assert run.status == EXIT_TAMPERED, run.stderr
        assert "wrong keyset or --context, or tampered" in run.stderr, run.stderr
        assert not (tmp_path / "out").exists()


def test_the_cli_info_shows_the_parameters(tmp_path: Path) -> None:
    handle, keyset = keyset_for(32, TinkHash.SHA512, 4096)
    plaintext = random.Random(3).randbytes(4096 * 3)
    (tmp_path / "c").write_bytes(tink_seal(handle, plaintext, b"ctx"))
    run = run_cli(
        "info",
        "--format",
        "tink",
        "-k",
        write_keyset(KEYSETS[id(keyset)], tmp_path),
        "--context",
        "ctx",
        tmp_path / "c",
    )
    assert run.status == 0, run.stderr
    text = run.stdout.decode()
    for line in (
        f"key ID: {keyset.primary.key_id} ",
        "derived key size: 32 bytes (AES-256-GCM)",
        "HKDF hash: SHA512",
        "segment size: 4K (4096 bytes of ciphertext)",
        "segments: 4",  # 4056 + 4080 + 4080 + 72 plaintext bytes
        f"plaintext length: {len(plaintext)} bytes",
    ):
        assert line in text, text
    # what info read, and what it did not (a middle segment altered in place passes it)
    assert text.startswith(
        "verified: the header, segment 0 and the last segment only; the other 2 segments were not read"
    ), text
    # and the command that checks every segment, with the options info was given
    assert "(to check every segment: gcmstream decrypt --format tink -k " in text, text
    assert " --context ctx -o /dev/null " in text, text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--armor"], "--armor"),
        (["--record-size", "4K"], "--record-size"),
        (["--passphrase-file", "x"], "--passphrase"),
    ],
)
def test_the_cli_refuses_gcmstream_options_with_format_tink(
    extra: list[str], message: str, tmp_path: Path
) -> None:
    _, keyset = keyset_for(16, TinkHash.SHA256, 64)
    run = run_cli(
        "encrypt", "--format", "tink", "-k", write_keyset(KEYSETS[id(keyset)], tmp_path), *extra, input=b"x"
    )
    assert run.status == EXIT_USAGE and message in run.stderr and "--format tink" in run.stderr, run.stderr


def test_the_cli_refuses_a_keyset_it_cannot_use_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    path.write_text('{"encryptedKeyset": "AAAA", "keysetInfo": {}}')
    path.chmod(0o600)
    run = run_cli("decrypt", "--format", "tink", "-k", path, input=b"")
    assert run.status == EXIT_USAGE and str(path) in run.stderr and "KMS" in run.stderr, run.stderr
    path.chmod(0o644)
    run = run_cli("decrypt", "--format", "tink", "-k", path, input=b"")
    assert run.status == EXIT_USAGE and "open to other users" in run.stderr, run.stderr
    missing = run_cli("decrypt", "--format", "tink", input=b"")
    assert missing.status == EXIT_USAGE and "-k KEYSET.json" in missing.stderr, missing.stderr


def test_a_shell_pipeline_of_real_processes_with_tink_at_both_ends(tmp_path: Path) -> None:
    """tink writes a file; ``gcmstream decrypt --format tink | gcmstream encrypt --format tink``
    as the shell runs them; tink reads the result."""
    handle, keyset = keyset_for(16, TinkHash.SHA256, 4096)
    keyset_file = write_keyset(KEYSETS[id(keyset)], tmp_path)
    plaintext = random.Random(9).randbytes(100_000)
    (tmp_path / "in.tink").write_bytes(tink_seal(handle, plaintext, b"one"))
    gcm = f"{sys.executable} -m gcmstream"
    script = (
        f"set -o pipefail; {gcm} decrypt --format tink -k {keyset_file} --context one {tmp_path / 'in.tink'}"
        f" | {gcm} encrypt --format tink -k {keyset_file} --context two > {tmp_path / 'out.tink'}"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert tink_open(handle, (tmp_path / "out.tink").read_bytes(), b"two") == plaintext
    cut = tmp_path / "cut.tink"
    cut.write_bytes((tmp_path / "in.tink").read_bytes()[:4096])  # on the boundary of segment 0
    failed = subprocess.run(
        [
            "bash",
            "-c",
            f"{gcm} decrypt --format tink -k {keyset_file} --context one -o {tmp_path / 'x'} {cut}",
        ],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert failed.returncode == EXIT_TRUNCATED and not (tmp_path / "x").exists(), failed.stderr
    assert os.path.exists(cut)


def test_the_sealer_keywords_mean_for_tink_what_they_can() -> None:
    """``seal(flush=True)`` seals no short segment (Tink has none), ``seal(final=True)`` ends
    the stream as ``close()``: what the writer's paths may call on either sealer."""
    handle, keyset = keyset_for(16, TinkHash.SHA256, 64)
    sealer = TinkSealer(keyset, b"ad")
    first = bytes(sealer.seal(b"a" * 30, flush=True))  # the header and segment 0 (24 bytes)
    assert len(first) == 64 and sealer.pending == 6
    last = bytes(sealer.seal(b"b" * 10, final=True))
    assert sealer.closed and tink_open(handle, first + last, b"ad") == b"a" * 30 + b"b" * 10


@pytest.mark.anyio
async def test_the_pipelines_and_random_access_on_every_anyio_backend(tmp_path: Path) -> None:
    """The anyio surfaces on asyncio and on trio (the matrix above runs them on asyncio)."""
    handle, keyset = keyset_for(16, TinkHash.SHA256, 64)
    plaintext = random.Random(5).randbytes(24 + 48 * 7 + 3)
    ciphertext = tink_seal(handle, plaintext, b"ad")
    opened = b"".join(
        [part async for part in pipeline.decrypt_iter(chunks(ciphertext, 50), tink=keyset, context=b"ad")]
    )
    assert opened == plaintext
    sealed = b"".join(
        [part async for part in pipeline.encrypt_iter(chunks(plaintext, 50), tink=keyset, context=b"ad")]
    )
    assert tink_open(handle, sealed, b"ad") == plaintext
    (tmp_path / "c").write_bytes(ciphertext)
    await pipeline.decrypt_file_async(tmp_path / "c", tmp_path / "p", tink=keyset, context=b"ad")
    assert (tmp_path / "p").read_bytes() == plaintext
    async with await open_tink_file_async(tmp_path / "c", keyset, b"ad") as file:
        await file.seek(30)
        assert await file.read(100) == plaintext[30:130]


def test_the_opener_says_what_the_current_segment_still_needs() -> None:
    """``record_missing``: the bytes that complete the segment being received (what an adapter
    asks its stream for, to end its reads on segment boundaries); ``header_missing`` is 0."""
    _, keyset = keyset_for(16, TinkHash.SHA256, 64)
    ciphertext = pipeline_free_seal(keyset, bytes(24 + 48 * 3), b"")
    opener = TinkOpener(keyset, b"")
    assert (opener.header_missing, opener.record_missing) == (0, 0)
    opener.receive_data(ciphertext[:65])  # header and segment 0, and 1 byte of segment 1
    assert opener.header_verified() and opener.record_missing == 63
    opener.receive_data(ciphertext[65:100])
    assert opener.record_missing == 28
    opener.receive_data(ciphertext[100:128])
    assert opener.record_missing == 0
