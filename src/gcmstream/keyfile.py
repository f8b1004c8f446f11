"""Key files: one line of text that says what it is.

::

    gcmstream-key-v1:aes128:<22 characters of unpadded base64url>
    gcmstream-key-v1:aes256:<43 characters of unpadded base64url>

The prefix makes a key recognisable (to people, and to secret scanners); the version lets a
later format be told apart; the suite must agree with the key length. Blank lines and lines
starting with ``#`` are ignored when reading. Key files are written with mode 0600 and never
overwrite an existing file unless asked to.
"""

from __future__ import annotations

import base64
import binascii
import os
import re

from ._numbers import IDENTITY_PREFIX, RECIPIENT_PREFIX
from ._output import write_secret_file
from .errors import KeyFileError
from .format import Buffer, Suite

# KeyFileError is defined in errors.py with every other error; still importable from here.
__all__ = (
    "KEY_PREFIX",
    "KeyFileError",
    "format_key",
    "parse_key",
    "read_key_file",
    "write_key_file",
)

KEY_PREFIX = "gcmstream-key-v1"
_SUITE_NAMES = {Suite.AES_128_GCM: "aes128", Suite.AES_256_GCM: "aes256"}
_NAMED_SUITES = {name: suite for suite, name in _SUITE_NAMES.items()}
_VERSIONED_PREFIX = re.compile(r"gcmstream-key-v[0-9]{1,3}")


def format_key(key: Buffer) -> str:
    """The key as one line of key-file text (no newline)."""
    suite = Suite.for_key(key)
    encoded = base64.urlsafe_b64encode(bytes(key)).rstrip(b"=").decode("ascii")
    return f"{KEY_PREFIX}:{_SUITE_NAMES[suite]}:{encoded}"


def parse_key(text: str) -> bytes:
    """The key in key-file text. Raises KeyFileError, whose message never shows key material."""
    if "primaryKeyId" in text and text.lstrip().startswith("{"):  # never shown: a keyset is secret
        raise KeyFileError("this is a Tink keyset, not a gcmstream key file: add --format tink")
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) != 1:
        raise KeyFileError(f"expected one key line, found {len(lines)}")
    parts = lines[0].split(":")
    # the two other line kinds a user may hand over: named by their prefix, the line never shown
    if parts[0] == IDENTITY_PREFIX:
        raise KeyFileError(
            "this looks like an identity file, not a key file: read it with read_identity_file "
            "(on the command line, decrypt -i)"
        )
    if parts[0] == RECIPIENT_PREFIX:
        raise KeyFileError("this is a recipient line, not a key file: encrypt to it with Recipient.parse")
    if len(parts) != 3 or not parts[0].startswith("gcmstream-key-"):
        raise KeyFileError(
            f"not a gcmstream key line (expected three fields separated by colons: {KEY_PREFIX}, "
            "aes128 or aes256, and the key in base64url)"
        )
    prefix, suite_name, encoded = parts
    # No field of a malformed line is ever repeated in a message: a line with its fields
    # swapped or missing may hold the key anywhere. Only a known shape is named.
    if prefix != KEY_PREFIX:
        version = prefix if _VERSIONED_PREFIX.fullmatch(prefix) else "this key format"
        raise KeyFileError(f"{version} is not supported (this reads {KEY_PREFIX})")
    suite = _NAMED_SUITES.get(suite_name)
    if suite is None:
        raise KeyFileError("unknown key suite in the second field (expected aes128 or aes256)")
    try:
        key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        raise KeyFileError("key is not valid base64url") from None
    if len(key) != suite.key_size:
        raise KeyFileError(f"an {suite_name} key has {suite.key_size} bytes, this one has {len(key)}")
    return key


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """Read and parse a key file (OSError if it cannot be read, KeyFileError if malformed)."""
    with open(path, encoding="utf-8", errors="replace") as file:
        text = file.read(4096)
    return parse_key(text)


def write_key_file(path: str | os.PathLike[str], key: Buffer, *, force: bool = False) -> None:
    """Write ``key`` to ``path`` with mode 0600. An existing file raises FileExistsError
    unless ``force``; then it is replaced atomically (never left half written)."""
    write_secret_file(path, (format_key(key) + "\n").encode("ascii"), force=force)
