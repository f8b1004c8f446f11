"""Send messages from 1 byte to several MiB to the echo server and check every echo.

python examples/echo_client.py --key-file KEY --port PORT [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import time
from dataclasses import dataclass

import gcmstream
from gcmstream.keyfile import read_key_file

SIZES = (1, 100, 1024, 65535, 65536, 65537, 1 << 20, 4 << 20)
CONTEXT = b"gcmstream echo example"


@dataclass
class Summary:
    messages: int
    bytes_each_way: int
    records_sealed: int
    records_opened: int
    seconds: float

    def __str__(self) -> str:
        rate = 2 * self.bytes_each_way / self.seconds / 1e6
        return (
            f"{self.messages} messages, {self.bytes_each_way} bytes each way, every echo checked; "
            f"{self.records_sealed} records sealed, {self.records_opened} opened; "
            f"{rate:.0f} MB/s both ways together"
        )


async def run(host: str, port: int, key: bytes, sizes: tuple[int, ...] = SIZES) -> Summary:
    rng = random.Random(0)
    reader, writer = await gcmstream.open_connection(host, port, key=key, context=CONTEXT)
    start = time.perf_counter()
    total = 0
    try:
        for size in sizes:
            message = rng.randbytes(size)

            async def send(data: bytes = message) -> None:
                writer.write(data)
                await writer.drain()

            # send and receive at once: a large message fills every buffer on the way
            _, echoed = await asyncio.gather(send(), reader.readexactly(size))
            if hashlib.sha256(echoed).digest() != hashlib.sha256(message).digest():
                raise RuntimeError(f"echo of {size} bytes differs")
            total += size
        writer.write_eof()  # the explicit end: close() alone would read as a cut stream
        if await reader.read() != b"":
            raise RuntimeError("server sent bytes after the echoes")
    finally:
        writer.close()  # never an end: after a failure above the server sees a truncation
        await writer.wait_closed()
    return Summary(
        messages=len(sizes),
        bytes_each_way=total,
        records_sealed=writer.get_extra_info("gcmstream_records_sealed"),
        records_opened=writer.get_extra_info("gcmstream_records_opened"),
        seconds=time.perf_counter() - start,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    print(asyncio.run(run(args.host, args.port, read_key_file(args.key_file))))


if __name__ == "__main__":
    main()
