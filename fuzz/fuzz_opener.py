"""Coverage-guided fuzzing of the Opener (atheris / libFuzzer). See fuzz/README.md.

    .venv/bin/python fuzz/fuzz_opener.py -max_total_time=600 fuzz/corpus-work fuzz/corpus
    .venv/bin/python fuzz/fuzz_opener.py --make-corpus    # rewrite fuzz/corpus from the vectors

Each input is one stream, fed as is: a one-way Opener reads it, or, when its role byte says
INITIATOR, the RESPONDER side of a Channel with the fixed salt the channel vectors use. The key
and context are the ones of tests/vectors/invalid, so seeds from the vectors authenticate and
the fuzzer starts past the key commitment. The input is delivered in pieces whose sizes come
from a hash of the input (deterministic per input), through receive_data or the zero-copy
get_buffer/buffer_updated path, and read with a style chosen the same way.

It fails (crashes) when an exception other than a gcmstream ProtocolError escapes, when reading
does not settle after EOF, when a stream ends cleanly without an authenticated FINAL record, or
when more plaintext comes out than ciphertext went in.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["gcmstream"]):
    from gcmstream import KeyExchange, Opener, ProtocolError, Role
    from gcmstream._fixed import fixed_channel
    from gcmstream.handshake import FixedEphemeral

ROOT = Path(__file__).resolve().parent.parent
KEY = bytes(range(16))
KEY_256 = bytes(range(32, 64))
CONTEXT = b"gcmstream invalid vectors"
RESPONDER_SALT = bytes([0xC3]) * 32
RESPONDER_X25519 = bytes(range(33, 65))  # the channel cases' responder (tests/vectors/invalid)
RESPONDER_RECORD_SIZE = 32
MAX_RECORD_SIZE = 64 * 1024  # a small reader limit keeps each execution's ring small


def make_opener(data: bytes) -> Opener:
    # header bytes 5 and 6 (docs/FORMAT.md 4.1): role, suite
    key = KEY_256 if len(data) > 6 and data[6] == 2 else KEY
    if len(data) > 5 and data[5] == Role.INITIATOR:
        channel = fixed_channel(
            key,
            role=Role.RESPONDER,
            context=CONTEXT,
            record_size=RESPONDER_RECORD_SIZE,
            key_exchange=KeyExchange.X25519,
            salt=RESPONDER_SALT,
            ephemeral=FixedEphemeral(RESPONDER_X25519),
        )
        channel.initial_data()
        return channel.opener
    return Opener(key, context=CONTEXT, max_record_size=MAX_RECORD_SIZE)


def test_one_input(data: bytes) -> None:
    h = zlib.crc32(data)
    chunk = (1, 3, 7, 64, 1000, len(data) or 1)[h % 6]
    style = (h >> 8) % 3
    zero_copy = (h >> 16) % 2 == 1  # get_buffer/buffer_updated, as the asyncio protocol feeds
    opener = make_opener(data)
    released = 0
    ended = False
    buffer = bytearray(17)

    def drain() -> None:
        nonlocal released, ended
        for _ in range(len(data) + 16):  # each step releases a byte, or stops
            if style == 0:
                got = opener.read()
                n = None if got is None else len(got)
            elif style == 1:
                n = opener.readinto(buffer)
            else:
                view = opener.read_view(5)
                n = None if view is None else len(view)
            if n is None:
                return
            if n == 0:
                ended = True
                return
            released += n
        raise AssertionError("reading did not settle")

    def put(piece: bytes) -> None:
        done = 0
        for _ in range(len(piece) + 16):  # each turn commits a byte, or raises
            if done == len(piece):
                return
            view = opener.get_buffer()
            if not view:
                drain()  # frees ring space, or raises the error that stopped the input
                view = opener.get_buffer()
                if not view:
                    raise AssertionError("the ring refuses input although the opener is drained")
            count = min(len(view), len(piece) - done)
            view[:count] = piece[done : done + count]
            opener.buffer_updated(count)
            done += count
        raise AssertionError("feeding did not settle")

    try:
        for start in range(0, len(data), chunk):
            if zero_copy:
                put(data[start : start + chunk])
            else:
                opener.receive_data(data[start : start + chunk])
            drain()
        opener.receive_eof()
        drain()
        if not ended:
            raise AssertionError("EOF given, but the opener neither ended nor failed")
        if not opener.at_eof:
            raise AssertionError("a clean end without an authenticated FINAL record")
    except ProtocolError:
        pass
    if released > len(data):
        raise AssertionError(f"released {released} bytes from {len(data)} input bytes")


def make_corpus() -> int:
    """fuzz/corpus: every vector's input, plus valid streams written with the same key."""
    from gcmstream import Sealer
    from gcmstream.header import HeaderSpec

    out = Path(__file__).resolve().parent / "corpus"
    out.mkdir(exist_ok=True)
    seeds: dict[str, bytes] = {}
    for path in sorted((ROOT / "tests" / "vectors" / "invalid").glob("*.json")):
        seeds[f"invalid-{path.stem}"] = bytes.fromhex(json.loads(path.read_text())["input"])
    valid = ROOT / "tests" / "vectors" / "valid.json"
    if valid.exists():  # other keys: these seed the header paths
        doc = json.loads(valid.read_text())
        cases = doc if isinstance(doc, list) else doc.get("vectors", doc.get("cases", []))
        for index, case in enumerate(cases):
            for name in ("stream", "wire", "ciphertext", "input"):
                if isinstance(case, dict) and isinstance(case.get(name), str):
                    seeds[f"valid-{index}"] = bytes.fromhex(case[name])
                    break
    for size, count in ((32, 1), (32, 5), (1000, 3), (64 * 1024, 2)):
        for key in (KEY, KEY_256):
            sealer = Sealer(
                key, context=CONTEXT, record_size=size, header_spec=HeaderSpec(salt=bytes([size % 251]) * 32)
            )
            wire = bytes(sealer.seal(bytes(range(256)) * (size * count // 256 + 1)))
            sealer.update_key()
            wire += bytes(sealer.flush()) + bytes(sealer.close())
            seeds[f"valid-{len(key) * 8}-{size}x{count}"] = wire
    for name, data in seeds.items():
        (out / name).write_bytes(data)
    print(f"wrote {len(seeds)} seeds to {out}")
    return 0


def main() -> None:
    if "--make-corpus" in sys.argv:
        sys.exit(make_corpus())
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
