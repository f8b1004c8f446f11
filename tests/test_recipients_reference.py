"""docs/FORMAT.md 4.4 and 4.5 read by a stranger: the text forms of recipients and identities
and the HPKE of a stanza, rebuilt from the text alone (issue 21, 4.1-4.3).

Nothing of gcmstream and not cryptography's HPKE: lines from hashlib and base64; HPKE (RFC
9180 Base mode, single shot) from HMAC-SHA256, cryptography's HKDF-Expand, AES-GCM, X25519 and
ML-KEM-768, with the KEM IDs, the X-Wing combiner, the ``info`` and the tag exactly as
FORMAT.md gives them. Each valid stanza of tests/vectors/recipients.json (made by cryptography's
HPKE through gcmstream) must open here, and each line of tests/vectors/lines.json must be
rebuilt here byte for byte and accepted by gcmstream.
"""

from __future__ import annotations

import base64
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
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

import gcmstream
from gcmstream import Identity, Recipient

from .vectors.generate_lines import generate

VECTORS = Path(__file__).parent / "vectors"
LINES = json.loads((VECTORS / "lines.json").read_text())["lines"]
RECIPIENTS = json.loads((VECTORS / "recipients.json").read_text())
KIND_BYTE = {"x25519": 1, "mlkem768x25519": 2}
KEM_ID = {1: 0x0020, 2: 0x647A}  # DHKEM(X25519, HKDF-SHA256), MLKEM768-X25519 (X-Wing)
KDF_HKDF_SHA256, AEAD_AES_256_GCM = 0x0001, 0x0002
XWING_LABEL = bytes.fromhex("5c2e2f2f5e5c")  # the six ASCII characters \.//^\


# -- 4.5: lines --------------------------------------------------------------------------------


def public_from_secret(kind: int, secret: bytes) -> bytes:
    """The public key of a private key in FORMAT.md's private-key form."""
    if kind == 1:
        return x25519.X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()
    ek = mlkem.MLKEM768PrivateKey.from_seed_bytes(secret[:64]).public_key().public_bytes_raw()
    return ek + x25519.X25519PrivateKey.from_private_bytes(secret[64:]).public_key().public_bytes_raw()


def line(prefix: str, kind_text: str, payload: bytes) -> str:
    head = f"{prefix}:{kind_text}:"
    checksum = hashlib.sha256(head.encode("ascii") + payload).digest()[:4]
    return head + base64.urlsafe_b64encode(payload + checksum).decode("ascii").rstrip("=")


@pytest.mark.parametrize("vector", LINES, ids=lambda v: v["kind"])
def test_recipient_and_identity_lines_from_the_text(vector: dict[str, Any]) -> None:
    """Public key, both lines, the identity file and the tag, from the private key alone; and
    gcmstream parses the lines to the same keys and writes the same identity file text."""
    kind = KIND_BYTE[vector["kind"]]
    assert vector["kind_byte"] == kind
    secret = bytes.fromhex(vector["secret"])
    public = public_from_secret(kind, secret)
    assert public.hex() == vector["public"]
    assert (len(secret), len(public)) == ((32, 32) if kind == 1 else (96, 1216))
    recipient = line("gcmstream-recipient-v1", vector["kind"], public)
    identity = line("gcmstream-identity-v1", vector["kind"], secret)
    assert (recipient, identity) == (vector["recipient"], vector["identity"])
    assert len(recipient) == (78 if kind == 1 else 1665) and len(identity) == (77 if kind == 1 else 171)
    assert vector["identity_file"] == f"# recipient: {recipient}\n{identity}\n"
    tag = hashlib.sha256(b"gcmstream/2 recipient tag" + bytes([kind]) + public).digest()[:8]
    assert tag.hex() == vector["tag"]
    parsed = Identity.parse(identity)
    assert str(parsed.recipient) == recipient and parsed.to_text() == identity
    assert Recipient.parse(recipient).tag == tag


def test_the_lines_vector_file_is_what_its_generator_writes() -> None:
    assert generate() == {"lines": LINES}


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def other_unused_bits(text: str) -> str:
    """The line with its last character changed only in bits that encode nothing (a 100-byte
    payload and checksum end in one byte: the last character holds 4 unused bits)."""
    return text[:-1] + ALPHABET[ALPHABET.index(text[-1]) ^ 1]


CHANGES = {
    "padding": lambda text: text + "==",
    "kind in upper case": lambda text: text.replace(":mlkem768x25519:", ":MLKEM768X25519:"),
    "unused bits set": other_unused_bits,
    "four parts": lambda text: text.replace(":", "::", 1),
    "character outside the alphabet": lambda text: text[:-2] + "+" + text[-1],
    "checksum cut": lambda text: text[:-6],
    "recipient prefix": lambda text: text.replace("gcmstream-identity-v1", "gcmstream-recipient-v1"),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_recipient_line_is_read_only_in_its_canonical_form(change: Any) -> None:
    """Lines are read only in the canonical form 4.5 gives (RecipientError otherwise), here an
    identity line of kind 2; surrounding whitespace is not part of a line."""
    text = LINES[1]["identity"]
    assert Identity.parse(f"  {text}\t\r\n").to_text() == text
    changed = change(text)
    if change is other_unused_bits:  # the same bytes when decoded leniently
        payloads = [line.split(":")[2] + "==" for line in (changed, text)]
        assert payloads[0] != payloads[1]
        assert base64.urlsafe_b64decode(payloads[0]) == base64.urlsafe_b64decode(payloads[1])
    with pytest.raises(gcmstream.RecipientError):
        Identity.parse(changed)


# -- 4.4: HPKE of a stanza, RFC 9180 from primitives ---------------------------------------


def labeled_extract(suite_id: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return hmac.digest(salt, b"HPKE-v1" + suite_id + label + ikm, "sha256")


def labeled_expand(suite_id: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    labeled = struct.pack(">H", length) + b"HPKE-v1" + suite_id + label + info
    return HKDFExpand(hashes.SHA256(), length, labeled).derive(prk)


def kem_decap(kind: int, enc: bytes, secret: bytes) -> bytes:
    """The KEM's shared secret: DHKEM(X25519, HKDF-SHA256) (RFC 9180 4.1) or X-Wing."""
    if kind == 1:
        private = x25519.X25519PrivateKey.from_private_bytes(secret)
        dh = private.exchange(x25519.X25519PublicKey.from_public_bytes(enc))
        kem_suite = b"KEM" + struct.pack(">H", KEM_ID[1])
        eae_prk = labeled_extract(kem_suite, b"", b"eae_prk", dh)
        return labeled_expand(kem_suite, eae_prk, b"shared_secret", enc + public_from_secret(1, secret), 32)
    assert len(enc) == 1088 + 32
    ct_m, ct_x = enc[:1088], enc[1088:]
    ss_m = mlkem.MLKEM768PrivateKey.from_seed_bytes(secret[:64]).decapsulate(ct_m)
    x_private = x25519.X25519PrivateKey.from_private_bytes(secret[64:])
    ss_x = x_private.exchange(x25519.X25519PublicKey.from_public_bytes(ct_x))
    pk_x = x_private.public_key().public_bytes_raw()
    return hashlib.sha3_256(ss_m + ss_x + ct_x + pk_x + XWING_LABEL).digest()


def hpke_open(kind: int, secret: bytes, body: bytes) -> bytes:
    """Single-shot Base-mode open of a stanza body ``enc || ct`` (AES-256-GCM, HKDF-SHA256)."""
    enc_size = 32 if kind == 1 else 1120
    enc, ct = body[:enc_size], body[enc_size:]
    shared = kem_decap(kind, enc, secret)
    suite_id = b"HPKE" + struct.pack(">HHH", KEM_ID[kind], KDF_HKDF_SHA256, AEAD_AES_256_GCM)
    info = b"gcmstream/2 recipient" + bytes([kind])
    context = (
        b"\x00"
        + labeled_extract(suite_id, b"", b"psk_id_hash", b"")
        + labeled_extract(suite_id, b"", b"info_hash", info)
    )
    prk = labeled_extract(suite_id, shared, b"secret", b"")
    key = labeled_expand(suite_id, prk, b"key", context, 32)
    nonce = labeled_expand(suite_id, prk, b"base_nonce", context, 12)
    return AESGCM(key).decrypt(nonce, ct, b"")


def stanzas(wire: bytes) -> list[tuple[int, int, bytes]]:
    """(kind, flags, body) of each stanza of a one-way stream's 0x0010 field."""
    (fields_length,) = struct.unpack_from(">H", wire, 60)
    field_type, length = struct.unpack_from(">HH", wire, 62)
    assert field_type == 0x0010 and length == fields_length - 4
    value = wire[66 : 66 + length]
    (count,) = struct.unpack_from(">H", value)
    out, pos = [], 2
    for _ in range(count):
        kind, flags, size = struct.unpack_from(">BBH", value, pos)
        out.append((kind, flags, value[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(value)
    return out


RECIPIENT_VECTORS = [vector for vector in RECIPIENTS["valid"] if "identities" in vector]


@pytest.mark.parametrize("vector", RECIPIENT_VECTORS, ids=lambda v: v["name"])
def test_stanzas_open_with_hpke_rebuilt_from_rfc_9180_and_x_wing(vector: dict[str, Any]) -> None:
    """Each identity's stanza opens to the file key with the KEM IDs, combiner and info of
    FORMAT.md 4.4; a tagged stanza carries its recipient's tag first; another kind's info does
    not open it."""
    found = stanzas(bytes.fromhex(vector["ciphertext"]))
    for item in vector["identities"]:
        kind, secret = KIND_BYTE[item["kind"]], bytes.fromhex(item["secret"])
        public = public_from_secret(kind, secret)
        tag = hashlib.sha256(b"gcmstream/2 recipient tag" + bytes([kind]) + public).digest()[:8]
        opened = []
        for stanza_kind, flags, body in found:
            if stanza_kind != kind:
                continue
            if flags & 1:
                if body[:8] != tag:
                    continue
                body = body[8:]
            try:
                opened.append(hpke_open(kind, secret, body))
            except Exception:  # another recipient's stanza of the same kind
                continue
        assert opened == [bytes.fromhex(vector["file_key"])], item["kind"]
        assert vector["tagged"] == all(flags & 1 for _, flags, _ in found)


XWING = json.loads((VECTORS / "xwing.json").read_text())


def test_x_wing_as_written_reproduces_the_drafts_test_vector() -> None:
    """The X-Wing draft's first test vector (tests/vectors/xwing.json): its 32-byte seed,
    expanded by SHAKE256 to the 96-byte identity form of FORMAT.md 4.4, gives its public key
    (here and in gcmstream), and the combiner written above decapsulates its ciphertext to its
    shared secret."""
    expanded = hashlib.shake_256(bytes.fromhex(XWING["seed"])).digest(96)
    public = bytes.fromhex(XWING["pk"])
    assert public_from_secret(2, expanded) == public
    assert Identity(gcmstream.RecipientKind.MLKEM768_X25519, expanded).recipient.public_bytes == public
    assert kem_decap(2, bytes.fromhex(XWING["ct"]), expanded).hex() == XWING["ss"]
