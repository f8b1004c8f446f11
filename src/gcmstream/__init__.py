"""gcmstream: nonce-sequenced AES-GCM records over byte streams, async-native, opened in place.

The sans-IO core is :class:`Sealer`, :class:`Opener` and :class:`Channel`; every exception is
in :mod:`gcmstream.errors`; the wire format is docs/FORMAT.md.

This top level holds what an application calls: the core, every error, both adapters' entry
points (asyncio's ``open_connection``/``start_server`` beside anyio's ``connect_tcp``/
``create_tcp_listener``, their unix-socket twins, the ``Configuration`` they take), pipelines and
key files. Building blocks (``gcmstream.format``, ``gcmstream.ring``, ``gcmstream.channel``,
...) are reached through their modules (tests/test_public_api.py keeps the two lists).

Nothing is imported until it is used (PEP 562): ``import gcmstream`` loads no adapter, no
cryptography and no event loop library (``gcmstream --version`` starts fast); a name loads
its module when it is first used.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    __version__: str  # read from the installed metadata on first use (__getattr__)
    from .admission import AdmissionPolicy
    from .aio import (
        SecureStreamReader,
        SecureStreamWriter,
        decrypting_reader,
        encrypting_writer,
        open_connection,
        open_unix_connection,
        start_server,
        start_unix_server,
        wrap_streams,
    )
    from .anyio_stream import (
        GcmStreamAttribute,
        SecureListener,
        SecureStream,
        connect_tcp,
        connect_unix,
        create_tcp_listener,
        create_unix_listener,
    )
    from .channel import self_connections_allowed
    from .codec import Channel, Opener, Sealer
    from .config import Configuration
    from .errors import (
        ArmoredInputError,
        ArmorError,
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
        SameFileError,
        SelfConnectionError,
        StanzaError,
        StoppedError,
        StreamBrokenError,
        StreamClosedError,
        TrailingDataError,
        TruncatedArmorError,
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

del TYPE_CHECKING  # not an API name

# each public name and the module that defines it
_HOMES = {
    "AdmissionPolicy": "admission",
    "SecureStreamReader": "aio",
    "SecureStreamWriter": "aio",
    "decrypting_reader": "aio",
    "encrypting_writer": "aio",
    "open_connection": "aio",
    "open_unix_connection": "aio",
    "start_server": "aio",
    "start_unix_server": "aio",
    "wrap_streams": "aio",
    "GcmStreamAttribute": "anyio_stream",
    "SecureListener": "anyio_stream",
    "SecureStream": "anyio_stream",
    "connect_tcp": "anyio_stream",
    "connect_unix": "anyio_stream",
    "create_tcp_listener": "anyio_stream",
    "create_unix_listener": "anyio_stream",
    "self_connections_allowed": "channel",
    "Channel": "codec",
    "Opener": "codec",
    "Sealer": "codec",
    "Configuration": "config",
    "ArmorError": "errors",
    "ArmoredInputError": "errors",
    "AuthenticationError": "errors",
    "BufferFullError": "errors",
    "ConcurrencyError": "errors",
    "DowngradeError": "errors",
    "GcmStreamError": "errors",
    "HandshakeError": "errors",
    "KeyCommitmentError": "errors",
    "KeyFileError": "errors",
    "LimitReachedError": "errors",
    "MalformedHeaderError": "errors",
    "MalformedRecordError": "errors",
    "NoIdentityMatchedError": "errors",
    "NotReadyError": "errors",
    "OutOfRangeError": "errors",
    "PeerIdentityError": "errors",
    "ProtocolError": "errors",
    "RecipientError": "errors",
    "RecordTooLargeError": "errors",
    "RoleMismatchError": "errors",
    "SameFileError": "errors",
    "SelfConnectionError": "errors",
    "StanzaError": "errors",
    "StoppedError": "errors",
    "StreamBrokenError": "errors",
    "StreamClosedError": "errors",
    "TrailingDataError": "errors",
    "TruncatedArmorError": "errors",
    "TruncatedStreamError": "errors",
    "UnknownFieldError": "errors",
    "UnknownKeyError": "errors",
    "UnsupportedBufferError": "errors",
    "UnsupportedEndpointError": "errors",
    "UnsupportedFormatError": "errors",
    "UsageError": "errors",
    "WorkFactorError": "errors",
    "DEFAULT_MAX_RECORD_SIZE": "format",
    "DEFAULT_RECORD_SIZE": "format",
    "HARD_MAX_RECORD_SIZE": "format",
    "KeyExchange": "format",
    "KeyLimits": "format",
    "KeyRing": "format",
    "Role": "format",
    "Suite": "format",
    "generate_key": "format",
    "key_id": "format",
    "read_key_file": "keyfile",
    "write_key_file": "keyfile",
    "decrypt_file": "pipeline",
    "decrypt_file_async": "pipeline",
    "decrypt_iter": "pipeline",
    "decrypt_stream": "pipeline",
    "encrypt_file": "pipeline",
    "encrypt_file_async": "pipeline",
    "encrypt_iter": "pipeline",
    "encrypt_stream": "pipeline",
    "Identity": "recipients",
    "Recipient": "recipients",
    "RecipientKind": "recipients",
    "read_identity_file": "recipients",
    "read_recipients_file": "recipients",
    "write_identity_file": "recipients",
    "DecryptedFile": "seekable",
    "open_file": "seekable",
    "open_file_async": "seekable",
}


def __getattr__(name: str) -> object:
    if name == "__version__":  # pyproject.toml is the one place the version is written
        value = _installed_version()
    elif name in _HOMES:
        from importlib import import_module  # here: a top-level import would be a public name

        value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # found once: later uses are plain attribute reads
    return value


def _installed_version() -> str:
    """The version in gcmstream's installed metadata: the ``Version:`` line of the METADATA of
    the first ``gcmstream-*.dist-info`` on ``sys.path``, where importlib.metadata finds it, read
    without importing importlib.metadata (email, zipfile, pathlib, csv: 40 ms of ``gcmstream
    --version``, benchmarks/README.md); importlib.metadata itself for any other layout."""
    import os  # here: a top-level import would be a public name
    import sys

    for entry in sys.path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.startswith("gcmstream-"))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info"):
                continue
            try:
                with open(os.path.join(entry, name, "METADATA"), encoding="utf-8") as metadata:
                    for line in metadata:
                        if line.startswith("Version:"):
                            return line.removeprefix("Version:").strip()
                        if not line.strip():  # the headers end: no version there
                            break
            except OSError:
                pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gcmstream")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = (
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "HARD_MAX_RECORD_SIZE",
    "AdmissionPolicy",
    "ArmorError",
    "ArmoredInputError",
    "AuthenticationError",
    "BufferFullError",
    "Channel",
    "ConcurrencyError",
    "Configuration",
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
    "SameFileError",
    "Sealer",
    "SecureListener",
    "SecureStream",
    "SecureStreamReader",
    "SecureStreamWriter",
    "SelfConnectionError",
    "StanzaError",
    "StoppedError",
    "StreamBrokenError",
    "StreamClosedError",
    "Suite",
    "TrailingDataError",
    "TruncatedArmorError",
    "TruncatedStreamError",
    "UnknownFieldError",
    "UnknownKeyError",
    "UnsupportedBufferError",
    "UnsupportedEndpointError",
    "UnsupportedFormatError",
    "UsageError",
    "WorkFactorError",
    "connect_tcp",
    "connect_unix",
    "create_tcp_listener",
    "create_unix_listener",
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
    "open_unix_connection",
    "read_identity_file",
    "read_key_file",
    "read_recipients_file",
    "self_connections_allowed",
    "start_server",
    "start_unix_server",
    "wrap_streams",
    "write_identity_file",
    "write_key_file",
)
