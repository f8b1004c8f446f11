"""Public-key recipients and passphrases for one-way streams (docs/FORMAT.md 4.4). Sans-IO.

A stream sealed to recipients draws a random 32-byte file key, wraps it once per recipient with
single-shot HPKE (RFC 9180; ML-KEM-768 + X25519 by default, X25519 alone on request) and keys
the stream from the file key exactly as a pre-shared key would (same header, commitment and
records). A passphrase instead wraps the file key under a key scrypt derives from it. The
header's key commitment covers every stanza, so none can be added, dropped or swapped unseen.

Text forms, one line each (the checksum is the first 4 bytes of SHA-256 over the prefix, kind
and payload, so a typo, a cut line or a payload under the wrong kind is refused)::

    gcmstream-recipient-v1:mlkem768x25519:<base64url of public key and checksum>
    gcmstream-recipient-v1:x25519:<...>
    gcmstream-identity-v1:mlkem768x25519:<base64url of private key and checksum>
    gcmstream-identity-v1:x25519:<...>
"""

from __future__ import annotations

import base64
import binascii
import enum
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from . import _numbers
from ._output import write_secret_file
from .errors import NoIdentityMatchedError, RecipientError, StanzaError, WorkFactorError
from .format import MAX_STANZA_FIELDS_SIZE, TAG_SIZE, FieldType, Suite, sha256

__all__ = (
    "DEFAULT_WORK_FACTOR",
    "FILE_KEY_SIZE",
    "MAX_IDENTITIES",
    "MAX_SCRYPT_MEMORY",
    "MAX_SCRYPT_WORK",
    "MAX_STANZAS",
    "Identity",
    "Recipient",
    "RecipientKind",
    "Unlocker",
    "check_recipients",
    "check_work_factor",
    "parse_identities",
    "parse_recipients",
    "parse_recipients_file",
    "read_identity_file",
    "read_recipients_file",
    "seal_stanzas",
    "write_identity_file",
)

RECIPIENT_PREFIX = _numbers.RECIPIENT_PREFIX  # "gcmstream-recipient-v1", in _numbers for the command line
IDENTITY_PREFIX = _numbers.IDENTITY_PREFIX  # "gcmstream-identity-v1", in _numbers for keyfile.py
CHECKSUM_SIZE = 4
FILE_KEY_SIZE = 32  # the file key keys AES-256-GCM: a quantum-resistant wrap deserves it
TAG_FIELD_SIZE = 8  # an opt-in recipient tag: which recipient a stanza is for
MAX_STANZAS = 100
MAX_IDENTITIES = 10  # so a reader tries at most MAX_STANZAS * MAX_IDENTITIES = 1,000 HPKE opens
# scrypt: N = 2**log2_n. The default was measured on the development machine (2 shared cores):
# log2_n=18, r=8 takes 0.79 s of CPU (1.5 s wall) and 256 MiB, as age's default does. Readers
# refuse parameters whose memory (128 * r * N bytes) or work (N * r * p) passes these ceilings,
# before scrypt runs: 512 MiB and 2**22 (log2_n=19, r=8, p=1: 2.3 s of CPU there).
DEFAULT_WORK_FACTOR = _numbers.DEFAULT_WORK_FACTOR  # 18, in _numbers for the command line's --help
SCRYPT_R = 8
SCRYPT_P = 1
MAX_SCRYPT_MEMORY = 512 * 1024 * 1024
MAX_SCRYPT_WORK = 1 << 22
MAX_RECIPIENTS_FILE_SIZE = 1 << 20  # characters of a -R file; a longer one is refused, not cut
MAX_IDENTITY_FILE_SIZE = 8192  # characters of an identity file; a longer one is refused, not cut
SCRYPT_SALT_SIZE = 16

STANZA_FIELD_TYPES = frozenset(range(0x0010, 0x0020))  # reserved for stanzas (docs/FORMAT.md 4.4)
_LABEL_RECIPIENT = b"gcmstream/2 recipient"
_LABEL_TAG = b"gcmstream/2 recipient tag"
_LABEL_PASSPHRASE = b"gcmstream/2 passphrase"
_STANZA_HEAD = struct.Struct(">BBH")  # kind, flags, length of the rest
_COUNT = struct.Struct(">H")
_SCRYPT_PARAMS = struct.Struct(">BBB")  # log2_n, r, p
FLAG_TAGGED = 0x01
_ZERO_NONCE = bytes(12)  # each wrapping key wraps one file key only: its salt is fresh
# A fixed scalar for one trial exchange: X25519 with a low-order point gives an all-zero secret,
# which cryptography refuses (ValueError) only when a stream is sealed; refuse it at parse time.
# Made on first use: making a key loads cryptography's OpenSSL backend (8 ms of every command).
_X25519_PROBE_SCALAR = bytes(range(1, 33))
MIXED_KINDS_MESSAGE = (
    "incompatible recipients: can't mix post-quantum and classic recipients, or the file would be "
    "vulnerable to quantum computers (all mlkem768x25519, or all x25519)"
)


class RecipientKind(enum.IntEnum):
    """The key type of a recipient, identity and stanza (the HPKE KEM)."""

    X25519 = 1
    MLKEM768_X25519 = 2

    @property
    def text(self) -> str:
        return _KIND_TEXT[self]

    @property
    def public_size(self) -> int:
        return 32 if self is RecipientKind.X25519 else 1184 + 32

    @property
    def private_size(self) -> int:
        return 32 if self is RecipientKind.X25519 else 64 + 32

    @property
    def enc_size(self) -> int:
        return self._kem.enc_length()

    @property
    def _kem(self) -> hpke.KEM:
        return hpke.KEM.X25519 if self is RecipientKind.X25519 else hpke.KEM.MLKEM768_X25519

    @property
    def suite(self) -> hpke.Suite:
        return hpke.Suite(self._kem, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)

    @property
    def info(self) -> bytes:
        """HPKE info: binds the format, its version and the recipient's kind."""
        return _LABEL_RECIPIENT + bytes([self])


_KIND_TEXT = {RecipientKind.X25519: "x25519", RecipientKind.MLKEM768_X25519: "mlkem768x25519"}
_TEXT_KIND = {text: kind for kind, text in _KIND_TEXT.items()}


def _checksum(prefix: str, kind: RecipientKind, payload: bytes) -> bytes:
    return sha256(f"{prefix}:{kind.text}:".encode("ascii") + payload)[:CHECKSUM_SIZE]


def _encode(prefix: str, kind: RecipientKind, payload: bytes) -> str:
    body = payload + _checksum(prefix, kind, payload)
    return f"{prefix}:{kind.text}:{base64.urlsafe_b64encode(body).rstrip(b'=').decode('ascii')}"


def _decode(text: str, prefix: str, what: str) -> tuple[RecipientKind, bytes]:
    """Kind and payload of one line. Messages name the shape expected, never the line's text
    (an identity line is a secret, and a recipient line may be one pasted in the wrong place)."""
    parts = text.strip().split(":")
    if len(parts) != 3 or parts[0] != prefix:
        other = IDENTITY_PREFIX if prefix == RECIPIENT_PREFIX else RECIPIENT_PREFIX
        hint = f" (this looks like {'an identity' if other == IDENTITY_PREFIX else 'a recipient'} line)"
        hint = hint if parts[0] == other else ""
        article = "an" if what == "identity" else "a"
        raise RecipientError(f"not {article} {what} line: expected {prefix}:<kind>:<base64url>{hint}")
    kind = _TEXT_KIND.get(parts[1])
    if kind is None:
        raise RecipientError(f"unknown {what} kind (expected {' or '.join(_TEXT_KIND)})")
    encoded = parts[2]
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        raise RecipientError(f"the {what} is not valid base64url") from None
    size = (kind.public_size if prefix == RECIPIENT_PREFIX else kind.private_size) + CHECKSUM_SIZE
    if len(body) != size or _encode(prefix, kind, body[:-CHECKSUM_SIZE]) != ":".join(parts):
        # The canonical re-encoding must match too: base64 that decodes loosely is refused.
        raise RecipientError(f"the {what} line is damaged: its length or checksum is wrong (a typo?)")
    return kind, body[:-CHECKSUM_SIZE]


class Recipient:
    """Someone a stream can be sealed to: a public key. ``str()`` is its one-line text form."""

    __slots__ = ("_public", "kind", "public_bytes")

    def __init__(self, kind: RecipientKind, public_bytes: bytes) -> None:
        kind = RecipientKind(kind)
        if len(public_bytes) != kind.public_size:
            raise RecipientError(
                f"a {kind.text} recipient has {kind.public_size} bytes, got {len(public_bytes)}"
            )
        self.kind = kind
        self.public_bytes = bytes(public_bytes)
        try:
            if kind is RecipientKind.X25519:
                self._public: x25519.X25519PublicKey | hpke.MLKEM768X25519PublicKey = (
                    x25519.X25519PublicKey.from_public_bytes(self.public_bytes)
                )
            else:
                self._public = hpke.MLKEM768X25519PublicKey(
                    mlkem.MLKEM768PublicKey.from_public_bytes(self.public_bytes[:1184]),
                    x25519.X25519PublicKey.from_public_bytes(self.public_bytes[1184:]),
                )
        except ValueError:
            raise RecipientError(f"not a valid {kind.text} public key") from None
        try:
            probe = x25519.X25519PrivateKey.from_private_bytes(_X25519_PROBE_SCALAR)
            probe.exchange(x25519.X25519PublicKey.from_public_bytes(self.public_bytes[-32:]))
        except ValueError:
            raise RecipientError(f"a {kind.text} recipient whose X25519 key is a low-order point") from None

    @classmethod
    def parse(cls, text: str) -> Recipient:
        """A recipient from its one-line text form (RecipientError if malformed)."""
        return cls(*_decode(text, RECIPIENT_PREFIX, "recipient"))

    @property
    def tag(self) -> bytes:
        """What an opt-in tagged stanza carries to say it is for this recipient (8 bytes)."""
        digest = sha256(_LABEL_TAG + bytes([self.kind]) + self.public_bytes)
        return digest[:TAG_FIELD_SIZE]

    def wrap(self, file_key: bytes) -> bytes:
        """HPKE single-shot seal of ``file_key``: enc || ciphertext (docs/FORMAT.md 4.4)."""
        return self.kind.suite.encrypt(file_key, self._public, info=self.kind.info)

    def __str__(self) -> str:
        return _encode(RECIPIENT_PREFIX, self.kind, self.public_bytes)

    def __repr__(self) -> str:
        return f"<Recipient {self.kind.text} {self.tag.hex()}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recipient):
            return NotImplemented
        return (self.kind, self.public_bytes) == (other.kind, other.public_bytes)

    def __hash__(self) -> int:
        return hash((self.kind, self.public_bytes))


class Identity:
    """A private key that opens stanzas sealed to its ``recipient``. Its repr shows the kind
    and the recipient's tag only; ``to_text()`` is the one way to see the secret."""

    __slots__ = ("_private", "_secret", "kind", "recipient")

    def __init__(self, kind: RecipientKind, secret: bytes) -> None:
        kind = RecipientKind(kind)
        if len(secret) != kind.private_size:
            raise RecipientError(f"a {kind.text} identity has {kind.private_size} bytes, got {len(secret)}")
        self.kind = kind
        self._secret = bytes(secret)
        try:
            if kind is RecipientKind.X25519:
                x_key = x25519.X25519PrivateKey.from_private_bytes(self._secret)
                self._private: x25519.X25519PrivateKey | hpke.MLKEM768X25519PrivateKey = x_key
                public = x_key.public_key().public_bytes_raw()
            else:
                m_key = mlkem.MLKEM768PrivateKey.from_seed_bytes(self._secret[:64])
                x_key = x25519.X25519PrivateKey.from_private_bytes(self._secret[64:])
                self._private = hpke.MLKEM768X25519PrivateKey(m_key, x_key)
                public = m_key.public_key().public_bytes_raw() + x_key.public_key().public_bytes_raw()
        except ValueError:
            raise RecipientError(f"not a valid {kind.text} private key") from None
        self.recipient = Recipient(kind, public)

    @classmethod
    def generate(cls, kind: RecipientKind = RecipientKind.MLKEM768_X25519) -> Identity:
        """A new identity: hybrid ML-KEM-768 + X25519 unless ``kind`` says X25519 alone."""
        kind = RecipientKind(kind)
        return cls(kind, os.urandom(kind.private_size))

    @classmethod
    def parse(cls, text: str) -> Identity:
        """An identity from its one-line text form (RecipientError if malformed)."""
        return cls(*_decode(text, IDENTITY_PREFIX, "identity"))

    def to_text(self) -> str:
        """The identity's one-line text form: a secret, as a key file is."""
        return _encode(IDENTITY_PREFIX, self.kind, self._secret)

    def unwrap(self, body: bytes) -> bytes | None:
        """The file key in a stanza body sealed to this identity, or None."""
        try:
            return self.kind.suite.decrypt(body, self._private, info=self.kind.info)
        except (InvalidTag, ValueError):
            return None

    def __repr__(self) -> str:
        return f"<Identity {self.kind.text} for {self.recipient.tag.hex()}>"


_Line = TypeVar("_Line", "Recipient", "Identity")


def _numbered_lines(text: str) -> list[tuple[int, str]]:
    """The lines that are neither blank nor ``#`` comments, each with its number (from 1)."""
    stripped = ((number, line.strip()) for number, line in enumerate(text.splitlines(), 1))
    return [(number, line) for number, line in stripped if line and not line.startswith("#")]


def _parsed(parse: Callable[[str], _Line], number: int, line: str) -> _Line:
    """``parse(line)``, a bad line named by its number (as age does), never by its text: an
    identity line is a secret."""
    try:
        return parse(line)
    except RecipientError as exc:
        raise RecipientError(f"line {number}: {exc}") from None


def parse_recipients(text: str) -> list[Recipient]:
    """Recipients, one a line; blank lines and ``#`` comments are skipped (``-R`` files)."""
    return [_parsed(Recipient.parse, number, line) for number, line in _numbered_lines(text)]


def read_recipients_file(path: str | os.PathLike[str]) -> list[Recipient]:
    """The recipients in a ``-R`` file; RecipientError if it holds none or passes 1 MiB."""
    with open(path, encoding="utf-8", errors="replace") as file:
        return parse_recipients_file(file.read(MAX_RECIPIENTS_FILE_SIZE + 1))


def parse_recipients_file(text: str) -> list[Recipient]:
    """The recipients in the text of a ``-R`` file (``-R -``: stdin), as ``read_recipients_file``."""
    if len(text) > MAX_RECIPIENTS_FILE_SIZE:
        raise RecipientError(f"the recipients file is over {MAX_RECIPIENTS_FILE_SIZE} characters")
    recipients = parse_recipients(text)
    if not recipients:
        raise RecipientError("the recipients file holds no recipient line")
    return recipients


def _identity_lines(text: str) -> list[tuple[int, str]]:
    if len(text) > MAX_IDENTITY_FILE_SIZE:  # cut, a second identity line could go unseen
        raise RecipientError(f"the identity file is over {MAX_IDENTITY_FILE_SIZE} characters")
    return _numbered_lines(text)


def parse_identities(text: str) -> list[Identity]:
    """Every identity of an identity file's text, one a line, blank lines and ``#`` comments
    skipped (as age's identity files): at least one, at most 8,192 characters in all (the
    command line's ``--identity``, which tries them all)."""
    lines = _identity_lines(text)
    if not lines:
        raise RecipientError("the identity file holds no identity line")
    return [_parsed(Identity.parse, number, line) for number, line in lines]


def read_identity_file(path: str | os.PathLike[str]) -> Identity:
    """The one identity in an identity file (comments and blank lines skipped)."""
    with open(path, encoding="utf-8", errors="replace") as file:
        text = file.read(MAX_IDENTITY_FILE_SIZE + 1)
    lines = _identity_lines(text)
    if len(lines) != 1:
        raise RecipientError(f"expected one identity line, found {len(lines)}")
    return _parsed(Identity.parse, *lines[0])


def write_identity_file(path: str | os.PathLike[str], identity: Identity, *, force: bool = False) -> None:
    """Write ``identity`` with mode 0600 (as key files are), its recipient in a comment."""
    text = f"# recipient: {identity.recipient}\n{identity.to_text()}\n"
    write_secret_file(path, text.encode("ascii"), force=force)


# -- stanzas ------------------------------------------------------------------------------------


def _passphrase_bytes(passphrase: str | bytes) -> bytes:
    if isinstance(passphrase, str):
        try:
            passphrase = passphrase.encode("utf-8")
        except UnicodeError:  # its message would show a character of the passphrase and where
            raise ValueError("a passphrase str must be valid text (no lone surrogates)") from None
    if not isinstance(passphrase, bytes) or not passphrase:
        raise ValueError("a passphrase must be non-empty str or bytes")
    return passphrase


def _check_work_factor(log2_n: int, r: int, p: int) -> None:
    if not 1 <= log2_n <= 62 or r < 1 or p < 1:
        raise StanzaError(f"scrypt parameters log2(N)={log2_n}, r={r}, p={p} are invalid")
    memory = 128 * r << log2_n
    work = (r * p) << log2_n
    if memory > MAX_SCRYPT_MEMORY or work > MAX_SCRYPT_WORK:
        raise WorkFactorError(
            f"scrypt parameters log2(N)={log2_n}, r={r}, p={p} need {memory >> 20} MiB and "
            f"N*r*p={work}: over the ceiling of {MAX_SCRYPT_MEMORY >> 20} MiB and {MAX_SCRYPT_WORK}"
        )


def check_work_factor(work_factor: int) -> None:
    """A writer's scrypt work factor (log2 of N, r = 8, p = 1): ValueError unless a reader
    accepts it (1 to 19)."""
    if not isinstance(work_factor, int):
        raise TypeError(f"work_factor must be an int, not {type(work_factor).__name__}")
    try:
        _check_work_factor(work_factor, SCRYPT_R, SCRYPT_P)
    except StanzaError as exc:
        raise ValueError(f"work_factor {work_factor}: {exc}") from None


def _wrapping_key(passphrase: bytes, salt: bytes, log2_n: int, r: int, p: int) -> AESGCM:
    kdf = Scrypt(salt=_LABEL_PASSPHRASE + salt, length=32, n=1 << log2_n, r=r, p=p)
    return AESGCM(kdf.derive(passphrase))


def check_recipients(recipients: Iterable[Recipient]) -> list[Recipient]:
    """The distinct recipients a stream can be sealed to, in order. RecipientError (a
    ValueError) for more than MAX_STANZAS, more than fit the header (55 hybrid), or a mix of
    post-quantum and X25519-only recipients: as age 1.3 refuses it, since the classic stanza
    would leave the file open to whoever breaks X25519 (docs/FORMAT.md 4.3)."""
    unique = list(dict.fromkeys(recipients))
    if not unique or not all(isinstance(r, Recipient) for r in unique):
        raise ValueError("recipients must be one or more Recipient objects")
    if len(unique) > MAX_STANZAS:
        raise RecipientError(f"{len(unique)} recipients: at most {MAX_STANZAS} fit one stream")
    if len({recipient.kind for recipient in unique}) > 1:
        raise RecipientError(MIXED_KINDS_MESSAGE)
    kind = unique[0].kind
    size = _COUNT.size + 4 + len(unique) * (_STANZA_HEAD.size + kind.enc_size + FILE_KEY_SIZE + TAG_SIZE)
    if size > MAX_STANZA_FIELDS_SIZE:  # hybrid only: 56 take 65,638 bytes (tagged, 55 still fit)
        raise RecipientError(
            f"{len(unique)} {kind.text} recipients take {size} bytes of header, over the "
            f"{MAX_STANZA_FIELDS_SIZE} it can hold (at most 55 hybrid recipients)"
        )
    return unique


def seal_stanzas(
    file_key: bytes,
    *,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    tag_recipients: bool = False,
    work_factor: int = DEFAULT_WORK_FACTOR,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> list[tuple[int, bytes]]:
    """The header fields that carry ``file_key`` to ``recipients`` or to a ``passphrase``.
    ``random_bytes`` replaces ``os.urandom`` for the passphrase stanza's scrypt salt, for
    known-answer test vectors only."""
    if (recipients is None) == (passphrase is None):
        raise ValueError("give recipients or a passphrase, not both")
    if passphrase is not None:
        check_work_factor(work_factor)
        salt = random_bytes(SCRYPT_SALT_SIZE)
        params = _SCRYPT_PARAMS.pack(work_factor, SCRYPT_R, SCRYPT_P)
        wrap = _wrapping_key(_passphrase_bytes(passphrase), salt, work_factor, SCRYPT_R, SCRYPT_P)
        wrapped = wrap.encrypt(_ZERO_NONCE, file_key, _LABEL_PASSPHRASE + params)
        return [(FieldType.PASSPHRASE_STANZA, params + salt + wrapped)]
    unique = check_recipients(recipients or ())
    out = bytearray(_COUNT.pack(len(unique)))
    for recipient in unique:
        tag = recipient.tag if tag_recipients else b""
        body = tag + recipient.wrap(file_key)
        out += _STANZA_HEAD.pack(recipient.kind, FLAG_TAGGED if tag else 0, len(body)) + body
    if len(out) + 4 > MAX_STANZA_FIELDS_SIZE:  # 4: the field's own type and length
        raise RecipientError(
            f"{len(unique)} recipients take {len(out) + 4} bytes of header, over the "
            f"{MAX_STANZA_FIELDS_SIZE} it can hold (at most 55 hybrid recipients)"
        )
    return [(FieldType.RECIPIENT_STANZAS, bytes(out))]


def _parse_stanzas(value: bytes, key_size: int) -> list[tuple[int, bytes, bytes]]:
    """(kind, tag or b"", HPKE body) of each stanza; every rule checked before any is opened."""
    if len(value) < _COUNT.size:
        raise StanzaError("the recipient stanzas field is too short for its count")
    (count,) = _COUNT.unpack_from(value)
    if not 1 <= count <= MAX_STANZAS:
        raise StanzaError(f"{count} recipient stanzas: a reader accepts 1 to {MAX_STANZAS}")
    stanzas = []
    pos = _COUNT.size
    for _ in range(count):
        pos, stanza = _parse_stanza(value, pos, key_size)
        if stanza is not None:
            stanzas.append(stanza)
    if pos != len(value):
        raise StanzaError(f"{len(value) - pos} bytes follow the last recipient stanza")
    return stanzas


def _parse_stanza(value: bytes, pos: int, key_size: int) -> tuple[int, tuple[int, bytes, bytes] | None]:
    """(where the next stanza starts, this one's (kind, tag or b"", body)) for the stanza at
    ``pos``; None for a kind this version does not know (a later version may add kinds)."""
    if len(value) - pos < _STANZA_HEAD.size:
        raise StanzaError("the recipient stanzas end inside a stanza header")
    kind, flags, length = _STANZA_HEAD.unpack_from(value, pos)
    pos += _STANZA_HEAD.size
    if length > len(value) - pos:
        raise StanzaError("a recipient stanza runs past the end of its field")
    if flags & ~FLAG_TAGGED:
        raise StanzaError(f"a recipient stanza has unknown flags 0x{flags:02x}")
    tag_size = TAG_FIELD_SIZE if flags & FLAG_TAGGED else 0
    end = pos + length
    if kind not in RecipientKind.__members__.values():  # skipped
        if length < tag_size:
            raise StanzaError("a recipient stanza is shorter than its tag")
        return end, None
    expected = tag_size + RecipientKind(kind).enc_size + key_size + TAG_SIZE
    if length != expected:
        raise StanzaError(f"a {RecipientKind(kind).text} stanza has {length} bytes, expected {expected}")
    return end, (kind, value[pos : pos + tag_size], value[pos + tag_size : end])


def _not_identities(given: object, found: Sequence[object]) -> str:
    """What a reader's ``identities`` held instead of Identity objects, and what to do: a path
    (or a list of paths) is read with read_identity_file, a text with Identity.parse. The text
    itself is never repeated (an identity line is a secret)."""
    if isinstance(given, (str, bytes, os.PathLike)) or any(
        isinstance(item, (str, bytes, os.PathLike)) for item in found
    ):
        return (
            "identities must be Identity objects, not paths or text: read an identity file "
            "with gcmstream.read_identity_file(path) (or parse a line with Identity.parse)"
        )
    return "identities must be one or more Identity objects"


class Unlocker:
    """What a reader holds instead of a key: identities, or a passphrase. ``unlock`` finds the
    file key in a header's stanza fields (before its commitment is checked, which the caller
    does next with the key found)."""

    __slots__ = ("_identities", "_passphrase")

    def __init__(
        self, identities: Iterable[Identity] | None = None, passphrase: str | bytes | None = None
    ) -> None:
        if (identities is None) == (passphrase is None):
            raise ValueError("give identities or a passphrase, not both")
        self._passphrase = _passphrase_bytes(passphrase) if passphrase is not None else None
        self._identities: Sequence[Identity] = list(identities or ())
        if passphrase is None:
            if not self._identities or not all(isinstance(i, Identity) for i in self._identities):
                raise ValueError(_not_identities(identities, self._identities))
            if len(self._identities) > MAX_IDENTITIES:
                raise ValueError(f"{len(self._identities)} identities: at most {MAX_IDENTITIES} are tried")

    def __repr__(self) -> str:
        what = "a passphrase" if self._passphrase is not None else f"{len(self._identities)} identities"
        return f"<Unlocker {what}>"

    @property
    def commitment_failure(self) -> str:
        """Why a header whose stanza this unlocker opened (so the identity or passphrase is the
        right one, and the key ID names the file key) fails its commitment (H12): the context,
        which no stanza binds, or a header byte. No reader can tell which."""
        opened = "the passphrase opened" if self._passphrase is not None else "an identity given opened"
        return (
            f"{opened} its stanza, but the stream header does not match the file key and the "
            "context given: a wrong context, or the header was altered"
        )

    def unlock(self, suite: Suite, fields: Iterable[tuple[int, bytes]]) -> bytes:
        """The file key, or StanzaError, WorkFactorError or NoIdentityMatchedError: anything
        scrypt or HPKE raises becomes a StanzaError, which the Opener keeps as its fatal error."""
        stanza_fields = {kind: value for kind, value in fields if kind in STANZA_FIELD_TYPES}
        recipients = stanza_fields.pop(FieldType.RECIPIENT_STANZAS, None)
        passphrase = stanza_fields.pop(FieldType.PASSPHRASE_STANZA, None)
        if stanza_fields:
            unknown = min(stanza_fields)
            raise StanzaError(f"header has stanza field 0x{unknown:04x}, which this reader does not know")
        if (passphrase is not None or recipients is not None) and suite is not Suite.AES_256_GCM:
            raise StanzaError(
                f"stanzas wrap 32-byte file keys (AES_256_GCM), but the header says {suite.name}"
            )
        if passphrase is not None and recipients is not None:
            raise StanzaError("a passphrase stanza must be the only stanza, but recipient stanzas are there")
        if passphrase is not None:
            return self._unlock_passphrase(suite, passphrase)
        if recipients is not None:
            return self._unlock_recipients(suite, recipients)
        raise NoIdentityMatchedError(
            "the stream has no recipient or passphrase stanza: a key sealed it (give -k KEYFILE; "
            "in Python, the key), or the header was altered"
        )

    def _unlock_passphrase(self, suite: Suite, value: bytes) -> bytes:
        expected = _SCRYPT_PARAMS.size + SCRYPT_SALT_SIZE + suite.key_size + TAG_SIZE
        if len(value) != expected:
            raise StanzaError(f"the passphrase stanza has {len(value)} bytes, expected {expected}")
        log2_n, r, p = _SCRYPT_PARAMS.unpack_from(value)
        _check_work_factor(log2_n, r, p)  # before scrypt runs, whoever holds what
        if (r, p) != (SCRYPT_R, SCRYPT_P):  # as age: OpenSSL refuses some others (N >= 2**(16r))
            raise StanzaError(f"scrypt parameters r={r}, p={p}: the format fixes r={SCRYPT_R}, p={SCRYPT_P}")
        if self._passphrase is None:
            raise NoIdentityMatchedError("the stream was sealed with a passphrase, not to recipients")
        salt = value[_SCRYPT_PARAMS.size : _SCRYPT_PARAMS.size + SCRYPT_SALT_SIZE]
        try:
            wrap = _wrapping_key(self._passphrase, salt, log2_n, r, p)
        except Exception as exc:  # whatever scrypt refuses stays in the error tree
            raise StanzaError(f"scrypt refused the stanza's parameters ({type(exc).__name__})") from None
        wrapped = value[_SCRYPT_PARAMS.size + SCRYPT_SALT_SIZE :]
        try:
            return wrap.decrypt(_ZERO_NONCE, wrapped, _LABEL_PASSPHRASE + value[: _SCRYPT_PARAMS.size])
        except InvalidTag:
            raise NoIdentityMatchedError("wrong passphrase (or an altered passphrase stanza)") from None

    def _unlock_recipients(self, suite: Suite, value: bytes) -> bytes:
        stanzas = _parse_stanzas(value, suite.key_size)
        if self._passphrase is not None:
            raise NoIdentityMatchedError("the stream was sealed to recipients, not with a passphrase")
        for kind, tag, body in stanzas:
            for identity in self._identities:
                if identity.kind != kind or (tag and tag != identity.recipient.tag):
                    continue
                try:
                    file_key = identity.unwrap(body)
                except Exception as exc:  # unwrap maps what a bad body gives to None
                    name = type(exc).__name__
                    raise StanzaError(f"HPKE refused a {identity.kind.text} stanza ({name})") from None
                if file_key is not None:
                    return file_key
        # a stanza altered, or its kind or tag, fails as another recipient's does: as in age, a
        # reader cannot tell the two apart (FORMAT.md 4.4, S7), so it names both
        (count,) = _COUNT.unpack_from(value)  # every stanza the field holds, read or skipped
        skipped = (
            f" ({count - len(stanzas)} of a kind this version does not read)" if count > len(stanzas) else ""
        )
        given, stanzas_said = len(self._identities), f"the stream's {count} recipient stanza"
        if count != 1:
            stanzas_said = f"any of {stanzas_said}s" if given != 1 else f"none of {stanzas_said}s"
        if given == 1:
            unopened = f"the 1 identity given {'does not open' if count == 1 else 'opens'} {stanzas_said}"
        else:
            unopened = f"none of the {given} identities given opens {stanzas_said}"
        raise NoIdentityMatchedError(f"{unopened}{skipped}: a wrong identity, or the header was altered")
