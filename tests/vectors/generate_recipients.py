"""Write tests/vectors/recipients.json: streams sealed to recipients or a passphrase, valid and
invalid (run from the repository root; ``--check`` compares instead of writing).

The file key, the header salt and the scrypt salt are injected (test-only ``_random`` and
``_salt``). HPKE draws its own ephemeral keys inside cryptography and has no way to inject
them, so every run makes different stanza bodies: the vectors are read-side known answers (an
independent reader must open them and rebuild each header from its fields), and ``--check``
compares everything except the bytes HPKE drew.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcmstream import Identity, Opener, RecipientKind, Role, Sealer
from gcmstream.format import MAX_STANZA_FIELDS_SIZE, FieldType, make_header
from gcmstream.header import HeaderSpec
from gcmstream.recipients import MAX_STANZAS

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def recipient_line(kind: RecipientKind, payload: bytes) -> str:
    """A recipient line as FORMAT.md 4.5 writes it, for any payload (gcmstream's own encoder
    refuses the bad keys these lines carry)."""
    start = f"gcmstream-recipient-v1:{kind.text}:"
    body = payload + hashlib.sha256(start.encode("ascii") + payload).digest()[:4]
    return start + base64.urlsafe_b64encode(body).rstrip(b"=").decode("ascii")


KINDS = {kind.text: kind for kind in RecipientKind}
OUT = Path(__file__).parent / "recipients.json"

HYBRID_A = Identity(RecipientKind.MLKEM768_X25519, bytes(range(96)))
HYBRID_B = Identity(RecipientKind.MLKEM768_X25519, bytes(range(96, 192)))
X25519_C = Identity(RecipientKind.X25519, bytes(range(192, 224)))
STRANGER = Identity(RecipientKind.MLKEM768_X25519, bytes(range(1, 97)))
FILE_KEY = bytes(range(0x40, 0x60))
SALT = bytes(range(0x80, 0xA0))
SCRYPT_SALT = bytes(range(0xC0, 0xD0))
PASSPHRASE = "correct horse battery staple"
PLAINTEXT = bytes(range(150))
RECORD_SIZE = 64


def injected(*pieces: bytes) -> Callable[[int], bytes]:
    queue = list(pieces)

    def draw(size: int) -> bytes:
        piece = queue.pop(0)
        assert len(piece) == size
        return piece

    return draw


def seal(context: bytes = b"", **keying: Any) -> bytes:
    sealer = Sealer(
        context=context,
        record_size=RECORD_SIZE,
        header_spec=HeaderSpec(salt=SALT, random_bytes=injected(FILE_KEY, SCRYPT_SALT)),
        **keying,
    )
    return bytes(sealer.seal(PLAINTEXT, final=True))


def identity(item: Identity) -> dict[str, str]:
    return {"kind": item.kind.text, "secret": item._secret.hex(), "recipient": str(item.recipient)}


def split(wire: bytes) -> tuple[int, bytes, bytes]:
    """(fields length, fields, records) of a one-way stream."""
    (length,) = struct.unpack_from(">H", wire, 60)
    return length, wire[62 : 62 + length], wire[62 + length + 32 :]


def fields_of(raw: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(raw):
        kind, length = struct.unpack_from(">HH", raw, pos)
        out.append((kind, raw[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    return out


def stanzas_of(value: bytes) -> list[bytes]:
    (count,) = struct.unpack_from(">H", value)
    out, pos = [], 2
    for _ in range(count):
        (length,) = struct.unpack_from(">H", value, pos + 2)
        out.append(value[pos : pos + 4 + length])
        pos += 4 + length
    return out


def with_stanzas(wire: bytes, stanzas: list[bytes], count: int | None = None) -> bytes:
    """``wire`` with its recipient stanzas replaced, its commitment kept (as an attacker who
    does not know the file key must keep it)."""
    _, raw, _ = split(wire)
    value = struct.pack(">H", len(stanzas) if count is None else count) + b"".join(stanzas)
    fields = struct.pack(">HH", FieldType.RECIPIENT_STANZAS, len(value)) + value
    commitment_at = 62 + len(raw)
    return wire[:60] + struct.pack(">H", len(fields)) + fields + wire[commitment_at:]


def rekeyed(wire: bytes, fields: list[tuple[int, bytes]]) -> bytes:
    """A header with these fields and a valid commitment under the file key (what a writer who
    knows the file key, a recipient, can make), then ``wire``'s records."""
    header, _ = make_header(
        FILE_KEY, Role.ONE_WAY, RECORD_SIZE, b"", SALT, fields=fields, max_fields_size=MAX_STANZA_FIELDS_SIZE
    )
    return header + split(wire)[2]


def mixed_kinds(*identities: Identity, tagged: bool = False, context: bytes = b"") -> bytes:
    """A stream whose untagged stanzas wrap FILE_KEY to these recipients of both kinds: what
    another tool may write. gcmstream's writer refuses to mix kinds (FORMAT.md 4.4), its
    readers open such a header, so the stanzas are made here, one ``wrap`` each, and the
    header and records by a Sealer under the file key with that field."""
    value = struct.pack(">H", len(identities))
    for item in identities:
        body = (item.recipient.tag if tagged else b"") + item.recipient.wrap(FILE_KEY)
        value += struct.pack(">BBH", item.kind, int(tagged), len(body)) + body
    field = ((FieldType.RECIPIENT_STANZAS, value),)
    sealer = Sealer(
        FILE_KEY, context=context, record_size=RECORD_SIZE, header_spec=HeaderSpec(salt=SALT, fields=field)
    )
    return bytes(sealer.seal(PLAINTEXT, final=True))


def generate() -> dict[str, Any]:
    three = mixed_kinds(HYBRID_A, HYBRID_B, X25519_C)
    tagged = mixed_kinds(HYBRID_A, X25519_C, tagged=True, context=b"vector context")
    secret = seal(passphrase=PASSPHRASE, work_factor=10)
    common = {"file_key": FILE_KEY.hex(), "salt": SALT.hex(), "record_size": RECORD_SIZE}
    valid = [
        {
            "name": "three recipients, anonymous",
            **common,
            "context": "",
            "tagged": False,
            "identities": [identity(i) for i in (HYBRID_A, HYBRID_B, X25519_C)],
            "plaintext": PLAINTEXT.hex(),
            "ciphertext": three.hex(),
        },
        {
            "name": "two recipients, tagged, with a context",
            **common,
            "context": b"vector context".hex(),
            "tagged": True,
            "identities": [identity(i) for i in (HYBRID_A, X25519_C)],
            "plaintext": PLAINTEXT.hex(),
            "ciphertext": tagged.hex(),
        },
        {
            "name": "passphrase, log2(N)=10",
            **common,
            "context": "",
            "passphrase": PASSPHRASE,
            "scrypt_salt": SCRYPT_SALT.hex(),
            "work_factor": 10,
            "plaintext": PLAINTEXT.hex(),
            "ciphertext": secret.hex(),
        },
    ]
    a, b, c = stanzas_of(fields_of(split(three)[1])[0][1])
    extra = stanzas_of(fields_of(split(seal(recipients=[STRANGER.recipient]))[1])[0][1])[0]
    many = [Identity(RecipientKind.X25519, bytes([i]) * 32).recipient for i in range(1, MAX_STANZAS + 2)]
    count_value = struct.pack(">H", len(many)) + b"".join(
        struct.pack(">BBH", r.kind, 0, 80) + r.wrap(FILE_KEY) for r in many
    )
    passphrase_field = fields_of(split(secret)[1])[0]
    costly = bytes([20, 8, 1]) + passphrase_field[1][3:]
    ours = [identity(HYBRID_A)]
    past = a[:2] + b"\xff\xff" + a[4:]
    longer = a[:2] + struct.pack(">H", len(a) - 4 + 1) + a[4:] + b"\0"
    unknown_flag = a[:1] + b"\x02" + a[2:]
    short_tag = struct.pack(">BBH", 3, 1, 4) + b"\0" * 4  # kind 3 (unknown), TAGGED, 4 bytes
    unknown_kind = struct.pack(">BBH", 3, 0, 5) + b"\0" * 5  # skipped, still counts
    low_order_enc = a[: 4 + 1088] + bytes(32) + a[4 + 1120 :]  # X25519 part of enc: zero point
    params = passphrase_field[1]
    suite_1, _ = make_header(
        bytes(16),
        Role.ONE_WAY,
        RECORD_SIZE,
        b"",
        SALT,
        fields=[fields_of(split(three)[1])[0]],
        max_fields_size=MAX_STANZA_FIELDS_SIZE,
    )
    invalid = [
        ("unknown stanza flag", ours, None, with_stanzas(three, [unknown_flag]), "StanzaError"),
        (
            "tagged stanza of unknown kind shorter than its tag",
            ours,
            None,
            with_stanzas(three, [short_tag, a]),
            "StanzaError",
        ),
        (
            "unknown kind skipped, our stanza dropped",
            ours,
            None,
            with_stanzas(three, [unknown_kind, b, c]),
            "NoIdentityMatchedError",
        ),
        (
            "low-order X25519 enc is a non-match",
            ours,
            None,
            with_stanzas(three, [low_order_enc]),
            "NoIdentityMatchedError",
        ),
        ("reserved stanza field type 0x0012", ours, None, rekeyed(three, [(0x12, b"\0")]), "StanzaError"),
        ("suite 1 with recipient stanzas", ours, None, suite_1 + split(three)[2], "StanzaError"),
        (
            "scrypt r = 16",
            [],
            PASSPHRASE,
            rekeyed(secret, [(0x11, bytes([10, 16, 1]) + params[3:])]),
            "StanzaError",
        ),
        (
            "scrypt p = 2",
            [],
            PASSPHRASE,
            rekeyed(secret, [(0x11, bytes([10, 8, 2]) + params[3:])]),
            "StanzaError",
        ),
        (
            "scrypt log2_n = 0",
            [],
            PASSPHRASE,
            rekeyed(secret, [(0x11, bytes([0, 8, 1]) + params[3:])]),
            "StanzaError",
        ),
        ("added stanza", ours, None, with_stanzas(three, [a, b, c, extra]), "KeyCommitmentError"),
        ("dropped stanza", ours, None, with_stanzas(three, [a, c]), "KeyCommitmentError"),
        ("swapped stanzas", ours, None, with_stanzas(three, [b, a, c]), "KeyCommitmentError"),
        ("our stanza dropped", ours, None, with_stanzas(three, [b, c]), "NoIdentityMatchedError"),
        ("stranger's identity", [identity(STRANGER)], None, three, "NoIdentityMatchedError"),
        ("stanza count over the limit", ours, None, rekeyed(three, [(0x10, count_value)]), "StanzaError"),
        ("stanza count announced over the limit", ours, None, with_stanzas(three, [a], 101), "StanzaError"),
        ("stanza longer than its kind", ours, None, with_stanzas(three, [longer]), "StanzaError"),
        ("stanza runs past its field", ours, None, with_stanzas(three, [past]), "StanzaError"),
        ("stanza count above the stanzas", ours, None, with_stanzas(three, [a], 2), "StanzaError"),
        ("scrypt over the ceiling", [], PASSPHRASE, rekeyed(secret, [(0x11, costly)]), "WorkFactorError"),
        ("wrong passphrase", [], "Tr0ub4dor&3", secret, "NoIdentityMatchedError"),
        ("passphrase file to an identity reader", ours, None, secret, "NoIdentityMatchedError"),
        ("recipient file to a passphrase reader", [], PASSPHRASE, three, "NoIdentityMatchedError"),
        (
            "passphrase beside a recipient stanza",
            [],
            PASSPHRASE,
            rekeyed(three, [fields_of(split(three)[1])[0], passphrase_field]),
            "StanzaError",
        ),
        (
            "recipient stanza beside a passphrase",
            ours,
            None,
            rekeyed(three, [fields_of(split(three)[1])[0], passphrase_field]),
            "StanzaError",
        ),
    ]
    recipient_text = str(HYBRID_A.recipient)
    flipped = recipient_text[:-5] + ("A" if recipient_text[-5] != "A" else "B") + recipient_text[-4:]
    x_text = str(X25519_C.recipient)
    bad_recipients = [
        {"name": "one character changed", "text": flipped, "error": "RecipientError"},
        {"name": "last character cut", "text": recipient_text[:-1], "error": "RecipientError"},
        {
            "name": "kind changed",
            "text": x_text.replace(":x25519:", ":mlkem768x25519:"),
            "error": "RecipientError",
        },
        {"name": "identity given as recipient", "text": HYBRID_A.to_text(), "error": "RecipientError"},
        {"name": "unknown version", "text": x_text.replace("-v1:", "-v2:"), "error": "RecipientError"},
        {
            "name": "low-order X25519 key, checksum right",
            "text": recipient_line(RecipientKind.X25519, (1).to_bytes(32, "little")),
            "error": "RecipientError",
        },
        {
            "name": "ML-KEM-768 key failing the modulus check, checksum right",
            "text": recipient_line(
                RecipientKind.MLKEM768_X25519,
                b"\xff\xff" + HYBRID_A.recipient.public_bytes[2:],
            ),
            "error": "RecipientError",
        },
        {
            "name": "non-canonical base64url: unused bits of the last character set",
            "text": recipient_text[:-1] + _B64[_B64.index(recipient_text[-1]) | 1],
            "error": "RecipientError",
        },
        {"name": "base64 padding", "text": recipient_text + "=", "error": "RecipientError"},
        {"name": "a space inside", "text": x_text[:40] + " " + x_text[40:], "error": "RecipientError"},
        {
            "name": "upper-case kind",
            "text": x_text.replace(":x25519:", ":X25519:"),
            "error": "RecipientError",
        },
    ]
    if _B64.index(recipient_text[-1]) & 1:
        raise SystemExit("the hybrid recipient's last character already has its low bit set")
    for name, identities, passphrase, wire, error in invalid:
        keys = [Identity(KINDS[i["kind"]], bytes.fromhex(i["secret"])) for i in identities]
        opener = Opener(identities=keys or None, passphrase=passphrase)
        opener.receive_data(wire)
        try:
            opener.read()
        except Exception as exc:
            if type(exc).__name__ != error:
                raise AssertionError(name) from exc
        else:
            raise AssertionError(name)
    return {
        "valid": valid,
        "invalid": [
            {"name": name, "identities": ids, "passphrase": pp, "ciphertext": wire.hex(), "error": error}
            for name, ids, pp, wire, error in invalid
        ],
        "invalid_recipients": bad_recipients,
    }


def main() -> int:
    data = generate()
    if "--check" in sys.argv:
        stored = json.loads(OUT.read_text())
        # HPKE's own randomness differs per run: compare what does not depend on it
        fixed = [[v for v in vectors["valid"] if "passphrase" in v] for vectors in (stored, data)]
        names = [v["name"] for v in stored["invalid"]] == [v["name"] for v in data["invalid"]]
        return 0 if fixed[0] == fixed[1] and names else 1
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
