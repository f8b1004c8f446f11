"""Where a record split between input pieces costs its time (issue 23 item 5):
``python benchmarks/split_path.py [SRC] [--sizes 65536,1048576] [--rounds 25]``, SRC a directory
holding a ``gcmstream`` package (default: the installed one).

The workload is part 3's ``open (bytes in) readinto`` (``bench_codec.StreamOpen``: a
long-lived Opener, 256 KiB ``bytes`` pieces, ``readinto`` into 256 KiB, over a fresh stream).
For each record size it prints:

* the interpreter's work per 4 MiB (``sys.settrace``: lines run and Python calls), in pieces and
  with the same stream held whole (no record split);
* ring buffers allocated and minor page faults per 4 MiB once warm;
* CPU time (``time.process_time``, cases interleaved in a shuffled order each round, best and
  median of ``--rounds``) and its
  ratio to raw ``decrypt_into`` over a fresh stream, for: the Opener in pieces and held whole;
  the minimal Python framing loop (``bench_codec.framing_loop_op``'s steps) held whole; the same
  loop in pieces, a split record copied into one preallocated buffer and decrypted there (the
  floor of any reader that copies it: one copy); and in pieces, a split record decrypted part
  by part with a streaming GCM context (``Cipher``/``GCM``; no copy).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import resource
import struct
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VOLUME = 4 * 1024 * 1024
PIECE = 256 * 1024
KEY = bytes(range(16))
HEADER = struct.Struct(">BI")


class Whole:
    """``StreamOpen``'s Opener given its whole stream at once: no record is split."""

    def __init__(self, bc: Any, size: int, calls: int) -> None:
        self.inner = bc.StreamOpen(size, VOLUME, calls, zero_copy=False, pieces=True)
        self.inner.opener.receive_data(self.inner.wire)

    def __call__(self) -> None:
        want = VOLUME
        while want:
            want -= self.inner.opener.readinto(self.inner.out)


def framing_loops(size: int, calls: int) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """The minimal framing loop over one fresh stream: held whole, in pieces with a copy of each
    split record, in pieces with a streaming GCM context for each split record."""
    aead = AESGCM(KEY)
    iv = os.urandom(12)
    low = int.from_bytes(iv[4:], "big")
    count = VOLUME // size
    wire_length = size + 21
    plain = os.urandom(VOLUME)

    def stream() -> memoryview:
        """A stream of its own for each loop: none reads bytes another loop brought into a cache."""
        built = bytearray()
        for seq in range(count * calls):
            nonce = iv[:4] + (low ^ seq).to_bytes(8, "big")
            header = HEADER.pack(0, size + 16)
            place = (seq % count) * size
            built += header + aead.encrypt(nonce, plain[place : place + size], header)
        return memoryview(bytes(built))

    app = memoryview(bytearray(max(PIECE, size)))
    places = [app[i : i + size] for i in range(0, len(app) - size + 1, size)]
    slots = len(places)
    unpack = HEADER.unpack_from
    pack_low = struct.Struct(">Q").pack_into

    def whole_loop() -> Callable[[], None]:
        wire = stream()
        state = {"pos": 0, "seq": 0}

        def op() -> None:
            nonce = bytearray(iv)
            pos, seq = state["pos"], state["seq"]
            for _ in range(count):
                _, length = unpack(wire, pos)
                body = pos + 5
                pack_low(nonce, 4, low ^ seq)
                aead.decrypt_into(nonce, wire[body : body + length], wire[pos:body], places[seq % slots])
                pos = body + length
                seq += 1
            state["pos"], state["seq"] = pos, seq

        return op

    def pieces_loop(streaming: bool) -> Callable[[], None]:
        wire = stream()
        pieces = [wire[i : i + PIECE] for i in range(0, len(wire), PIECE)]
        ring = memoryview(bytearray(wire_length))
        staged = memoryview(bytearray(size + 15))  # a streaming context's output
        tag = bytearray(16)
        state: dict[str, Any] = {"piece": 0, "pos": 0, "seq": 0, "have": 0, "ctx": None}

        def op() -> None:
            nonce = bytearray(iv)
            seq = state["seq"]
            target = seq + count
            while seq < target:
                view = pieces[state["piece"]]
                pos, end, have = state["pos"], len(view), state["have"]
                if have:  # a split record: its rest, or more of it, from this piece
                    take = min(wire_length - have, end)
                    if state["ctx"] is None:
                        ring[have : have + take] = view[:take]
                        if have + take == wire_length:
                            pack_low(nonce, 4, low ^ seq)
                            aead.decrypt_into(nonce, ring[5:wire_length], ring[0:5], places[seq % slots])
                    else:
                        ct_end = wire_length - 16
                        if have < ct_end:
                            state["ctx"].update_into(view[: min(take, ct_end - have)], staged[have - 5 :])
                        if have + take > ct_end:
                            first = max(have, ct_end)
                            tag[first - ct_end : have + take - ct_end] = view[first - have : take]
                        if have + take == wire_length:
                            state["ctx"].finalize_with_tag(bytes(tag))
                    have += take
                    pos = take
                    if have == wire_length:
                        seq += 1
                        have = 0
                    state["have"] = have
                while end - pos >= 5 and seq < target:
                    _, length = unpack(view, pos)
                    body = pos + 5
                    if body + length > end:
                        break
                    pack_low(nonce, 4, low ^ seq)
                    aead.decrypt_into(nonce, view[body : body + length], view[pos:body], places[seq % slots])
                    pos = body + length
                    seq += 1
                if pos < end and seq < target:  # the start of a split record
                    state["ctx"] = None
                    if not streaming or end - pos < 5:  # (a split header: copied in both loops)
                        ring[0 : end - pos] = view[pos:end]
                    else:
                        pack_low(nonce, 4, low ^ seq)
                        ctx = Cipher(algorithms.AES(KEY), modes.GCM(bytes(nonce))).decryptor()
                        ctx.authenticate_additional_data(view[pos : pos + 5])
                        ct_end = wire_length - 16
                        ctx.update_into(view[pos + 5 : min(end, pos + ct_end)], staged)
                        if end - pos > ct_end:  # the split is inside the tag
                            tag[: end - pos - ct_end] = view[pos + ct_end : end]
                        state["ctx"] = ctx
                    state["have"] = end - pos
                    pos = end
                if pos >= end:
                    state["piece"] += 1
                    state["pos"] = 0
                else:
                    state["pos"] = pos
            state["seq"] = seq

        return op

    return whole_loop(), pieces_loop(False), pieces_loop(True)


def traced(op: Callable[[], object]) -> tuple[int, int]:
    """Lines run and Python calls made by one ``op()``."""
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        counts[event] += 1
        return tracer

    sys.settrace(tracer)
    try:
        op()
    finally:
        sys.settrace(None)
    return counts["line"], counts["call"]


def main() -> int:
    shuffle = random.Random(23).shuffle
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", nargs="?")
    parser.add_argument("--sizes", default="65536,1048576")
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    import bench_codec as bc

    import gcmstream
    from gcmstream import ring as ring_module

    print(f"gcmstream from {os.path.dirname(str(gcmstream.__file__))}")
    allocations: list[int] = []
    allocate = ring_module.RecordRing._allocate

    def counting(ring: Any, capacity: int) -> None:
        allocations.append(capacity)
        allocate(ring, capacity)

    setattr(ring_module.RecordRing, "_allocate", counting)  # noqa: B010 (a method replaced)
    for size in (int(s) for s in args.sizes.split(",")):
        calls = args.rounds + 4
        pieces = bc.StreamOpen(size, VOLUME, calls, zero_copy=False, pieces=True)
        whole = Whole(bc, size, calls)
        pieces()
        whole()
        lines = {name: traced(op) for name, op in (("pieces", pieces), ("whole", whole))}
        allocations.clear()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        pieces()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(
            f"record size {size}, per {VOLUME >> 20} MiB: lines/calls in pieces {lines['pieces'][0]:,}/"
            f"{lines['pieces'][1]:,}, held whole {lines['whole'][0]:,}/{lines['whole'][1]:,}; "
            f"ring buffers allocated once warm: {len(allocations)}, minor page faults: {faults}"
        )
        _, raw, _ = bc.raw_ops(size, VOLUME, calls)
        loop_whole, loop_copy, loop_stream = framing_loops(size, calls)
        ops: dict[str, Callable[[], object]] = {
            "raw decrypt_into (fresh stream)": raw,
            "Opener, 256 KiB pieces": pieces,
            "Opener, held whole": whole,
            "minimal loop, held whole": loop_whole,
            "minimal loop, pieces, split copied": loop_copy,
            "minimal loop, pieces, split streamed": loop_stream,
        }
        for op in ops.values():
            op()
        times: dict[str, list[float]] = {name: [] for name in ops}
        order = list(ops.items())
        for _ in range(args.rounds):
            shuffle(order)  # no case always runs after the same one (cache, frequency)
            for name, op in order:
                start = time.process_time()
                op()
                times[name].append(time.process_time() - start)
        best = {name: min(t) for name, t in times.items()}
        median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        raw_name = "raw decrypt_into (fresh stream)"
        for name in ops:
            print(
                f"  {name:38} best {best[name] * 1e3:6.3f} ms ({best[raw_name] / best[name]:.2f} of raw), "
                f"median {median[name] * 1e3:6.3f} ms ({median[raw_name] / median[name]:.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
