"""gcmstream: nonce-sequenced AES-GCM records over byte streams, async-native, opened in place.

The sans-IO core is :class:`Sealer`, :class:`Opener` and :class:`Channel`; every exception is
in :mod:`gcmstream.errors`; the wire format is docs/FORMAT.md.
"""

from __future__ import annotations

from .aio import (
    SecureStreamReader,
    SecureStreamWriter,
    decrypting_reader,
    encrypting_writer,
    open_connection,
    start_server,
    wrap_streams,
)
from .codec import Channel, Opener, Sealer
from .errors import (
    AuthenticationError,
    BufferFullError,
    GcmStreamError,
    KeyCommitmentError,
    LimitReachedError,
    MalformedRecordError,
    NotReadyError,
    ProtocolError,
    RecordTooLargeError,
    RoleMismatchError,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
    UnsupportedFormatError,
    UsageError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    HARD_MAX_RECORD_SIZE,
    KeyLimits,
    Role,
    Suite,
    generate_key,
)

__version__ = "0.1.0"

__all__ = (
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "HARD_MAX_RECORD_SIZE",
    "AuthenticationError",
    "BufferFullError",
    "Channel",
    "GcmStreamError",
    "KeyCommitmentError",
    "KeyLimits",
    "LimitReachedError",
    "MalformedRecordError",
    "NotReadyError",
    "Opener",
    "ProtocolError",
    "RecordTooLargeError",
    "Role",
    "RoleMismatchError",
    "Sealer",
    "SecureStreamReader",
    "SecureStreamWriter",
    "StreamBrokenError",
    "StreamClosedError",
    "Suite",
    "TrailingDataError",
    "TruncatedStreamError",
    "UnsupportedFormatError",
    "UsageError",
    "decrypting_reader",
    "encrypting_writer",
    "generate_key",
    "open_connection",
    "start_server",
    "wrap_streams",
)
