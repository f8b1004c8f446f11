"""Part 3: codec throughput (no I/O) at several record sizes.

* gcmstream seal: a long-lived Sealer, ``seal()`` of 4 records per call (its reusable output
  buffer holds 4 records); the output is not copied anywhere.
* gcmstream open: a long-lived Opener fed through ``get_buffer()``/``buffer_updated(n)`` from
  a pre-sealed stream (that memcpy stands in for a socket's ``recv_into``) and read with
  ``readinto`` into a 256 KiB application buffer, or with ``read_view`` (no copy out).
* raw ``encrypt_into``/``decrypt_into``: one call per record over distinct records with
  prebuilt nonces (the floor); ``memcpy`` rows time the feed copy alone, so the open path
  with the transport copy taken out can be read off.
* Cobblestone ``update_into`` (16 KiB chunks, its only size) over the same amount of data.
"""

from __future__ import annotations

import os
from typing import Any

from bench_common import Op, interleaved, write_result
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import gcmstream

KEY = bytes(range(16))
CONTEXT = bytes(range(256))
SIZES = [1024, 4096, 16384, 65536, 262144, 1048576]
QUICK_SIZES = [1024, 65536]
APP_BUFFER = 256 * 1024


class StreamOpen:
    """Each call opens the next ``volume`` bytes of plaintext of one long stream."""

    def __init__(self, record_size: int, volume: int, calls: int, *, zero_copy: bool) -> None:
        sealer = gcmstream.Sealer(KEY, context=CONTEXT, record_size=record_size)
        plain = os.urandom(volume) * (calls + 1)
        self.wire = memoryview(bytes(sealer.seal(plain, final=True)))
        self.opener = gcmstream.Opener(KEY, context=CONTEXT, max_record_size=max(record_size, 1 << 20))
        self.out = memoryview(bytearray(min(APP_BUFFER, volume)))
        self.pos = 0
        self.volume = volume
        self.zero_copy = zero_copy
        self.feed = 0  # bytes copied into the ring per get_buffer, for the memcpy baseline

    def __call__(self) -> int:
        opener, wire, out = self.opener, self.wire, self.out
        want = self.volume
        while want:
            buf = opener.get_buffer()
            count = min(len(buf), len(wire) - self.pos)
            if count:
                buf[:count] = wire[self.pos : self.pos + count]
                opener.buffer_updated(count)
                self.pos += count
                self.feed = max(self.feed, count)
            while want:
                if self.zero_copy:
                    view = opener.read_view(want)
                    if view is None:
                        break
                    want -= len(view)
                else:
                    n = opener.readinto(out if want >= len(out) else out[:want])
                    if n is None:
                        break
                    want -= n
        return self.volume


def seal_op(record_size: int, volume: int) -> Op:
    sealer = gcmstream.Sealer(KEY, context=CONTEXT, record_size=record_size)
    sealer.take_header()
    chunk = 4 * record_size
    data = memoryview(os.urandom(volume))

    def op() -> None:
        for pos in range(0, volume, chunk):
            sealer.seal(data[pos : pos + chunk])

    return op


def raw_ops(record_size: int, volume: int) -> tuple[Op, Op]:
    aead = AESGCM(KEY)
    count = volume // record_size
    nonces = [(i + 1).to_bytes(12, "big") for i in range(count)]
    header = b"\x00" + (record_size + 16).to_bytes(4, "big")
    plain = memoryview(os.urandom(volume))
    records = [plain[i * record_size : (i + 1) * record_size] for i in range(count)]
    cts = [aead.encrypt(n, r, header) for n, r in zip(nonces, records, strict=True)]
    ct_out = bytearray(record_size + 16)
    pt_out = bytearray(record_size)
    pairs_enc = list(zip(nonces, records, strict=True))
    pairs_dec = list(zip(nonces, cts, strict=True))

    def enc() -> None:
        for nonce, rec in pairs_enc:
            aead.encrypt_into(nonce, rec, header, ct_out)

    def dec() -> None:
        for nonce, ct in pairs_dec:
            aead.decrypt_into(nonce, ct, header, pt_out)

    return enc, dec


def memcpy_op(volume: int, chunk: int) -> Op:
    src = memoryview(os.urandom(volume))
    dst = memoryview(bytearray(chunk))

    def op() -> None:
        for pos in range(0, volume, chunk):
            n = min(chunk, volume - pos)
            dst[:n] = src[pos : pos + n]

    return op


def cobblestone_ops(volume: int, calls: int) -> tuple[Op, Op] | None:
    try:
        from cryptography.cobblestone import Cobblestone128Decryptor, Cobblestone128Encryptor
    except ImportError:
        return None
    plain = os.urandom(volume)
    enc = Cobblestone128Encryptor(KEY, CONTEXT)
    enc_out = bytearray(volume + volume // 512 + 4096)
    wire = bytearray()
    for _ in range(calls + 1):
        n = enc.update_into(plain, enc_out)
        wire += enc_out[:n]
    wire_view = memoryview(bytes(wire))
    dec = Cobblestone128Decryptor(KEY, CONTEXT)
    dec_out = bytearray(volume + 65536)
    step = len(wire) // (calls + 1)
    state = {"pos": 0}

    def encrypt() -> None:
        enc.update_into(plain, enc_out)

    def decrypt() -> None:
        pos = state["pos"]
        dec.update_into(wire_view[pos : pos + step], dec_out)
        state["pos"] = pos + step

    return encrypt, decrypt


def run(quick: bool) -> dict[str, Any]:
    sizes = QUICK_SIZES if quick else SIZES
    volume = 256 * 1024 if quick else 4 * 1024 * 1024
    reps = 3 if quick else 15
    rows = []
    for size in sizes:
        cob = cobblestone_ops(volume, reps + 2)
        enc, dec = raw_ops(size, volume)
        open_copy = StreamOpen(size, volume, reps + 2, zero_copy=False)
        open_view = StreamOpen(size, volume, reps + 2, zero_copy=True)
        open_copy()  # learn the feed size for the memcpy baseline
        cases: dict[str, Op] = {
            "gcmstream seal": seal_op(size, volume),
            "gcmstream open readinto": open_copy,
            "gcmstream open read_view": open_view,
            "raw encrypt_into": enc,
            "raw decrypt_into": dec,
            "memcpy feed": memcpy_op(volume, max(open_copy.feed, 1)),
            "memcpy app": memcpy_op(volume, min(APP_BUFFER, volume)),
        }
        if cob is not None:
            cases["cobblestone encrypt update_into"], cases["cobblestone decrypt update_into"] = cob
        times = interleaved(cases, reps)
        row: dict[str, Any] = {"record_size": size, "feed_chunk": open_copy.feed}
        row["MB_s"] = {name: volume / t / 1e6 for name, t in times.items()}
        t = times
        row["derived"] = {
            "open_read_view_minus_feed_MB_s": volume
            / max(t["gcmstream open read_view"] - t["memcpy feed"], 1e-9)
            / 1e6,
            "open_readinto_vs_raw": t["raw decrypt_into"] / t["gcmstream open readinto"],
            "open_read_view_vs_raw": t["raw decrypt_into"] / t["gcmstream open read_view"],
            "open_read_view_minus_feed_vs_raw": t["raw decrypt_into"]
            / max(t["gcmstream open read_view"] - t["memcpy feed"], 1e-9),
            "open_vs_raw_plus_feed": (t["raw decrypt_into"] + t["memcpy feed"])
            / t["gcmstream open read_view"],
            "seal_vs_raw": t["raw encrypt_into"] / t["gcmstream seal"],
        }
        records = volume // size
        row["derived"]["open_overhead_us_per_record"] = (
            (t["gcmstream open read_view"] - t["memcpy feed"] - t["raw decrypt_into"]) / records * 1e6
        )
        rows.append(row)
    default = next((r for r in rows if r["record_size"] == gcmstream.DEFAULT_RECORD_SIZE), rows[-1])
    d = default["derived"]
    cob_dec = default["MB_s"].get("cobblestone decrypt update_into")
    targets = {
        "codec_open_vs_raw_decrypt_into": {
            "target": ">= 0.90 x raw decrypt_into at the default record size",
            "value": d["open_readinto_vs_raw"],
            "read_view": d["open_read_view_vs_raw"],
            "read_view_without_feed_copy": d["open_read_view_minus_feed_vs_raw"],
            "vs_raw_plus_feed_copy": d["open_vs_raw_plus_feed"],
            "met": d["open_readinto_vs_raw"] >= 0.90,
        },
        "codec_open_vs_cobblestone": {
            "target": ">= Cobblestone update_into (decrypt)",
            "value": default["MB_s"]["gcmstream open readinto"] / cob_dec if cob_dec else None,
            "met": bool(cob_dec) and default["MB_s"]["gcmstream open readinto"] >= (cob_dec or 0),
        },
    }
    return {
        "params": {"sizes": sizes, "volume_bytes": volume, "reps": reps, "app_buffer": APP_BUFFER},
        "rows": rows,
        "targets": targets,
    }


def main(quick: bool) -> dict[str, Any]:
    data = run(quick)
    write_result("codec", data, quick)
    return data
