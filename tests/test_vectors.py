"""Known-answer vectors (tests/vectors/valid.json, invalid.json; written by generate.py).

Valid vectors: sealing with the injected salt gives exactly the expected ciphertext, opening it
gives the plaintext (all at once and byte by byte), and an independent reader written here from
the format description, straight on cryptography's primitives, agrees. Invalid vectors: opening
raises the named error after releasing exactly the expected plaintext.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

import gcmstream.errors
from gcmstream import Channel, GcmStreamError, KeyLimits, Opener, Role, Sealer

VECTORS = Path(__file__).parent / "vectors"
TAG_MIN = 16  # the AES-GCM tag: the shortest record body


def load(name: str) -> list[dict[str, Any]]:
    data = json.loads((VECTORS / name).read_text())
    assert isinstance(data, list)
    return data


VALID = [v for v in load("valid.json") if v["mode"] == "one-way"]
CHANNELS = [v for v in load("valid.json") if v["mode"] == "channel"]
INVALID = load("invalid.json")


def seal(vector: dict[str, Any]) -> bytes:
    limits = KeyLimits(**vector["limits"]) if vector["limits"] else None
    sealer = Sealer(
        bytes.fromhex(vector["key"]),
        context=bytes.fromhex(vector["context"]),
        record_size=vector["record_size"],
        limits=limits,
        _salt=bytes.fromhex(vector["salt"]),
    )
    out = bytearray()
    for index, data in enumerate(vector["writes"]):
        out += sealer.seal(bytes.fromhex(data))
        if index in vector["update_key_after"]:
            sealer.update_key()
        if index in vector["flush_after"] or index in vector["update_key_after"]:
            out += sealer.flush()
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


def reference_open(
    key: bytes, context: bytes, wire: bytes, role: int = 0, receiver_header: bytes = b""
) -> bytes:
    """An independent reader of valid streams: the format spelled out on cryptography's API.

    ``role`` is the sender's (0 one-way, 1 initiator, 2 responder); a channel direction is keyed
    from both headers, so it needs the receiver's header too.
    """

    def expand(secret: bytes, label: bytes, length: int) -> bytes:
        return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=label).derive(secret)

    def sha256(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    fixed = struct.unpack_from(">4sBBBBI16s32sH", wire)
    magic, version, sender_role, suite, exchange, record_size, ident, salt, fields_length = fixed
    assert (magic, version, sender_role, exchange) == (b"GCMS", 2, role, 0)
    assert suite == {16: 1, 32: 2}[len(key)]
    assert ident == HKDF(algorithm=hashes.SHA256(), length=16, salt=None, info=b"gcmstream/2 key id").derive(
        key
    )
    header_end = 62 + fields_length + 32
    body, commitment = wire[: header_end - 32], wire[header_end - 32 : header_end]
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=64,
        salt=salt,
        info=b"gcmstream/2 header" + sha256(body) + sha256(context),
    ).derive(key)
    assert okm[:32] == commitment
    secret = okm[32:]
    if role:
        secret = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=b"gcmstream/2 channel"
            + sha256(wire[:header_end])
            + sha256(receiver_header)
            + sha256(context),
        ).derive(key)
    plaintext = bytearray()
    pos, seq, final = header_end, 0, False
    while not final:
        aead = AESGCM(expand(secret, b"gcmstream/2 key", len(key)))
        iv = int.from_bytes(expand(secret, b"gcmstream/2 iv", 12), "big")
        flags, length = struct.unpack_from(">BI", wire, pos)
        assert TAG_MIN <= length <= record_size + TAG_MIN
        body = wire[pos + 5 : pos + 5 + length]
        plaintext += aead.decrypt((iv ^ seq).to_bytes(12, "big"), body, wire[pos : pos + 5])
        pos += 5 + length
        final = bool(flags & 1)
        if flags & 2:
            secret, seq = expand(secret, b"gcmstream/2 key update", 32), 0
        else:
            seq += 1
    assert pos == len(wire)
    return bytes(plaintext)


def test_there_are_vectors() -> None:
    assert len(VALID) >= 8
    assert len(CHANNELS) >= 2
    assert len(INVALID) >= 15
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


@pytest.mark.parametrize("vector", CHANNELS, ids=[v["name"] for v in CHANNELS])
def test_valid_channel_vector(vector: dict[str, Any]) -> None:
    key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
    salts = {Role.INITIATOR: vector["initiator_salt"], Role.RESPONDER: vector["responder_salt"]}
    writes = {role: [bytes.fromhex(w) for w in vector[f"{role.name.lower()}_writes"]] for role in salts}
    expected = {role: bytes.fromhex(vector[f"{role.name.lower()}_ciphertext"]) for role in salts}

    def channel(role: Role) -> Channel:
        return Channel(
            key,
            role=role,
            context=context,
            record_size=vector["record_size"],
            _salt=bytes.fromhex(salts[role]),
        )

    # Sealing with the injected salts gives exactly the expected bytes, each way.
    sides = {role: channel(role) for role in salts}
    sent = {role: bytearray(side.initial_data()) for role, side in sides.items()}
    for role, side in sides.items():
        side.opener.receive_data(sent[role.peer])
    for role, side in sides.items():
        for data in writes[role]:
            sent[role] += side.sealer.seal(data, flush=True)
        sent[role] += side.sealer.close()
    assert {role: bytes(out) for role, out in sent.items()} == expected

    # Each side opens the other's bytes (a reader with a fresh salt could not: see test_codec).
    for role in salts:
        reader = channel(role.peer)
        reader.initial_data()
        got, error = open_with(reader.opener, expected[role])
        assert error is None
        assert got == b"".join(writes[role])
        plain = reference_open(key, context, expected[role], role, expected[role.peer][:94])
        assert plain == b"".join(writes[role])


@pytest.mark.parametrize("vector", INVALID, ids=[v["name"] for v in INVALID])
def test_invalid_vector(vector: dict[str, Any]) -> None:
    expected_error = getattr(gcmstream.errors, vector["error"])
    assert issubclass(expected_error, gcmstream.errors.ProtocolError)
    key, context = bytes.fromhex(vector["key"]), bytes.fromhex(vector["context"])
    wire = bytes.fromhex(vector["ciphertext"])
    released = bytes.fromhex(vector["released"])
    got, error = open_all(key, context, wire)
    assert type(error) is expected_error, f"expected {vector['error']}, got {error!r}"
    assert got == released
    # Fed byte by byte, the same error; what comes out first is still authentic. Only trailing
    # data may let more through, since the FINAL record opens before the extra bytes arrive.
    got, error = open_all(key, context, wire, bytewise=True)
    assert type(error) is expected_error
    if expected_error is not gcmstream.errors.TrailingDataError:
        assert got == released
    else:
        assert got.startswith(released)
