"""`make demo`: start the echo server in its own process, run the client against it, show
that a client with the wrong key is refused while the server keeps serving."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import gcmstream
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
    assert server.stdout is not None
    line = (await asyncio.wait_for(server.stdout.readline(), 20)).decode()
    if not line.startswith("listening on "):
        server.kill()
        raise RuntimeError(f"echo server did not start: {line!r}")
    return server, int(line.rsplit(":", 1)[1])


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
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(demo(Path(directory)))


if __name__ == "__main__":
    main()
