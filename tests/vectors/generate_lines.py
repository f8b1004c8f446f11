"""Write tests/vectors/lines.json: recipient and identity lines, identity files and recipient
tags from fixed private keys (docs/FORMAT.md 4.5; run from the repository root; ``--check``
compares instead of writing). Everything here is deterministic."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gcmstream import Identity, RecipientKind

OUT = Path(__file__).parent / "lines.json"

IDENTITIES = [
    ("x25519", Identity(RecipientKind.X25519, bytes(range(192, 224)))),
    ("mlkem768x25519", Identity(RecipientKind.MLKEM768_X25519, bytes(range(96)))),
]


def entry(name: str, identity: Identity) -> dict[str, Any]:
    text = identity.to_text()
    recipient = str(identity.recipient)
    return {
        "kind": name,
        "kind_byte": int(identity.kind),
        "secret": identity._secret.hex(),
        "public": identity.recipient.public_bytes.hex(),
        "recipient": recipient,
        "identity": text,
        "identity_file": f"# recipient: {recipient}\n{text}\n",
        "tag": identity.recipient.tag.hex(),
    }


def generate() -> dict[str, Any]:
    return {"lines": [entry(name, identity) for name, identity in IDENTITIES]}


def main() -> int:
    data = generate()
    if "--check" in sys.argv:
        return 0 if json.loads(OUT.read_text()) == data else 1
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
