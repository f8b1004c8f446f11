"""An encrypted echo server: every byte a client sends comes back, sealed the other way.

    python examples/echo_server.py --key-file KEY [--host 127.0.0.1] [--port 0]

Without --key-file it generates a key, writes it to a new key file (mode 0600) in the
current directory and says where; the port defaults to an ephemeral one, printed on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import tempfile

import gcmstream
from gcmstream.keyfile import read_key_file, write_key_file

log = logging.getLogger("echo_server")


async def echo(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
    """Send back what arrives until the client's FINAL record, then send ours."""
    peer = writer.get_extra_info("peername")
    try:
        # Leaving the block normally seals our FINAL record; leaving it on an error only
        # closes, so the client sees a cut echo as cut (TruncatedStreamError), never complete.
        async with writer:
            async for chunk in reader.iter_chunks():  # views into the ring: no copy on the way in
                writer.write(chunk)
                await writer.drain()
    except (gcmstream.GcmStreamError, OSError) as exc:
        log.warning("client %s: %s", peer, exc)


async def serve(key: bytes, host: str, port: int) -> None:
    server = await gcmstream.start_server(echo, host, port, key=key, context=b"gcmstream echo example")
    address = server.sockets[0].getsockname()
    print(f"listening on {address[0]}:{address[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key-file", help="gcmstream key file (default: generate one)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.key_file:
        key = read_key_file(args.key_file)
    else:
        key = gcmstream.generate_key()
        fd, path = tempfile.mkstemp(prefix="echo-", suffix=".key", dir=".")
        os.close(fd)
        write_key_file(path, key, force=True)
        print(f"generated a key for this demo in {path}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(key, args.host, args.port))


if __name__ == "__main__":
    main()
