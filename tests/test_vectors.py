"""Known-answer vectors (tests/vectors/valid.json, written by generate.py).

Sealing with the injected salt gives exactly the expected ciphertext, opening it gives the
plaintext (all at once and byte by byte), and an independent reader written here from the format
description, straight on cryptography's primitives, agrees. The streams to refuse
(tests/vectors/invalid/) are replayed by tests/hostile/test_codec.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from gcmstream import Channel, GcmStreamError, KeyExchange, KeyLimits, Opener, Role, Sealer
from gcmstream._fixed import fixed_channel as fixed_randomness_channel
from gcmstream.handshake import FixedEphemeral
from gcmstream.header import HeaderSpec

from .helpers import handshake_bytes

VECTORS = Path(__file__).parent / "vectors"
TAG_MIN = 16  # the AES-GCM tag: the shortest record body


def load(name: str) -> list[dict[str, Any]]:
    data = json.loads((VECTORS / name).read_text())
    assert isinstance(data, list)
    return data


VALID = [v for v in load("valid.json") if v["mode"] == "one-way"]
CHANNELS = [v for v in load("valid.json") if v["mode"] == "channel"]


def seal(vector: dict[str, Any]) -> bytes:
    limits = KeyLimits(**vector["limits"]) if vector["limits"] else None
    layout = vector["fixed_layout"]
    sealer = Sealer(
        bytes.fromhex(vector["key"]),
        context=bytes.fromhex(vector["context"]),
        record_size=vector["record_size"],
        limits=limits,
        header_spec=HeaderSpec(
            salt=bytes.fromhex(vector["salt"]),
            fields=((0x8004, struct.pack(">I", layout)),) if layout is not None else (),
        ),
    )
    out = bytearray()
    last = len(vector["writes"]) - 1
    for index, data in enumerate(vector["writes"]):
        if index == last and vector["final_with_last_write"]:
            return bytes(out + sealer.seal(bytes.fromhex(data), final=True))
        out += sealer.seal(bytes.fromhex(data))
        if index in vector["update_key_after"]:
            sealer.update_key()
        if index in vector["flush_after"] or index in vector["update_key_after"]:
            out += sealer.flush()
    if vector["update_key_at_close"]:
        sealer.update_key()
    out += sealer.close()
    return bytes(out)


def open_all(
    key: bytes, context: bytes, wire: bytes, bytewise: bool = False
) -> tuple[bytes, Exception | None]:
    return open_with(Opener(key, context=context), wire, bytewise)


def open_with(opener: Opener, wire: bytes, bytewise: bool = False) -> tuple[bytes, Exception | None]:
    out = bytearray()
    try:
        for chunk in [wire[i : i + 1] for i in range(len(wire))] if bytewise else [wire]:
            opener.receive_data(chunk)
            while got := opener.read():
                out += got
        opener.receive_eof()
        while got := opener.read():
            out += got
    except GcmStreamError as exc:
        return bytes(out), exc
    return bytes(out), None


def _expand(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=label).derive(secret)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _key_id(key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=16, salt=None, info=b"gcmstream/2 key id").derive(key)


def _header(
    key: bytes, context: bytes, role: int, exchange: int, record_size: int, salt: bytes, fields: bytes
) -> tuple[bytes, bytes]:
    """A header built from docs/FORMAT.md 4-5.1: (header bytes, its stream secret)."""
    suite = {16: 1, 32: 2}[len(key)]
    body = struct.pack(
        ">4sBBBBI16s32sH", b"GCMS", 2, role, suite, exchange, record_size, _key_id(key), salt, len(fields)
    )
    body += fields
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=64,
        salt=salt,
        info=b"gcmstream/2 header" + _sha256(body) + _sha256(context),
    ).derive(key)
    return body + okm[:32], okm[32:]


def reference_records(key_size: int, secret: bytes, record_size: int, wire: bytes) -> bytes:
    """Open the records of one direction (docs/FORMAT.md 5.3-6), from generation 0."""
    plaintext = bytearray()
    pos, seq, final = 0, 0, False
    while not final:
        aead = AESGCM(_expand(secret, b"gcmstream/2 key", key_size))
        iv = int.from_bytes(_expand(secret, b"gcmstream/2 iv", 12), "big")
        flags, length = struct.unpack_from(">BI", wire, pos)
        assert TAG_MIN <= length <= record_size + TAG_MIN
        body = wire[pos + 5 : pos + 5 + length]
        plaintext += aead.decrypt((iv ^ seq).to_bytes(12, "big"), body, wire[pos : pos + 5])
        pos += 5 + length
        final = bool(flags & 1)
        if flags & 2:
            secret, seq = _expand(secret, b"gcmstream/2 key update", 32), 0
        else:
            seq += 1
    assert pos == len(wire)
    return bytes(plaintext)


def reference_open(key: bytes, context: bytes, wire: bytes) -> bytes:
    """An independent reader of valid one-way streams: the format spelled out on cryptography's
    API. It rebuilds the header from its fields and compares it byte for byte."""
    fixed = struct.unpack_from(">4sBBBBI16s32sH", wire)
    _, _, role, _, exchange, record_size, _, salt, fields_length = fixed
    assert (role, exchange) == (0, 0)
    fields = b""
    if fields_length:  # the one field a pre-shared-key stream has: FIXED_LAYOUT (4.3)
        assert fields_length == 8
        fields = wire[62:70]
        field_type, length, per_generation = struct.unpack(">HHI", fields)
        assert (field_type, length) == (0x8004, 4) and per_generation >= 1
    header, secret = _header(key, context, 0, 0, record_size, salt, fields)
    assert wire.startswith(header)
    return reference_records(len(key), secret, record_size, wire[len(header) :])


def reference_channel(vector: dict[str, Any]) -> tuple[bytes, bytes]:
    """An independent channel end for a valid channel vector (docs/FORMAT.md 5.2): rebuilds both
    handshake messages byte for byte from the vector's inputs (fixed salts and ephemeral keys),
    checks them against what each side sent, and opens both directions' records. Returns
    (plaintext from the initiator, plaintext from the responder)."""
    key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
    exchange, record_size = vector["key_exchange"], vector["record_size"]
    hybrid = exchange == 2
    initiator_x = x25519.X25519PrivateKey.from_private_bytes(
        bytes.fromhex(vector["initiator_x25519_private"])
    )
    responder_x = x25519.X25519PrivateKey.from_private_bytes(
        bytes.fromhex(vector["responder_x25519_private"])
    )

    def fields(x_share: bytes, kem_share: bytes | None, identity: str | None) -> bytes:
        out = struct.pack(">HH", 1, 32) + x_share
        if kem_share is not None:
            out += struct.pack(">HH", 2, len(kem_share)) + kem_share
        if identity is not None:
            ident = bytes.fromhex(identity)
            out += struct.pack(">HH", 3, len(ident)) + ident
        return out

    kem_private = (
        mlkem.MLKEM768PrivateKey.from_seed_bytes(bytes.fromhex(vector["initiator_mlkem768_seed"]))
        if hybrid
        else None
    )
    kem_ciphertext = bytes.fromhex(vector["responder_mlkem768_ciphertext"]) if hybrid else None
    initiator_fields = fields(
        initiator_x.public_key().public_bytes_raw(),
        kem_private.public_key().public_bytes_raw() if kem_private is not None else None,
        vector["initiator_id"],
    )
    responder_fields = fields(
        responder_x.public_key().public_bytes_raw(), kem_ciphertext, vector["responder_id"]
    )
    initiator_salt, responder_salt = (
        bytes.fromhex(vector["initiator_salt"]),
        bytes.fromhex(vector["responder_salt"]),
    )
    initiator_hello, _ = _header(key, context, 1, exchange, record_size, initiator_salt, initiator_fields)
    responder_hello, _ = _header(key, context, 2, exchange, record_size, responder_salt, responder_fields)
    shared = responder_x.exchange(initiator_x.public_key())
    if kem_private is not None and kem_ciphertext is not None:
        shared = kem_private.decapsulate(kem_ciphertext) + shared
    transcript = _sha256(initiator_hello + responder_hello)
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=128,
        salt=key,
        info=b"gcmstream/2 channel" + _sha256(context) + transcript,
    ).derive(shared)
    initiator_finished = hmac.digest(okm[64:96], transcript, "sha256")
    responder_finished = hmac.digest(okm[96:128], transcript, "sha256")
    # the vector's intermediate values, for whoever has to find where they disagree
    ss_x25519 = shared[-32:]
    assert vector["intermediate"] == {
        "initiator_header_size": str(len(initiator_hello)),
        "responder_header_size": str(len(responder_hello)),
        "ss_mlkem": shared[:32].hex() if hybrid else None,
        "ss_x25519": ss_x25519.hex(),
        "transcript_hash": transcript.hex(),
        "okm": okm.hex(),
        "initiator_finished": initiator_finished.hex(),
        "responder_finished": responder_finished.hex(),
    }
    from_initiator = bytes.fromhex(vector["initiator_ciphertext"])
    from_responder = bytes.fromhex(vector["responder_ciphertext"])
    initiator_handshake = initiator_hello + initiator_finished
    responder_handshake = responder_hello + responder_finished
    assert from_initiator.startswith(initiator_handshake)
    assert from_responder.startswith(responder_handshake)
    return (
        reference_records(len(key), okm[0:32], record_size, from_initiator[len(initiator_handshake) :]),
        reference_records(len(key), okm[32:64], record_size, from_responder[len(responder_handshake) :]),
    )


def test_there_are_vectors() -> None:
    assert len(VALID) >= 8
    assert len(CHANNELS) >= 3
    assert {v["key_exchange"] for v in CHANNELS} == {KeyExchange.X25519, KeyExchange.MLKEM768_X25519}
    suites = {len(bytes.fromhex(v["key"])) for v in VALID}
    assert suites == {16, 32}
    assert any(v["context"] for v in VALID)
    assert any(not v["writes"] for v in VALID)
    assert any(v["update_key_after"] or v["limits"] for v in VALID)


@pytest.mark.parametrize("vector", VALID, ids=[v["name"] for v in VALID])
def test_valid_vector(vector: dict[str, Any]) -> None:
    key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
    expected = bytes.fromhex(vector["ciphertext"])
    plaintext = bytes.fromhex(vector["plaintext"])
    assert b"".join(bytes.fromhex(data) for data in vector["writes"]) == plaintext
    assert seal(vector) == expected
    for bytewise in (False, True):
        got, error = open_all(key, context, expected, bytewise)
        assert error is None
        assert got == plaintext
    assert reference_open(key, context, expected) == plaintext
    if vector["fixed_layout"] is not None:
        assert_fixed_layout(expected, vector["record_size"], vector["fixed_layout"], len(plaintext))


def assert_fixed_layout(wire: bytes, record_size: int, per_generation: int, length: int) -> None:
    """FORMAT.md 4.3 by arithmetic: a 102-byte header, record i at 102 + i (record_size + 21),
    full except FINAL, KEY_UPDATE exactly when i mod N = N - 1 and not FINAL."""
    count = (len(wire) - 102 - 21) // (record_size + 21) + 1
    last = (len(wire) - 102 - 21) % (record_size + 21)
    assert (count - 1) * record_size + last == length
    for index in range(count):
        final = index == count - 1
        flags = 1 if final else 2 if index % per_generation == per_generation - 1 else 0
        size = last if final else record_size
        offset = 102 + index * (record_size + 21)
        assert wire[offset : offset + 5] == struct.pack(">BI", flags, size + 16)


@pytest.mark.parametrize("vector", CHANNELS, ids=[v["name"] for v in CHANNELS])
def test_valid_channel_vector(vector: dict[str, Any]) -> None:
    key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
    roles = (Role.INITIATOR, Role.RESPONDER)
    writes = {role: [bytes.fromhex(w) for w in vector[f"{role.name.lower()}_writes"]] for role in roles}
    expected = {role: bytes.fromhex(vector[f"{role.name.lower()}_ciphertext"]) for role in roles}
    hybrid = vector["key_exchange"] == KeyExchange.MLKEM768_X25519
    kem_ciphertext = bytes.fromhex(vector["responder_mlkem768_ciphertext"]) if hybrid else b""
    kem_seed = bytes.fromhex(vector["initiator_mlkem768_seed"]) if hybrid else None

    def channel(role: Role) -> Channel:
        if role is Role.INITIATOR:
            ephemeral = FixedEphemeral(bytes.fromhex(vector["initiator_x25519_private"]), mlkem_seed=kem_seed)
        else:
            encapsulation = None
            if kem_seed is not None:  # the shared secret that goes with the stored ciphertext
                shared = mlkem.MLKEM768PrivateKey.from_seed_bytes(kem_seed).decapsulate(kem_ciphertext)
                encapsulation = (shared, kem_ciphertext)
            ephemeral = FixedEphemeral(
                bytes.fromhex(vector["responder_x25519_private"]), mlkem_encapsulation=encapsulation
            )
        identity = vector[f"{role.name.lower()}_id"]
        return fixed_randomness_channel(
            key,
            role=role,
            context=context,
            record_size=vector["record_size"],
            key_exchange=KeyExchange(vector["key_exchange"]),
            local_id=bytes.fromhex(identity) if identity is not None else None,
            salt=bytes.fromhex(vector[f"{role.name.lower()}_salt"]),
            ephemeral=ephemeral,
        )

    # gcmstream with the injected salts and ephemeral keys sends exactly the expected bytes.
    initiator, responder = channel(Role.INITIATOR), channel(Role.RESPONDER)
    sent = dict(zip(roles, (bytearray(b) for b in handshake_bytes(initiator, responder)), strict=True))
    for role, side in ((Role.INITIATOR, initiator), (Role.RESPONDER, responder)):
        for data in writes[role]:
            sent[role] += side.sealer.seal(data, flush=True)
        sent[role] += side.sealer.close()
    assert {role: bytes(out) for role, out in sent.items()} == expected

    # A new end with the same inputs opens the other's bytes, handshake included.
    for role in roles:
        reader = channel(role.peer)
        reader.initial_data()
        got, error = open_with(reader.opener, expected[role])
        assert error is None
        assert got == b"".join(writes[role])

    # The independent reader rebuilds both handshakes byte for byte and opens both directions.
    assert reference_channel(vector) == (b"".join(writes[Role.INITIATOR]), b"".join(writes[Role.RESPONDER]))


INITIATOR_CASES = [
    json.loads(path.read_text()) for path in sorted((VECTORS / "invalid").glob("channel_initiator_*.json"))
]


def reference_initiator_hello(vector: dict[str, Any]) -> bytes:
    """The header an INITIATOR with the vector's inputs sends first (docs/FORMAT.md 4, 5.2),
    built here from the text: its X25519 share, then its ML-KEM-768 encapsulation key for a
    hybrid offer. Its key is the ring's first key, or ``key``."""
    exchange = vector["receiver_key_exchange"]
    own = x25519.X25519PrivateKey.from_private_bytes(bytes.fromhex(vector["receiver_x25519"]))
    fields = struct.pack(">HH", 1, 32) + own.public_key().public_bytes_raw()
    if exchange == 2:
        seed = bytes.fromhex(vector["receiver_mlkem768_seed"])
        encapsulation_key = mlkem.MLKEM768PrivateKey.from_seed_bytes(seed).public_key().public_bytes_raw()
        fields += struct.pack(">HH", 2, len(encapsulation_key)) + encapsulation_key
    key = bytes.fromhex((vector.get("receiver_key_ring") or [vector["key"]])[0])
    salt, record_size = bytes.fromhex(vector["receiver_salt"]), vector["receiver_record_size"]
    return _header(key, bytes.fromhex(vector["context"]), 1, exchange, record_size, salt, fields)[0]


@pytest.mark.parametrize("vector", INITIATOR_CASES, ids=[v["name"] for v in INITIATOR_CASES])
def test_invalid_initiator_vector_first_flight_is_built_from_the_text(vector: dict[str, Any]) -> None:
    """Each channel-initiator vector's ``receiver_sends`` (the reading initiator's own header,
    to which the answer in ``input`` is bound) follows from the vector's fields alone."""
    assert reference_initiator_hello(vector) == bytes.fromhex(vector["receiver_sends"])


def test_invalid_initiator_vectors_fail_where_their_names_say() -> None:
    """An independent initiator (FORMAT.md 5.2 on cryptography's primitives) finds the faults of
    three channel-initiator vectors where their construction puts them: the answer to the X25519
    offer is whole and its Finished right in ``truncated`` and ``flipped_tag``, and one bit off in
    ``flipped_finished``."""
    by_name = {v["name"]: v for v in INITIATOR_CASES}
    finished: dict[str, tuple[bytes, bytes]] = {}
    for name in ("truncated", "flipped_tag", "flipped_finished"):
        vector = by_name[f"channel_initiator_{name}"]
        key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
        answer = bytes.fromhex(vector["input"])
        (fields_length,) = struct.unpack_from(">H", answer, 60)
        header = answer[: 62 + fields_length + 32]
        field_type, length = struct.unpack_from(">HH", header, 62)
        assert (field_type, length, fields_length) == (1, 32, 36)  # the X25519 share alone
        own = x25519.X25519PrivateKey.from_private_bytes(bytes.fromhex(vector["receiver_x25519"]))
        shared = own.exchange(x25519.X25519PublicKey.from_public_bytes(header[66:98]))
        transcript = _sha256(reference_initiator_hello(vector) + header)
        okm = HKDF(
            algorithm=hashes.SHA256(),
            length=128,
            salt=key,
            info=b"gcmstream/2 channel" + _sha256(context) + transcript,
        ).derive(shared)
        expected = hmac.digest(okm[96:128], transcript, "sha256")
        finished[name] = (expected, answer[len(header) : len(header) + 32])
    assert finished["truncated"][0] == finished["truncated"][1]
    assert finished["flipped_tag"][0] == finished["flipped_tag"][1]
    expected, got = finished["flipped_finished"]
    assert (int.from_bytes(expected, "big") ^ int.from_bytes(got, "big")).bit_count() == 1
