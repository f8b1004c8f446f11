"""Write tink.json next to this file: Tink AES-GCM-HKDF streaming ciphertexts written by the real
``tink`` package, valid and altered, in Wycheproof's layout (test groups by key, one test a
case, ``result`` valid or invalid).

Run from the repository root::

    .venv/bin/python tests/vectors/generate_tink.py           # (re)write the file
    .venv/bin/python tests/vectors/generate_tink.py --check   # exit 1 if a case no longer holds

Tink picks each stream's salt and nonce prefix at random, so a run writes new bytes; what stays is
each case's verdict. A valid case holds its plaintext (``msg``); the invalid cases of a group are
all cut from one stream of the group's ``invalidMsg``. Each invalid case says how it was built
(``comment``) and, from that construction (not from running gcmstream), the error a reader must
raise (``expect``: a class of gcmstream.errors) and how much plaintext it may release first
(``released``: the whole segments before the first one that cannot authenticate in its place).
Before writing, and with ``--check``, every case is replayed through Tink itself (valid ones
must open, invalid ones must fail) and through gcmstream (same plaintext, same error, same
release). tests/test_tinkstream.py
replays them in every feeding style.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

import tink  # noqa: E402
from tink import secret_key_access, streaming_aead  # noqa: E402
from tink.proto import aes_gcm_hkdf_streaming_pb2, common_pb2, tink_pb2  # noqa: E402

import gcmstream.errors  # noqa: E402
from gcmstream import ProtocolError  # noqa: E402
from gcmstream.tinkstream import TinkOpener, read_tink_keyset  # noqa: E402

OUT = HERE / "tink.json"
AD = b"gcmstream tink vectors"
# (derived key size, HKDF hash, ciphertext segment size): small segments so that every case has
# several segments (Tink's own templates, 4 KB and 1 MB, are in tests/test_tinkstream.py)
GROUPS = [(16, common_pb2.SHA256, 64), (32, common_pb2.SHA512, 80), (16, common_pb2.SHA1, 512)]


class _Kept(io.BytesIO):
    def close(self) -> None:
        pass


def handle_for(key_size: int, hash_type: int, segment: int) -> Any:
    key_format = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKeyFormat(key_size=key_size)
    key_format.params.derived_key_size = key_size
    key_format.params.hkdf_hash_type = hash_type
    key_format.params.ciphertext_segment_size = segment
    return tink.new_keyset_handle(
        tink_pb2.KeyTemplate(
            type_url="type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey",
            value=key_format.SerializeToString(),
            output_prefix_type=tink_pb2.RAW,
        )
    )


def seal(handle: Any, plaintext: bytes, ad: bytes) -> bytes:
    out = _Kept()
    with handle.primitive(streaming_aead.StreamingAead).new_encrypting_stream(out, ad) as stream:
        stream.write(plaintext)
    return out.getvalue()


def tink_opens(keyset_json: str, ciphertext: bytes, ad: bytes) -> bytes | None:
    handle = tink.json_proto_keyset_format.parse(keyset_json, secret_key_access.TOKEN)
    primitive = handle.primitive(streaming_aead.StreamingAead)
    try:
        with primitive.new_decrypting_stream(io.BytesIO(ciphertext), ad) as stream:
            return bytes(stream.read())
    except tink.TinkError:
        return None


def gcmstream_reads(keyset_json: str, ciphertext: bytes, ad: bytes) -> tuple[bytes, str | None]:
    opener = TinkOpener(read_tink_keyset(keyset_json), ad)
    opener.receive_data(ciphertext)
    opener.receive_eof()
    got = bytearray()
    try:
        while chunk := opener.read():
            got += chunk
    except ProtocolError as exc:
        return bytes(got), type(exc).__name__
    return bytes(got), None


def cases(segment: int, header: int, plaintext: bytes, ct: bytes, other: bytes) -> list[dict[str, Any]]:
    """Invalid cases cut from ``ct`` (the stream of ``plaintext``); ``other`` is a second
    stream of the same plaintext under the same key (another salt and prefix)."""
    first_plain = segment - header - 16
    middle = segment - 16
    starts = [header, *range(segment, len(ct), segment)]
    ends = [*starts[1:], len(ct)]
    last = len(starts) - 1

    def released(segments: int) -> int:  # plaintext of the first ``segments`` segments
        return 0 if segments == 0 else min(len(plaintext), first_plain + (segments - 1) * middle)

    def flip(position: int) -> bytes:
        bad = bytearray(ct)
        bad[position] ^= 0x01
        return bytes(bad)

    out = [
        ("header length byte off by one", flip(0), "MalformedHeaderError", 0),
        ("one bit of the salt flipped", flip(1), "AuthenticationError", 0),
        ("one bit of the nonce prefix flipped", flip(header - 1), "AuthenticationError", 0),
        ("one bit of segment 0 flipped", flip(starts[0] + 3), "AuthenticationError", 0),
        ("one bit of segment 1 flipped", flip(starts[1] + 3), "AuthenticationError", released(1)),
        ("the last tag's last bit flipped", flip(len(ct) - 1), "AuthenticationError", released(last)),
        ("cut inside the header", ct[: header - 3], "TruncatedStreamError", 0),
        ("the header alone", ct[:header], "TruncatedStreamError", 0),
        ("cut one byte short", ct[:-1], "AuthenticationError", released(last)),
        ("cut five bytes short", ct[:-5], "AuthenticationError", released(last)),
        (
            "cut ten bytes into the last segment",
            ct[: starts[last] + 10],
            "TruncatedStreamError",
            released(last),
        ),
        ("one byte appended", ct + b"\x00", "AuthenticationError", released(last)),
        ("16 zero bytes appended", ct + bytes(16), "AuthenticationError", released(last)),
        (
            "segment 1 repeated at the end",
            ct + ct[starts[1] : ends[1]],
            "AuthenticationError",
            released(last),
        ),
        (
            "segments 1 and 2 swapped",
            ct[: starts[1]] + ct[starts[2] : ends[2]] + ct[starts[1] : ends[1]] + ct[ends[2] :],
            "AuthenticationError",
            released(1),
        ),
        ("segment 1 dropped", ct[: starts[1]] + ct[ends[1] :], "AuthenticationError", released(1)),
        (
            "segment 1 from another stream of the same key",
            ct[: starts[1]] + other[starts[1] : ends[1]] + ct[ends[1] :],
            "AuthenticationError",
            released(1),
        ),
        (
            "the header of another stream of the same key",
            other[:header] + ct[header:],
            "AuthenticationError",
            0,
        ),
    ]
    for boundary in range(1, last):  # cut after segment ``boundary - 1``
        out.append(
            (
                f"cut at the end of segment {boundary - 1}",
                ct[: starts[boundary]],
                "TruncatedStreamError",
                released(boundary - 1),
            )
        )
    return [
        {"comment": comment, "ct": bad.hex(), "expect": expect, "released": size}
        for comment, bad, expect, size in out
    ]


def build(rng: random.Random) -> dict[str, Any]:
    groups = []
    tc_id = 0
    for key_size, hash_type, segment in GROUPS:
        handle = handle_for(key_size, hash_type, segment)
        keyset_json = str(tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN))
        header = 1 + key_size + 7
        first_plain = segment - header - 16
        middle = segment - 16
        tests = []
        for length in (0, 1, first_plain, first_plain + 1, first_plain + 2 * middle + 5):
            plaintext = rng.randbytes(length)
            tc_id += 1
            tests.append(
                {
                    "tcId": tc_id,
                    "comment": f"{length} bytes",
                    "msg": plaintext.hex(),
                    "aad": AD.hex(),
                    "ct": seal(handle, plaintext, AD).hex(),
                    "result": "valid",
                }
            )
        plaintext = rng.randbytes(first_plain + 3 * middle + 7)
        ct, other = seal(handle, plaintext, AD), seal(handle, plaintext, AD)
        for case in cases(segment, header, plaintext, ct, other):
            tc_id += 1
            tests.append({"tcId": tc_id, "aad": AD.hex(), "result": "invalid", **case})
        for comment, ad in (("another associated data", b"another"), ("no associated data", b"")):
            tc_id += 1
            tests.append(
                {
                    "tcId": tc_id,
                    "comment": comment,
                    "aad": ad.hex(),
                    "ct": ct.hex(),
                    "result": "invalid",
                    "expect": "AuthenticationError",
                    "released": 0,
                }
            )
        groups.append(
            {
                "keyset": json.loads(keyset_json),
                "derivedKeySize": key_size,
                "hkdfHash": common_pb2.HashType.Name(hash_type),
                "ciphertextSegmentSize": segment,
                "invalidMsg": plaintext.hex(),
                "tests": tests,
            }
        )
    return {
        "algorithm": "AES-GCM-HKDF streaming (Tink)",
        "generator": "tests/vectors/generate_tink.py",
        "numberOfTests": tc_id,
        "testGroups": groups,
    }


def check(document: dict[str, Any]) -> list[str]:
    """Every case through Tink and gcmstream; the disagreements."""
    problems = []
    for group in document["testGroups"]:
        keyset_json = json.dumps(group["keyset"])
        for test in group["tests"]:
            ct, ad = bytes.fromhex(test["ct"]), bytes.fromhex(test["aad"])
            msg = bytes.fromhex(test.get("msg", group["invalidMsg"]))
            theirs = tink_opens(keyset_json, ct, ad)
            ours, error = gcmstream_reads(keyset_json, ct, ad)
            name = f"tcId {test['tcId']} ({test['comment']})"
            if test["result"] == "valid":
                if theirs != msg or ours != msg or error is not None:
                    problems.append(f"{name}: valid, but Tink read {theirs is not None}, gcmstream {error}")
                continue
            if theirs is not None:
                problems.append(f"{name}: Tink opened it")
            if error != test["expect"] or ours != msg[: test["released"]]:
                problems.append(
                    f"{name}: gcmstream raised {error} after {len(ours)} bytes, "
                    f"expected {test['expect']} after {test['released']}"
                )
            if not issubclass(getattr(gcmstream.errors, test["expect"]), ProtocolError):
                problems.append(f"{name}: {test['expect']} is not a ProtocolError")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="replay the stored file; exit 1 on a disagreement"
    )
    args = parser.parse_args()
    streaming_aead.register()
    document = json.loads(OUT.read_text()) if args.check else build(random.Random(26))
    problems = check(document)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    if not args.check:
        OUT.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {OUT.name}: {document['numberOfTests']} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
