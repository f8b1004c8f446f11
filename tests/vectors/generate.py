"""Write the known-answer vectors valid.json next to this file.

Run from the repository root::

    .venv/bin/python tests/vectors/generate.py           # (re)write the files
    .venv/bin/python tests/vectors/generate.py --check   # exit 1 if a file would change

Everything is deterministic: fixed keys, and salts injected through the test-vector seam of
Sealer (``header_spec=HeaderSpec(salt=...)``), so the same gcmstream always writes the same
bytes. A valid vector says how to seal
(key, salt, context, record size, optional key limits, the plaintext writes and after which of
them to call ``flush()`` or ``update_key()`` + ``flush()``) and the exact ciphertext that must
come out; a channel vector (``"mode": "channel"``) gives both salts, each side's writes (sealed
with ``flush=True``, then closed) and the exact bytes each side sends.

tests/test_vectors.py runs one test case per vector. The streams a reader must refuse are in
tests/vectors/invalid/ (their own generator, which cuts some of them from these vectors).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: E402

from gcmstream import Channel, GcmStreamError, KeyExchange, KeyLimits, Opener, Sealer  # noqa: E402
from gcmstream._fixed import fixed_channel as fixed_randomness_channel  # noqa: E402
from gcmstream.channel import self_connections_allowed  # noqa: E402
from gcmstream.files import fixed_layout_field  # noqa: E402
from gcmstream.format import (  # noqa: E402
    Role,
)
from gcmstream.handshake import FixedEphemeral  # noqa: E402
from gcmstream.header import HeaderSpec  # noqa: E402

KEY128 = bytes(range(16))
KEY256 = bytes(range(0x20, 0x40))
OTHER_KEY = bytes(range(0x80, 0x90))  # invalid/generate.py: valid_stream_wrong_key opens with it
SALT_A = bytes([0xA5]) * 32
SALT_B = bytes(range(0x40, 0x60))
CONTEXT = b"gcmstream test vectors"
TEXT = b"Nonce-sequenced AES-GCM records: each one authenticated on its own, in order. " * 2


@dataclass
class Valid:
    name: str
    description: str
    key: bytes
    salt: bytes
    writes: list[bytes]
    record_size: int
    context: bytes = b""
    flush_after: list[int] = field(default_factory=list)
    update_key_after: list[int] = field(default_factory=list)
    limits: dict[str, int] | None = None
    final_with_last_write: bool = False
    update_key_at_close: bool = False
    fixed_layout: int | None = None  # N of a FIXED_LAYOUT field (FORMAT.md 4.3), as the file engine writes

    @property
    def plaintext(self) -> bytes:
        return b"".join(self.writes)

    def seal(self) -> bytes:
        limits = KeyLimits(**self.limits) if self.limits else None
        fields: tuple[tuple[int, bytes], ...] = ()
        if self.fixed_layout is not None:
            fields = (fixed_layout_field(self.record_size, limits or KeyLimits()),)
            if fields[0][1] != self.fixed_layout.to_bytes(4, "big"):
                raise SystemExit(f"{self.name}: the file engine would promise another N")
        sealer = Sealer(
            self.key,
            context=self.context,
            record_size=self.record_size,
            limits=limits,
            header_spec=HeaderSpec(salt=self.salt, fields=fields),
        )
        out = bytearray()
        last = len(self.writes) - 1
        for index, data in enumerate(self.writes):
            if index == last and self.final_with_last_write:
                return bytes(out + sealer.seal(data, final=True))
            out += sealer.seal(data)
            if index in self.update_key_after:
                sealer.update_key()
            if index in self.flush_after or index in self.update_key_after:
                out += sealer.flush()
        if self.update_key_at_close:
            sealer.update_key()  # a request still pending at close is dropped: FINAL ends it
        out += sealer.close()
        return bytes(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": "one-way",
            "description": self.description,
            "key": self.key.hex(),
            "salt": self.salt.hex(),
            "context": self.context.hex(),
            "record_size": self.record_size,
            "limits": self.limits,
            "writes": [data.hex() for data in self.writes],
            "flush_after": self.flush_after,
            "update_key_after": self.update_key_after,
            "final_with_last_write": self.final_with_last_write,
            "update_key_at_close": self.update_key_at_close,
            "fixed_layout": self.fixed_layout,
            "plaintext": self.plaintext.hex(),
            "ciphertext": self.seal().hex(),
        }


VALID = [
    Valid("aes128-empty", "no plaintext: the header and an empty FINAL record", KEY128, SALT_A, [], 16),
    Valid("aes128-one-record", "one short FINAL record", KEY128, SALT_A, [b"hello, world"], 64),
    Valid(
        "aes128-multi-record-short-final",
        "three full records and a short FINAL record",
        KEY128,
        SALT_A,
        [TEXT[:100]],
        32,
    ),
    Valid(
        "aes128-full-records-empty-final",
        "plaintext fills whole records, so the FINAL record is empty",
        KEY128,
        SALT_B,
        [TEXT[:64]],
        32,
    ),
    Valid(
        "aes128-context-flushed",
        "with a context; each write flushed as a short record",
        KEY128,
        SALT_B,
        [b"a", b"bc", b"", b"def"],
        16,
        context=CONTEXT,
        flush_after=[0, 1, 2, 3],
    ),
    Valid("aes128-record-size-1", "one plaintext byte per record", KEY128, SALT_A, [b"abc"], 1),
    Valid("aes256-one-record", "AES-256-GCM, one short FINAL record", KEY256, SALT_A, [b"hello, world"], 64),
    Valid(
        "aes256-context-multi-record",
        "AES-256-GCM with a context, several writes across records",
        KEY256,
        SALT_B,
        [TEXT[:10], TEXT[10:50], TEXT],
        24,
        context=CONTEXT,
    ),
    Valid(
        "aes128-explicit-key-update",
        "update_key() + flush() after the first write (KEY_UPDATE on a short record), and after "
        "the second with nothing pending (an empty KEY_UPDATE record)",
        KEY128,
        SALT_A,
        [b"before the update", b"", TEXT[:40]],
        16,
        update_key_after=[0, 1],
    ),
    Valid(
        "aes256-automatic-key-update",
        "KeyLimits(update_after_records=2): every second record carries KEY_UPDATE",
        KEY256,
        SALT_B,
        [TEXT],
        16,
        context=CONTEXT,
        limits={"update_after_records": 2, "hard_records": 4},
    ),
    Valid(
        "aes128-final-on-a-record-boundary",
        "64 bytes sealed with one seal(final=True) at record size 32: two records, the second is "
        "FINAL (no empty FINAL record; compare aes128-full-records-empty-final)",
        KEY128,
        SALT_B,
        [TEXT[:64]],
        32,
        final_with_last_write=True,
    ),
    Valid(
        "aes128-automatic-key-update-by-bytes",
        "KeyLimits(update_after_bytes=40): KEY_UPDATE on the record that brings the generation's "
        "plaintext to 40 bytes or more (rule 6.3.5)",
        KEY128,
        SALT_A,
        [TEXT[:100]],
        16,
        limits={"update_after_bytes": 40, "hard_bytes": 64},
    ),
    Valid(
        "aes128-key-update-request-dropped-at-close",
        "update_key() requested, then close(): the FINAL record never carries KEY_UPDATE, so the "
        "request is dropped",
        KEY128,
        SALT_A,
        [b"last words"],
        16,
        update_key_at_close=True,
    ),
    Valid(
        "aes128-fixed-layout",
        "a FIXED_LAYOUT field (type 0x8004, N = 3: a 102-byte header), as the file engine writes: "
        "full records of 16 bytes, KEY_UPDATE on records 2 and 5 (KeyLimits(update_after_records=3)), "
        "a FINAL of 4 bytes; record i at byte 102 + 37 i",
        KEY128,
        SALT_B,
        [TEXT[:100]],
        16,
        limits={"update_after_records": 3},
        fixed_layout=3,
    ),
]


ENCAPSULATION_FILE = HERE / "mlkem768_encapsulation.json"
INITIATOR_X25519 = bytes(range(0x41, 0x61))
RESPONDER_X25519 = bytes(range(0x61, 0x81))
INITIATOR_MLKEM_SEED = bytes(range(0x81, 0xC1))


def encapsulation() -> tuple[bytes, bytes]:
    """(shared secret, ciphertext) of one ML-KEM-768 encapsulation to the public key of
    INITIATOR_MLKEM_SEED. Encapsulation is randomized, so it was made once
    (``--new-encapsulation``) and is an input of the hybrid vectors, like the salts."""
    data = json.loads(ENCAPSULATION_FILE.read_text())
    assert bytes.fromhex(data["initiator_seed"]) == INITIATOR_MLKEM_SEED
    shared, ciphertext = bytes.fromhex(data["shared_secret"]), bytes.fromhex(data["ciphertext"])
    private = mlkem.MLKEM768PrivateKey.from_seed_bytes(INITIATOR_MLKEM_SEED)
    assert private.decapsulate(ciphertext) == shared, "the stored encapsulation does not decapsulate"
    return shared, ciphertext


def new_encapsulation() -> None:
    private = mlkem.MLKEM768PrivateKey.from_seed_bytes(INITIATOR_MLKEM_SEED)
    shared, ciphertext = private.public_key().encapsulate()
    data = {
        "initiator_seed": INITIATOR_MLKEM_SEED.hex(),
        "ciphertext": ciphertext.hex(),
        "shared_secret": shared.hex(),
    }
    ENCAPSULATION_FILE.write_text(json.dumps(data, indent=1) + "\n")


@dataclass
class ValidChannel:
    """A duplex channel with fixed salts and ephemeral keys (the test-only injection): the
    handshake, then each side's writes sealed with ``flush=True``, then closed."""

    name: str
    description: str
    key: bytes
    initiator_salt: bytes
    responder_salt: bytes
    initiator_writes: list[bytes]
    responder_writes: list[bytes]
    record_size: int
    context: bytes = b""
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519
    initiator_id: bytes | None = None
    responder_id: bytes | None = None

    def ephemeral(self, role: Role) -> FixedEphemeral:
        hybrid = self.key_exchange is KeyExchange.MLKEM768_X25519
        if role is Role.INITIATOR:
            return FixedEphemeral(INITIATOR_X25519, mlkem_seed=INITIATOR_MLKEM_SEED if hybrid else None)
        return FixedEphemeral(RESPONDER_X25519, mlkem_encapsulation=encapsulation() if hybrid else None)

    def channel(self, role: Role) -> Channel:
        salt = self.initiator_salt if role is Role.INITIATOR else self.responder_salt
        return fixed_randomness_channel(
            self.key,
            role=role,
            context=self.context,
            record_size=self.record_size,
            key_exchange=self.key_exchange,
            local_id=self.initiator_id if role is Role.INITIATOR else self.responder_id,
            salt=salt,
            ephemeral=self.ephemeral(role),
        )

    def seal(self) -> tuple[bytes, bytes]:
        """(bytes the initiator sends, bytes the responder sends): handshake, then records."""
        initiator, responder = self.channel(Role.INITIATOR), self.channel(Role.RESPONDER)
        with self_connections_allowed():
            sent = [bytearray(b) for b in handshake_messages(initiator, responder)]
        for side, writes, out in zip(
            (initiator, responder), (self.initiator_writes, self.responder_writes), sent, strict=True
        ):
            for data in writes:
                out += side.sealer.seal(data, flush=True)
            out += side.sealer.close()
        return bytes(sent[0]), bytes(sent[1])

    def to_json(self) -> dict[str, Any]:
        from_initiator, from_responder = self.seal()
        hybrid = self.key_exchange is KeyExchange.MLKEM768_X25519
        out: dict[str, Any] = {
            "name": self.name,
            "mode": "channel",
            "description": self.description,
            "key": self.key.hex(),
            "context": self.context.hex(),
            "record_size": self.record_size,
            "key_exchange": int(self.key_exchange),
            "initiator_salt": self.initiator_salt.hex(),
            "responder_salt": self.responder_salt.hex(),
            "initiator_x25519_private": INITIATOR_X25519.hex(),
            "responder_x25519_private": RESPONDER_X25519.hex(),
            "initiator_mlkem768_seed": INITIATOR_MLKEM_SEED.hex() if hybrid else None,
            "responder_mlkem768_ciphertext": encapsulation()[1].hex() if hybrid else None,
            "initiator_id": self.initiator_id.hex() if self.initiator_id is not None else None,
            "responder_id": self.responder_id.hex() if self.responder_id is not None else None,
            "initiator_writes": [data.hex() for data in self.initiator_writes],
            "responder_writes": [data.hex() for data in self.responder_writes],
            "initiator_ciphertext": from_initiator.hex(),
            "responder_ciphertext": from_responder.hex(),
            "intermediate": self.intermediates(from_initiator, from_responder),
        }
        return out

    def intermediates(self, from_initiator: bytes, from_responder: bytes) -> dict[str, str | None]:
        """The key schedule's values (docs/FORMAT.md 5.2), to bisect a disagreement with."""
        hybrid = self.key_exchange is KeyExchange.MLKEM768_X25519
        initiator_header = from_initiator[: _header_size(from_initiator)]
        responder_header = from_responder[: _header_size(from_responder)]
        ss_x25519 = x25519.X25519PrivateKey.from_private_bytes(RESPONDER_X25519).exchange(
            x25519.X25519PrivateKey.from_private_bytes(INITIATOR_X25519).public_key()
        )
        ss_mlkem = encapsulation()[0] if hybrid else b""
        transcript = hashlib.sha256(initiator_header + responder_header).digest()
        info = b"gcmstream/2 channel" + hashlib.sha256(self.context).digest() + transcript
        okm = HKDF(algorithm=hashes.SHA256(), length=128, salt=self.key, info=info).derive(
            ss_mlkem + ss_x25519
        )
        return {
            "initiator_header_size": str(len(initiator_header)),
            "responder_header_size": str(len(responder_header)),
            "ss_mlkem": ss_mlkem.hex() if hybrid else None,
            "ss_x25519": ss_x25519.hex(),
            "transcript_hash": transcript.hex(),
            "okm": okm.hex(),
            "initiator_finished": hmac.digest(okm[64:96], transcript, "sha256").hex(),
            "responder_finished": hmac.digest(okm[96:128], transcript, "sha256").hex(),
        }


def _header_size(wire: bytes) -> int:
    """A header's size from its fixed part: 62 bytes, the fields (length at bytes 60..61), 32."""
    return 62 + int.from_bytes(wire[60:62], "big") + 32


def handshake_messages(initiator: Channel, responder: Channel) -> tuple[bytes, bytes]:
    """Run a handshake; return what each side sent before its records."""
    responder.initial_data()
    hello = initiator.initial_data()
    responder.opener.receive_data(hello)
    answer = responder.data_to_send()
    initiator.opener.receive_data(answer)
    finished = initiator.data_to_send()
    responder.opener.receive_data(finished)
    assert initiator.handshake_complete() and responder.handshake_complete()
    return hello + finished, answer


VALID_CHANNELS = [
    ValidChannel(
        "channel-aes128-hybrid",
        "ML-KEM-768 + X25519 (the default); a request and a reply, one flushed record each",
        KEY128,
        SALT_A,
        SALT_B,
        [b"ping"],
        [b"pong"],
        64,
    ),
    ValidChannel(
        "channel-aes256-x25519-context-multi-record",
        "X25519 only, AES-256-GCM with a context; several writes each way across records; "
        "one side sends nothing",
        KEY256,
        SALT_B,
        SALT_A,
        [TEXT[:30], b"", TEXT[30:100]],
        [],
        16,
        context=CONTEXT,
        key_exchange=KeyExchange.X25519,
    ),
    ValidChannel(
        "channel-aes128-hybrid-identities",
        "ML-KEM-768 + X25519 with identities: the initiator is alice, the responder bob",
        KEY128,
        SALT_A,
        SALT_B,
        [b"hello bob"],
        [b"hello alice"],
        32,
        context=CONTEXT,
        initiator_id=b"alice",
        responder_id=b"bob",
    ),
]


# -- checking and writing ------------------------------------------------------------------------


def open_all(key: bytes, context: bytes, wire: bytes) -> tuple[bytes, GcmStreamError | None]:
    opener = Opener(key, context=context)
    opener.receive_data(wire)
    opener.receive_eof()
    out = bytearray()
    try:
        while got := opener.read():
            out += got
    except GcmStreamError as exc:
        return bytes(out), exc
    return bytes(out), None


def render() -> dict[str, str]:
    valid = [vector.to_json() for vector in VALID] + [channel.to_json() for channel in VALID_CHANNELS]
    for vector in VALID:
        got, error = open_all(vector.key, vector.context, vector.seal())
        if error is not None or got != vector.plaintext:
            raise SystemExit(f"valid vector {vector.name} does not round-trip: {error!r}")
    for channel in VALID_CHANNELS:
        from_initiator, from_responder = channel.seal()
        # A second pair with the same fixed inputs opens each side's bytes: the handshake and
        # every record are reproducible from the vector's inputs alone.
        for role, wire, writes in (
            (Role.RESPONDER, from_initiator, channel.initiator_writes),
            (Role.INITIATOR, from_responder, channel.responder_writes),
        ):
            reader = channel.channel(role)
            reader.initial_data()
            with self_connections_allowed():
                reader.opener.receive_data(wire)
                received = bytearray()
                while chunk := reader.opener.read():
                    received += chunk
            if received != b"".join(writes) or not reader.opener.at_eof:
                raise SystemExit(f"channel vector {channel.name} does not round-trip")
    names = [v["name"] for v in valid]
    assert len(names) == len(set(names)), "vector names must be unique"
    return {"valid.json": json.dumps(valid, indent=1) + "\n"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing")
    parser.add_argument(
        "--new-encapsulation",
        action="store_true",
        help="make a new ML-KEM-768 encapsulation input (changes every hybrid vector)",
    )
    args = parser.parse_args(argv)
    if args.new_encapsulation or not ENCAPSULATION_FILE.exists():
        new_encapsulation()
    stale = []
    for name, text in render().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)} (run tests/vectors/generate.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
