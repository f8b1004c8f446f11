"""`make demo`: start the echo server in its own process, run the client against it, show
that a client with the wrong key is refused while the server keeps serving, and that only an
explicit end (write_eof, or leaving `async with writer:` normally) ends a stream: a transfer
that fails and is closed in `finally` reads as truncated at the peer."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import gcmstream
from gcmstream.channel import self_connections_allowed
from gcmstream.keyfile import write_key_file

sys.path.insert(0, str(Path(__file__).parent))
import echo_client

HOST = "127.0.0.1"


async def start_server(key_file: Path) -> tuple[asyncio.subprocess.Process, int]:
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("echo_server.py")),
        "--key-file",
        str(key_file),
        stdout=asyncio.subprocess.PIPE,
    )
    if server.stdout is None:  # stdout=PIPE was asked for; this narrows the type
        raise RuntimeError("the echo server has no stdout pipe")
    line = (await asyncio.wait_for(server.stdout.readline(), 20)).decode()
    if not line.startswith("listening on "):
        server.kill()
        raise RuntimeError(f"echo server did not start: {line!r}")
    return server, int(line.rsplit(":", 1)[1])


async def explicit_end(key: bytes) -> None:
    """Two uploads to a receiver in this process: one fails part way (the usual
    ``try: ... finally: writer.close()``), one leaves ``async with writer:`` normally."""
    seen: asyncio.Queue[str] = asyncio.Queue()

    async def receive(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        got = 0
        try:
            while chunk := await reader.read(1 << 20):
                got += len(chunk)
        except gcmstream.TruncatedStreamError as exc:
            await seen.put(f"TruncatedStreamError after {got} bytes ({exc})")
        else:
            await seen.put(f"a complete stream of {got} bytes")
        writer.close()

    server = await gcmstream.start_server(receive, HOST, 0, key=key)
    port = server.sockets[0].getsockname()[1]
    block = bytes(1 << 20)
    _, writer = await gcmstream.open_connection(HOST, port, key=key)
    try:
        for sent in range(10):
            if sent == 3:
                raise OSError("source failed")  # 3 of 10 MiB sent
            writer.write(block)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
    failed = await asyncio.wait_for(seen.get(), 20)
    print(f"upload that failed at 3 of 10 MiB, closed in finally: the receiver saw {failed}")
    if not failed.startswith("TruncatedStreamError"):
        raise RuntimeError("a failed upload looked complete")
    _, writer = await gcmstream.open_connection(HOST, port, key=key)
    async with writer:  # leaving it normally seals the FINAL record
        for _ in range(10):
            writer.write(block)
            await writer.drain()
    complete = await asyncio.wait_for(seen.get(), 20)
    print(f"upload that left `async with writer:` normally: the receiver saw {complete}")
    if complete != f"a complete stream of {10 * len(block)} bytes":
        raise RuntimeError("a complete upload was not seen as complete")
    server.close()
    await server.wait_closed()


async def demo(directory: Path) -> None:
    key = gcmstream.generate_key()
    key_file = directory / "demo.key"
    write_key_file(key_file, key)
    server, port = await start_server(key_file)
    try:
        print(f"echo server (pid {server.pid}) on {HOST}:{port}, AES-128-GCM, key in a 0600 key file")
        print("client:", await echo_client.run(HOST, port, key))
        try:
            await echo_client.run(HOST, port, gcmstream.generate_key())
        except (gcmstream.TruncatedStreamError, ConnectionError) as exc:
            # the server refuses the unknown key ID and hangs up before answering
            print(f"client with the wrong key: refused at its header ({exc})")
        else:
            raise RuntimeError("the wrong key was accepted")
        print("client again:", await echo_client.run(HOST, port, key, sizes=(1, 65536, 1 << 20)))
        print("the server kept serving after the refused client")
        with self_connections_allowed():  # both ends of these uploads run in this process
            await explicit_end(key)
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(demo(Path(directory)))


if __name__ == "__main__":
    main()
