"""Known-answer vectors for recipient and passphrase streams (tests/vectors/recipients.json,
written by tests/vectors/generate_recipients.py).

An independent reader written here from docs/FORMAT.md 4.4, on cryptography's HPKE, scrypt and
AES-GCM and nothing of gcmstream, opens every valid vector with each identity alone and
rebuilds its header byte for byte; gcmstream opens them too, and reseals the passphrase vector
exactly from the injected randomness. Every invalid vector raises its documented error before
any record is opened."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

import gcmstream.errors
from gcmstream import Identity, Opener, Recipient, RecipientKind, Sealer, StreamBrokenError
from gcmstream.header import HeaderSpec

from .test_vectors import _header, _key_id, reference_records

VECTORS = json.loads((Path(__file__).parent / "vectors" / "recipients.json").read_text())
KINDS = {"x25519": 1, "mlkem768x25519": 2}


def reference_private_key(
    kind: int, secret: bytes
) -> x25519.X25519PrivateKey | hpke.MLKEM768X25519PrivateKey:
    """An identity's key from its bytes: X25519 (32), or ML-KEM-768 seed (64) then X25519 (32)."""
    if kind == 1:
        return x25519.X25519PrivateKey.from_private_bytes(secret)
    return hpke.MLKEM768X25519PrivateKey(
        mlkem.MLKEM768PrivateKey.from_seed_bytes(secret[:64]),
        x25519.X25519PrivateKey.from_private_bytes(secret[64:]),
    )


def reference_open(vector: dict[str, Any], identity: dict[str, str] | None) -> bytes:
    """Open a one-way stream with one identity (or the vector's passphrase), from the format
    description alone; returns the plaintext after checking the file key and the header."""
    wire = bytes.fromhex(vector["ciphertext"])
    magic, version, role, suite, exchange, record_size, ident, salt, length = struct.unpack_from(
        ">4sBBBBI16s32sH", wire
    )
    assert (magic, version, role, suite, exchange) == (b"GCMS", 2, 0, 2, 0)
    fields = wire[62 : 62 + length]
    field_type, value_length = struct.unpack_from(">HH", fields)
    value = fields[4:]
    assert len(value) == value_length
    if identity is None:
        assert field_type == 0x0011 and len(value) == 3 + 16 + 32 + 16
        log2_n, r, p = value[:3]
        scrypt_salt = value[3:19]
        wrap_key = Scrypt(
            salt=b"gcmstream/2 passphrase" + scrypt_salt, length=32, n=1 << log2_n, r=r, p=p
        ).derive(vector["passphrase"].encode())
        file_key = AESGCM(wrap_key).decrypt(bytes(12), value[19:], b"gcmstream/2 passphrase" + value[:3])
    else:
        assert field_type == 0x0010
        kind = KINDS[identity["kind"]]
        private = reference_private_key(kind, bytes.fromhex(identity["secret"]))
        kem = hpke.KEM.X25519 if kind == 1 else hpke.KEM.MLKEM768_X25519
        suite_ = hpke.Suite(kem, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
        (count,) = struct.unpack_from(">H", value)
        pos, found = 2, None
        for _ in range(count):
            stanza_kind, flags, stanza_length = struct.unpack_from(">BBH", value, pos)
            body = value[pos + 4 : pos + 4 + stanza_length]
            pos += 4 + stanza_length
            if flags & 1:
                body = body[8:]
            if stanza_kind == kind and found is None:
                try:
                    found = suite_.decrypt(body, private, info=b"gcmstream/2 recipient" + bytes([kind]))
                except Exception:
                    continue
        assert pos == len(value) and found is not None
        file_key = found
    assert file_key.hex() == vector["file_key"] and _key_id(file_key) == ident
    header, secret = _header(file_key, bytes.fromhex(vector["context"]), 0, 0, record_size, salt, fields)
    assert wire.startswith(header)
    return reference_records(32, secret, record_size, wire[len(header) :])


def identity_of(item: dict[str, str]) -> Identity:
    kind = next(kind for kind in RecipientKind if kind.text == item["kind"])
    identity = Identity(kind, bytes.fromhex(item["secret"]))
    assert str(identity.recipient) == item["recipient"]
    return identity


def gcmstream_open(wire: bytes, **keying: Any) -> bytes:
    opener = Opener(**keying)
    opener.receive_data(wire)
    opener.receive_eof()
    out = bytearray()
    while chunk := opener.read():
        out += chunk
    assert opener.at_eof
    return bytes(out)


def test_there_are_vectors() -> None:
    assert len(VECTORS["valid"]) == 3 and len(VECTORS["invalid"]) >= 16 and VECTORS["invalid_recipients"]


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_recipient_vector(vector: dict[str, Any]) -> None:
    plaintext = bytes.fromhex(vector["plaintext"])
    wire = bytes.fromhex(vector["ciphertext"])
    context = bytes.fromhex(vector["context"])
    if "passphrase" in vector:
        assert reference_open(vector, None) == plaintext
        assert gcmstream_open(wire, passphrase=vector["passphrase"], context=context) == plaintext
        pieces = [bytes.fromhex(vector["file_key"]), bytes.fromhex(vector["scrypt_salt"])]
        sealer = Sealer(
            passphrase=vector["passphrase"],
            work_factor=vector["work_factor"],
            context=context,
            record_size=vector["record_size"],
            header_spec=HeaderSpec(
                salt=bytes.fromhex(vector["salt"]), random_bytes=lambda size: pieces.pop(0)
            ),
        )
        assert bytes(sealer.seal(plaintext, final=True)) == wire
        return
    for item in vector["identities"]:
        assert reference_open(vector, item) == plaintext
        assert gcmstream_open(wire, identities=[identity_of(item)], context=context) == plaintext


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_recipient_vector(vector: dict[str, Any]) -> None:
    error = getattr(gcmstream.errors, vector["error"])
    identities = [identity_of(item) for item in vector["identities"]] or None
    opener = Opener(identities=identities, passphrase=vector["passphrase"])
    opener.receive_data(bytes.fromhex(vector["ciphertext"]))
    opener.receive_eof()
    with pytest.raises(error) as caught:
        opener.read()
    assert type(caught.value) is error
    assert opener.records_opened == 0 and opener.header is None
    with pytest.raises(StreamBrokenError):
        opener.read()


@pytest.mark.parametrize("vector", VECTORS["invalid_recipients"], ids=lambda v: v["name"])
def test_invalid_recipient_line(vector: dict[str, Any]) -> None:
    with pytest.raises(getattr(gcmstream.errors, vector["error"])) as caught:
        Recipient.parse(vector["text"])
    assert vector["text"].split(":")[-1][:16] not in str(caught.value)


def test_hpke_info_binds_format_version_and_kind() -> None:
    """A stanza body sealed with another kind's info, or another version's, does not open."""
    vector = VECTORS["valid"][0]
    item = vector["identities"][2]  # the X25519 one
    private = x25519.X25519PrivateKey.from_private_bytes(bytes.fromhex(item["secret"]))
    public = private.public_key()
    suite_ = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
    identity = identity_of(item)
    good = suite_.encrypt(b"k" * 32, public, info=b"gcmstream/2 recipient\x01")
    assert identity.unwrap(good) == b"k" * 32
    for info in (b"gcmstream/2 recipient\x02", b"gcmstream/3 recipient\x01", b""):
        assert identity.unwrap(suite_.encrypt(b"k" * 32, public, info=info)) is None
    assert hashlib.sha256(b"gcmstream/2 recipient tag\x01" + public.public_bytes_raw()).digest()[:8] == (
        identity.recipient.tag
    )
