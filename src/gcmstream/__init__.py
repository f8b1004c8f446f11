"""gcmstream: nonce-sequenced AES-GCM records over byte streams, async-native, opened in place.

The sans-IO core is :class:`Sealer`, :class:`Opener` and :class:`Channel`; every exception is
in :mod:`gcmstream.errors`; the wire format is docs/FORMAT.md.

This top level holds what an application calls: the core, every error, both adapters' entry
points (asyncio's ``open_connection``/``start_server`` beside anyio's ``connect_tcp``/
``create_tcp_listener``), pipelines and key files. Building blocks (``gcmstream.format``,
``gcmstream.ring``, ``gcmstream.channel``, ...) are reached through their modules
(tests/test_public_api.py keeps the two lists).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .admission import AdmissionPolicy
from .aio import (
    SecureStreamReader,
    SecureStreamWriter,
    decrypting_reader,
    encrypting_writer,
    open_connection,
    start_server,
    wrap_streams,
)
from .anyio_stream import GcmStreamAttribute, SecureListener, SecureStream, connect_tcp, create_tcp_listener
from .channel import self_connections_allowed
from .codec import Channel, Opener, Sealer
from .errors import (
    AuthenticationError,
    BufferFullError,
    ConcurrencyError,
    DowngradeError,
    GcmStreamError,
    HandshakeError,
    KeyCommitmentError,
    KeyFileError,
    LimitReachedError,
    MalformedHeaderError,
    MalformedRecordError,
    NoIdentityMatchedError,
    NotReadyError,
    OutOfRangeError,
    PeerIdentityError,
    ProtocolError,
    RecipientError,
    RecordTooLargeError,
    RoleMismatchError,
    SelfConnectionError,
    StanzaError,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
    UnknownFieldError,
    UnknownKeyError,
    UnsupportedBufferError,
    UnsupportedEndpointError,
    UnsupportedFormatError,
    UsageError,
    WorkFactorError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    HARD_MAX_RECORD_SIZE,
    KeyExchange,
    KeyLimits,
    KeyRing,
    Role,
    Suite,
    generate_key,
    key_id,
)
from .keyfile import read_key_file, write_key_file
from .pipeline import (
    decrypt_file,
    decrypt_file_async,
    decrypt_iter,
    decrypt_stream,
    encrypt_file,
    encrypt_file_async,
    encrypt_iter,
    encrypt_stream,
)
from .recipients import (
    Identity,
    Recipient,
    RecipientKind,
    read_identity_file,
    read_recipients_file,
    write_identity_file,
)
from .seekable import DecryptedFile, open_file, open_file_async

try:  # pyproject.toml is the one place the version is written
    __version__ = version("gcmstream")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = (
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "HARD_MAX_RECORD_SIZE",
    "AdmissionPolicy",
    "AuthenticationError",
    "BufferFullError",
    "Channel",
    "ConcurrencyError",
    "DecryptedFile",
    "DowngradeError",
    "GcmStreamAttribute",
    "GcmStreamError",
    "HandshakeError",
    "Identity",
    "KeyCommitmentError",
    "KeyExchange",
    "KeyFileError",
    "KeyLimits",
    "KeyRing",
    "LimitReachedError",
    "MalformedHeaderError",
    "MalformedRecordError",
    "NoIdentityMatchedError",
    "NotReadyError",
    "Opener",
    "OutOfRangeError",
    "PeerIdentityError",
    "ProtocolError",
    "Recipient",
    "RecipientError",
    "RecipientKind",
    "RecordTooLargeError",
    "Role",
    "RoleMismatchError",
    "Sealer",
    "SecureListener",
    "SecureStream",
    "SecureStreamReader",
    "SecureStreamWriter",
    "SelfConnectionError",
    "StanzaError",
    "StreamBrokenError",
    "StreamClosedError",
    "Suite",
    "TrailingDataError",
    "TruncatedStreamError",
    "UnknownFieldError",
    "UnknownKeyError",
    "UnsupportedBufferError",
    "UnsupportedEndpointError",
    "UnsupportedFormatError",
    "UsageError",
    "WorkFactorError",
    "connect_tcp",
    "create_tcp_listener",
    "decrypt_file",
    "decrypt_file_async",
    "decrypt_iter",
    "decrypt_stream",
    "decrypting_reader",
    "encrypt_file",
    "encrypt_file_async",
    "encrypt_iter",
    "encrypt_stream",
    "encrypting_writer",
    "generate_key",
    "key_id",
    "open_connection",
    "open_file",
    "open_file_async",
    "read_identity_file",
    "read_key_file",
    "read_recipients_file",
    "self_connections_allowed",
    "start_server",
    "wrap_streams",
    "write_identity_file",
    "write_key_file",
)
