"""Tink's AES-GCM-HKDF streaming format: gcmstream's reader and writer beside Tink's own Python
package, and beside raw AES-GCM over the same segments (issue 26).

``python benchmarks/run.py tink`` (``--quick``: 1 MiB, two rounds). CPU time (``process_time``),
medians of interleaved rounds, fresh random plaintext per run. Both sides are fed and drained
alike: encrypting, 64 KiB pieces in and the ciphertext written into one preallocated sink;
decrypting, the whole ciphertext in and ``readinto`` one preallocated buffer. Rows:

* ``gcmstream``: ``TinkSealer.seal`` of each 64 KiB piece, its output written into the sink,
  then ``close()``; ``TinkOpener.receive_data(all)`` then ``readinto`` of the whole plaintext.
* ``tink``: ``new_encrypting_stream`` / ``new_decrypting_stream`` of the ``tink`` package.
* ``raw``: ``AESGCM.encrypt_into`` / ``decrypt_into`` over the segments in a Python loop, the
  least any Python implementation of the format pays (header and HKDF left out).

Random reads: 4 KiB at random places of a 4 KB-segment ciphertext through
``open_tink_file(...).readinto`` (``os.pread``), beside the floor of the same reads (``pread`` of
the segments the range touches and ``decrypt_into`` of each).
"""

from __future__ import annotations

import io
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_common import write_result  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402

from gcmstream.tinkfile import open_tink_file  # noqa: E402
from gcmstream.tinkstream import TinkKeyset, TinkOpener, TinkSealer, read_tink_keyset  # noqa: E402

AD = b"bench associated data"
TINK_WRITE = 64 * 1024


def cpu_medians(cases: dict[str, Any], rounds: int) -> dict[str, float]:
    """Median CPU seconds of each case, the cases interleaved round by round."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            start = time.process_time()
            fn()
            samples[name].append(time.process_time() - start)
    return {name: sorted(values)[len(values) // 2] for name, values in samples.items()}


class _Sink(io.RawIOBase):
    """A preallocated binary sink Tink's encrypting stream writes into (close keeps it)."""

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self.pos = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.buf[self.pos : self.pos + len(view)] = view
        self.pos += len(view)
        return len(view)

    def close(self) -> None:
        pass


def stream_rows(template: str, size: int, rounds: int) -> dict[str, Any]:
    import tink
    from tink import secret_key_access, streaming_aead

    streaming_aead.register()
    handle = tink.new_keyset_handle(getattr(streaming_aead.streaming_aead_key_templates, template))
    keyset = read_tink_keyset(tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN))
    primitive = handle.primitive(streaming_aead.StreamingAead)
    plaintext = os.urandom(size)
    out = bytearray(size)
    out_view = memoryview(out)
    sink = _Sink(size + size // 64 + 4096)
    source = memoryview(plaintext)

    def ours_encrypt() -> int:  # fed and drained as Tink's stream is: 64 KiB in, into the sink
        sink.pos = 0
        sealer = TinkSealer(keyset, AD)
        for pos in range(0, size, TINK_WRITE):
            sink.write(sealer.seal(source[pos : pos + TINK_WRITE]))
        return sink.write(sealer.close())

    sealer = TinkSealer(keyset, AD)
    ciphertext = bytes(sealer.seal(plaintext)) + bytes(sealer.close())

    def ours_decrypt() -> int:
        opener = TinkOpener(keyset, AD)
        opener.receive_data(ciphertext)
        opener.receive_eof()
        got = opener.readinto(out)
        if got != size or (not opener.at_eof and opener.readinto(out_view[:1]) != 0):
            raise RuntimeError("benchmark: short read")
        return got

    def tink_encrypt() -> int:
        sink.pos = 0
        with primitive.new_encrypting_stream(sink, AD) as writer:
            for pos in range(0, size, TINK_WRITE):
                writer.write(source[pos : pos + TINK_WRITE])
        return sink.pos

    def tink_decrypt() -> int:
        got = 0
        with primitive.new_decrypting_stream(io.BytesIO(ciphertext), AD) as reader:
            while n := reader.readinto(out_view[got:]):
                got += n
        return got

    key = keyset.primary
    aead = AESGCM(os.urandom(key.derived_key_size))
    segment = key.ciphertext_segment_size - 16
    raw_ct = bytearray(size + (size // segment + 1) * 16)
    nonce = bytearray(12)

    def raw_encrypt() -> None:
        ct = memoryview(raw_ct)
        wire = 0
        for index, pos in enumerate(range(0, size, segment)):
            nonce[7:11] = index.to_bytes(4, "big")
            chunk = source[pos : pos + segment]
            aead.encrypt_into(nonce, chunk, None, ct[wire : wire + len(chunk) + 16])
            wire += len(chunk) + 16

    raw_encrypt()

    def raw_decrypt() -> None:
        ct = memoryview(raw_ct)
        wire = 0
        for index, pos in enumerate(range(0, size, segment)):
            nonce[7:11] = index.to_bytes(4, "big")
            length = min(segment, size - pos)
            aead.decrypt_into(nonce, ct[wire : wire + length + 16], None, out_view[pos : pos + length])
            wire += length + 16

    if tink_decrypt() != size or ours_decrypt() != size:
        raise RuntimeError("benchmark: a reader disagrees")
    if tink_decrypt_of(primitive, ciphertext) != plaintext:
        raise RuntimeError("benchmark: Tink does not read gcmstream's ciphertext")
    cpu = cpu_medians(
        {
            "gcmstream encrypt": ours_encrypt,
            "gcmstream decrypt": ours_decrypt,
            "tink encrypt": tink_encrypt,
            "tink decrypt": tink_decrypt,
            "raw encrypt": raw_encrypt,
            "raw decrypt": raw_decrypt,
        },
        rounds,
    )
    mb = {name: size / seconds / 1e6 for name, seconds in cpu.items()}
    return {
        "cpu_s": cpu,
        "MB_per_cpu_s": mb,
        "gcmstream decrypt/encrypt": cpu["gcmstream decrypt"] / cpu["gcmstream encrypt"],
        "tink decrypt/encrypt": cpu["tink decrypt"] / cpu["tink encrypt"],
        "raw decrypt/encrypt": cpu["raw decrypt"] / cpu["raw encrypt"],
        "gcmstream/tink encrypt throughput": cpu["tink encrypt"] / cpu["gcmstream encrypt"],
        "gcmstream/tink decrypt throughput": cpu["tink decrypt"] / cpu["gcmstream decrypt"],
        "gcmstream encrypt / raw": cpu["raw encrypt"] / cpu["gcmstream encrypt"],
        "gcmstream decrypt / raw": cpu["raw decrypt"] / cpu["gcmstream decrypt"],
    }


def tink_decrypt_of(primitive: Any, ciphertext: bytes) -> bytes:
    with primitive.new_decrypting_stream(io.BytesIO(ciphertext), AD) as reader:
        return bytes(reader.read())


def random_reads(size: int, reads: int, rounds: int) -> dict[str, Any]:
    key = TinkKeyset([_bench_key()])
    plaintext = os.urandom(size)
    sealer = TinkSealer(key, AD)
    ciphertext = bytes(sealer.seal(plaintext)) + bytes(sealer.close())
    rng = random.Random(4096)
    places = [rng.randrange(0, size - 3 * 4096) for _ in range(reads)]
    buffer = bytearray(4096)
    with tempfile.NamedTemporaryFile(prefix="gcmstream-bench-tink-") as handle:
        handle.write(ciphertext)
        handle.flush()
        reader = open_tink_file(handle.name, key, AD)
        fd = os.open(handle.name, os.O_RDONLY)
        try:
            floor = _floor_reader(fd, key.primary)

            def ours() -> None:
                for place in places:
                    reader.seek(place)
                    reader.readinto(buffer)

            def least() -> None:
                for place in places:
                    floor(place, buffer)

            ours()
            if bytes(buffer) != plaintext[places[-1] : places[-1] + 4096]:
                raise RuntimeError("benchmark: random read disagrees")
            cpu = cpu_medians({"open_tink_file": ours, "floor": least}, rounds)
        finally:
            os.close(fd)
            reader.close()
    return {"cpu_s": cpu, "reads": reads, "of floor": cpu["floor"] / cpu["open_tink_file"]}


def _bench_key() -> Any:
    from gcmstream.tinkstream import TinkStreamingKey

    return TinkStreamingKey(os.urandom(16), ciphertext_segment_size=4096)


def _floor_reader(fd: int, key: Any) -> Any:
    """The least a Python random reader of this format does for one read: ``pread`` the
    segments the range touches and ``decrypt_into`` each, with the stream's derived key (from
    the file's header; places away from the last segment)."""
    header = os.pread(fd, key.header_size, 0)
    segments = key.segments(header[1:-7], header[-7:], AD)
    wire = key.ciphertext_segment_size
    first = wire - len(header) - 16
    plain = wire - 16
    scratch = memoryview(bytearray(plain))

    def read(place: int, buffer: bytearray) -> None:
        index = 0 if place < first else 1 + (place - first) // plain
        end_index = 0 if place + len(buffer) <= first else 1 + (place + len(buffer) - 1 - first) // plain
        for i in range(index, end_index + 1):
            length = first if i == 0 else plain
            data = os.pread(fd, length + 16, len(header) if i == 0 else i * wire)
            segments.open(i, False, memoryview(data), scratch[:length])

    return read


def run(quick: bool) -> dict[str, Any]:
    size = 1 << 20 if quick else 32 << 20
    rounds = 2 if quick else 9
    rows = {
        template: stream_rows(template, size, rounds)
        for template in ("AES128_GCM_HKDF_4KB", "AES128_GCM_HKDF_1MB")
    }
    rows["random 4 KiB reads"] = random_reads(size, 200 if quick else 5000, rounds)
    return {"params": {"size": size, "rounds": rounds}, "rows": rows, "targets": targets(rows)}


def targets(rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 26's targets, each with what this run measured."""
    small, large = rows["AES128_GCM_HKDF_4KB"], rows["AES128_GCM_HKDF_1MB"]

    def check(target: str, value: float) -> dict[str, Any]:
        bound = float(target.split()[1])
        return {
            "target": target,
            "measured": round(value, 3),
            "met": value <= bound if target[0] == "<" else value >= bound,
        }

    return {
        "gcmstream decrypt/encrypt at 4 KB": check("<= 1.00", small["gcmstream decrypt/encrypt"]),
        "gcmstream decrypt/encrypt at 1 MB": check("<= 1.00", large["gcmstream decrypt/encrypt"]),
        "encrypt throughput vs tink at 4 KB": check(">= 2", small["gcmstream/tink encrypt throughput"]),
        "decrypt throughput vs tink at 4 KB": check(">= 2", small["gcmstream/tink decrypt throughput"]),
        "encrypt throughput vs tink at 1 MB": check(">= 1.2", large["gcmstream/tink encrypt throughput"]),
        "decrypt throughput vs tink at 1 MB": check(">= 1.2", large["gcmstream/tink decrypt throughput"]),
        "random 4 KiB reads vs the floor": check(">= 0.50", rows["random 4 KiB reads"]["of floor"]),
    }


def main(quick: bool) -> dict[str, Any]:
    data = run(quick)
    write_result("tink", data, quick)
    return data


if __name__ == "__main__":
    import json

    print(json.dumps(main("--quick" in sys.argv), indent=2))
