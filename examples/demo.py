"""`make demo`: seal and open an embedded message through the sans-IO codec and say what happened."""

from __future__ import annotations

import hashlib

import gcmstream

MESSAGE = b"gcmstream demo: nonce-sequenced AES-GCM records, opened in place. " * 4096


def main() -> None:
    key = gcmstream.generate_key()
    sealer = gcmstream.Sealer(key, context=b"demo", record_size=16 * 1024)
    wire = bytes(sealer.seal(MESSAGE)) + bytes(sealer.close())
    opener = gcmstream.Opener(key, context=b"demo")
    opener.receive_data(wire)
    opener.receive_eof()
    plain = bytearray()
    while (chunk := opener.read()) is not None and chunk:
        plain += chunk
    assert plain == MESSAGE
    print(f"sealed {len(MESSAGE)} bytes into {sealer.records_sealed} records, {len(wire)} bytes on the wire")
    print(f"opened {opener.records_opened} records, sha256 {hashlib.sha256(plain).hexdigest()[:16]}... matches")
    tampered = bytearray(wire)
    tampered[len(wire) // 2] ^= 1
    bad = gcmstream.Opener(key, context=b"demo")
    bad.receive_data(tampered)
    bad.receive_eof()
    released = 0
    try:
        while (chunk := bad.read()) is not None and chunk:
            released += len(chunk)
    except gcmstream.AuthenticationError as exc:
        print(f"one flipped bit: {exc} (released only the {released} authenticated bytes before it)")


if __name__ == "__main__":
    main()
