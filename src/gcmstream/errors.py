"""Every exception gcmstream raises on purpose, in one tree.

::

    GcmStreamError                       root: catch this to catch everything below
    ├── ProtocolError                    the peer's bytes are bad; FATAL for the receiving side
    │   ├── UnsupportedFormatError       (also ValueError) not a gcmstream header, or a magic,
    │   │                                version, suite, role or record size this version refuses
    │   │   ├── MalformedHeaderError     magic and version right, the rest damaged (H3..H7, H13)
    │   │   ├── UnknownFieldError        a critical header field this version does not know
    │   │   ├── ArmoredInputError        armored text ('encrypt -a') given to a reader of the
    │   │   │                            binary form only: random access, a channel, an Opener
    │   │   └── StanzaError              recipient or passphrase stanzas break a rule: over the
    │   │       │                        count limit, malformed, or a passphrase stanza beside
    │   │       │                        another stanza (gcmstream.recipients)
    │   │       └── WorkFactorError      scrypt parameters above the reader's ceiling
    │   ├── KeyCommitmentError           header commitment mismatch: wrong key, wrong context,
    │   │   │                            or an altered header; raised before any record is opened
    │   │   └── UnknownKeyError          the header's key ID names no key this side holds
    │   ├── NoIdentityMatchedError       no identity given opens any recipient stanza, the
    │   │                                passphrase is wrong, or the stream has no stanza of
    │   │                                the kind given (sealed with a key, or a passphrase)
    │   ├── HandshakeError               a channel handshake failed: key confirmation (Finished)
    │   │   │                            did not verify, or a key share is malformed
    │   │   ├── DowngradeError           the peer offered a weaker key exchange than required
    │   │   ├── SelfConnectionError      the initiator's header came from this very process
    │   │   └── PeerIdentityError        the peer's identity is not the one expected
    │   ├── RoleMismatchError            channel peer has the wrong role: a stream reflected back
    │   │                                to its sender, or one-way data fed to a channel
    │   ├── AuthenticationError          a record failed AES-GCM authentication (tampered,
    │   │                                reordered, dropped, spliced or replayed); its number in
    │   │                                ``record_number``, cryptography's InvalidTag chained
    │   ├── RecordTooLargeError          a length field over the announced or configured limit,
    │   │                                rejected before the record is buffered
    │   ├── MalformedRecordError         an authenticated record breaks a format rule (unknown
    │   │                                flag, FINAL with KEY_UPDATE), a length below the tag
    │   │                                size, or the peer passed the per-key usage limit;
    │   │                                ``record_number`` as AuthenticationError's
    │   ├── TruncatedStreamError         (also EOFError) input ended before an authenticated
    │   │   │                            FINAL record: the sender closed without ending the
    │   │   │                            stream (close/aclose are not an end), or was cut off
    │   │   └── AnyioTruncatedStreamError  (in gcmstream.anyio_stream; also anyio's
    │   │                                BrokenResourceError): also a connection that ended
    │   │                                during the handshake, e.g. a server that refused it
    │   ├── TrailingDataError            bytes after the FINAL record (``record_number``: FINAL's)
    │   └── ArmorError                   (also ValueError) armored text breaks a rule of
    │       │                            gcmstream.armor: a line over 64 columns or short before
    │       │                            the last, non-canonical base64, padding before the end,
    │       │                            data after the end line (``line``: where)
    │       └── TruncatedArmorError      (also TruncatedStreamError) the text ended before its
    │                                    end line: cut short
    ├── UsageError                       the caller broke a rule; nothing was changed and the
    │   │                                object is still usable
    │   ├── StreamClosedError            (also RuntimeError) writing after FINAL was sealed, or
    │   │   │                            using a closed object
    │   │   └── AnyioStreamClosedError   (in gcmstream.anyio_stream; also anyio's
    │   │                                ClosedResourceError)
    │   ├── NotReadyError                (also RuntimeError) sealing on a channel before the
    │   │                                peer's header arrived
    │   ├── KeyFileError                 (also ValueError) a key file or
    │   │                                key line is malformed: prefix, version, suite, length
    │   ├── RecipientError               (also ValueError) a recipient or identity line is
    │   │                                malformed: prefix, version, kind, length, checksum,
    │   │                                low-order key; or recipients a writer refuses: over
    │   │                                the limits, or post-quantum mixed with X25519-only
    │   ├── BufferFullError              receive_data() called again while earlier input is
    │   │                                still waiting for ring space (see Opener.wants_data)
    │   ├── ConcurrencyError             (also RuntimeError) a Sealer or Opener entered by a
    │   │                                second thread while a call was under way; refused
    │   │                                before any state changed (no record, no nonce used);
    │   │                                or a second coroutine reading an asyncio reader
    │   ├── OutOfRangeError              (also ValueError) buffer_updated()/consume() of more
    │   │                                bytes than were offered or are available
    │   ├── UnsupportedBufferError       (also TypeError) a buffer the call cannot use: read-only
    │   │                                where plaintext must go (readinto), or not contiguous
    │   ├── SameFileError                (also ValueError) a file function's output is the very
    │   │                                file it reads (a regular file, a FIFO or a block
    │   │                                device): refused before anything is read or written,
    │   │                                or before the output replaces it (checked again)
    │   └── UnsupportedEndpointError     (also TypeError) a pipeline source or sink of a type it
    │                                    cannot use, such as a plain open() file
    ├── LimitReachedError                sealing would pass the hard per-key limit with automatic
    │                                    key update off; nothing was sealed; call update_key()
    ├── StoppedError                     the file engine saw the caller's stop request (``stop=``
    │                                    of gcmstream.files): no output file was made, and the
    │                                    Sealer or Opener it used is broken
    └── StreamBrokenError                any call on an object that already failed fatally; the
        │                                original error is ``__cause__`` and ``.original``
        └── AnyioStreamBrokenError       (in gcmstream.anyio_stream; also anyio's
                                         BrokenResourceError)

Rules that hold everywhere:

* After a ProtocolError the object that raised it is failed: every later read-side call
  (``read``, ``readinto``, ``read_view``, ``peek``, an adapter's ``receive``/``read*``)
  raises StreamBrokenError, and no plaintext from the failing record (or after it) is ever
  returned. Plaintext returned before the error is an authenticated prefix of the stream.
  Feeding calls (``receive_data``, ``get_buffer``/``buffer_updated``, ``receive_eof``) never
  raise a ProtocolError: errors found while feeding wait for the next read, and a failed
  opener discards further input, so an I/O loop can always run to its end.
* ``read(0)`` and ``readinto`` of an empty buffer return ``b""``/``0`` as ``io`` does: test
  for the end of a stream with a non-zero size (or ``at_eof``), not with those.
* Messages name what was found and what was expected. They never contain keys, secrets,
  nonces or plaintext.
* Record numbers count from 0, in messages ("record 0 failed authentication" is the first
  record after the header) and in ``record_number`` alike; so do Tink's segment numbers
  (segment 0 is the first). Lines of armored text (``ArmorError.line``) count from 1, as an
  editor counts them.
* The anyio adapter speaks anyio's vocabulary without leaving this tree: its truncation,
  closed and broken errors are the ``Anyio*`` subclasses above, so ``except
  TruncatedStreamError`` and generic anyio code's ``except anyio.BrokenResourceError`` both
  catch a peer that closed without ending its stream, or that hung up during the handshake
  (a refusal: where anyio's TLSStream.wrap raises BrokenResourceError too). The asyncio
  adapter raises asyncio's own IncompleteReadError and LimitOverrunError where
  asyncio.StreamReader does.
* Arguments that are wrong before any stream exists (a key of the wrong type or length, a
  record size, limits, an identity, a ring size, a context over its bound) raise ValueError or
  TypeError, as Python's own constructors do; the asyncio adapter's readers raise the
  ValueError that asyncio.StreamReader raises for the same call. A RuntimeError whose message
  starts "gcmstream bug" is an invariant that failed. Assigning to a frozen value (a
  ``Configuration``) raises AttributeError, as a frozen dataclass does. tests/test_public_api.py holds every
  ``raise`` in the source to these rules.
* Any other exception escaping gcmstream is a bug, except OSError and the async frameworks'
  own resource errors raised by the transport underneath an adapter.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (10 ms of every command)
if TYPE_CHECKING:
    from typing import Any

__all__ = (
    "ArmorError",
    "ArmoredInputError",
    "AuthenticationError",
    "BufferFullError",
    "ConcurrencyError",
    "DowngradeError",
    "GcmStreamError",
    "HandshakeError",
    "KeyCommitmentError",
    "KeyFileError",
    "LimitReachedError",
    "MalformedHeaderError",
    "MalformedRecordError",
    "NoIdentityMatchedError",
    "NotReadyError",
    "OutOfRangeError",
    "PeerIdentityError",
    "ProtocolError",
    "RecipientError",
    "RecordTooLargeError",
    "RoleMismatchError",
    "SameFileError",
    "SelfConnectionError",
    "StanzaError",
    "StoppedError",
    "StreamBrokenError",
    "StreamClosedError",
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
)


class GcmStreamError(Exception):
    """Root of every exception gcmstream raises on purpose."""


class ProtocolError(GcmStreamError):
    """The peer's bytes are invalid. Fatal: the receiving object is failed for good.
    ``rule`` names the check of docs/FORMAT.md 8.1 that failed ("H7"), where a header check
    raised it (``gcmstream.format.header_fault``), "S8" for 4.4's key ID check, else ""."""

    rule: str = ""


class UnsupportedFormatError(ProtocolError, ValueError):
    """The stream header is not one this version reads (magic, version, suite, role, size)."""


class ArmoredInputError(UnsupportedFormatError):
    """The input starts as armored text does (``-----``, gcmstream.armor) where only the binary
    form is read: an Opener, ``open_file`` (random access needs the binary file to seek in),
    a channel. ``gcmstream.armor.dearmor`` (or the file engine, which reads both) decodes it.
    Check H1, as any other wrong magic."""


class MalformedHeaderError(UnsupportedFormatError):
    """The header starts with gcmstream's magic and version but its fixed part or its fields
    are damaged (checks H3..H7, H13): corrupt data, not a newer format."""


class UnknownFieldError(UnsupportedFormatError):
    """The header carries a critical field type (below 0x8000) this version does not know."""


class StanzaError(UnsupportedFormatError):
    """The header's recipient or passphrase stanzas break a rule of docs/FORMAT.md 4.4: more
    stanzas than the limit, a malformed stanza, or a passphrase stanza beside another stanza.
    Raised before any stanza is opened."""


class WorkFactorError(StanzaError):
    """A passphrase stanza asks for scrypt parameters above the reader's ceiling (so a hostile
    file cannot cost minutes of CPU or GiB of memory). Raised before scrypt runs."""


class NoIdentityMatchedError(ProtocolError):
    """None of the identities given opens a recipient stanza of this stream, or the passphrase
    is wrong, or the stream has no stanza of that kind (it was sealed with a key, or with a
    passphrase where identities were given). Raised before any record is opened."""


class KeyCommitmentError(ProtocolError):
    """The header's key commitment does not match: wrong key, wrong context or altered header."""


class UnknownKeyError(KeyCommitmentError):
    """The header's key ID names no key held here (a KeyRing without it, or another key)."""


class HandshakeError(ProtocolError):
    """A channel handshake failed: key confirmation did not verify, or a share is malformed."""


class DowngradeError(HandshakeError):
    """The peer used a weaker key exchange (X25519 alone) where the hybrid is required."""


class SelfConnectionError(HandshakeError):
    """This process's own initiator header came back to it (the Selfie attack), or the peer
    claims this end's own identity."""


class PeerIdentityError(HandshakeError):
    """The peer's identity (``local_id`` on its side) is missing or not the ``peer_id`` expected."""


class RoleMismatchError(ProtocolError):
    """A channel peer announced the wrong role (a reflected stream, or a one-way stream)."""


class AuthenticationError(ProtocolError):
    """A record failed authentication. ``record_number`` counts records from 0 in the stream."""

    def __init__(self, record_number: int) -> None:
        super().__init__(
            f"record {record_number} failed authentication "
            "(tampered, reordered, dropped, spliced or replayed data)"
        )
        self.record_number = record_number

    def __reduce__(self) -> tuple[Any, ...]:
        # copy.copy and pickle rebuild it from its constructor's argument, not its message
        return type(self), (self.record_number,), self.__dict__


class RecordTooLargeError(ProtocolError):
    """A length field exceeds the limit; rejected before the record is buffered."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} of {size} bytes exceeds the limit of {limit} bytes")
        self.what = what
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.what, self.size, self.limit), self.__dict__


class MalformedRecordError(ProtocolError):
    """A record breaks a format rule (flags, minimum length, per-key usage limit).
    ``record_number`` counts records from 0 in the stream (a length below the tag too, however
    the input was split); None where the fault is no one record's (a file whose records are not
    where its FIXED_LAYOUT field puts them)."""

    def __init__(self, message: str, *, record_number: int | None = None) -> None:
        super().__init__(message)
        self.record_number = record_number


class TruncatedStreamError(ProtocolError, EOFError):
    """Input ended before an authenticated FINAL record: the stream was cut short.
    ``in_header``: it ended before the stream header was whole (so that a reader can say so,
    not "before its FINAL record")."""

    def __init__(
        self, message: str = "input ended without a FINAL record", *, in_header: bool = False
    ) -> None:
        super().__init__(message)
        self.in_header = in_header


class TrailingDataError(ProtocolError):
    """Bytes follow the FINAL record. ``record_number`` is the FINAL record's number (from 0);
    None where a pipeline found the bytes after its Opener was done with the stream."""

    def __init__(
        self, message: str = "data follows the FINAL record", *, record_number: int | None = None
    ) -> None:
        super().__init__(message)
        self.record_number = record_number


class ArmorError(ProtocolError, ValueError):
    """Armored text (gcmstream.armor) breaks a rule of its strict form: a base64 line over 64
    characters or short before the last, non-canonical base64 or padding before the end, a
    line ending unlike the begin line's, no begin line, or anything but a little whitespace
    after the end line. ``line`` is the line (from 1) where it was found, 0 if none was
    complete. Nothing decoded from that line is returned."""

    line: int = 0


class TruncatedArmorError(ArmorError, TruncatedStreamError):
    """Armored text ended before its end line: cut short, as a binary stream that ends before
    FINAL (and caught as either)."""


class UsageError(GcmStreamError):
    """The caller broke a rule of the API. Nothing changed; the object is still usable."""


class StreamClosedError(UsageError, RuntimeError):
    """The stream (or this direction of it) is closed: FINAL was sealed or close() called."""


class NotReadyError(UsageError, RuntimeError):
    """A channel cannot seal records before the peer's stream header has been received."""


class KeyFileError(UsageError, ValueError):
    """A key file or key text is malformed: wrong prefix, version, suite or length."""


class RecipientError(UsageError, ValueError):
    """A recipient or identity line is malformed: prefix, version, kind, length, checksum or a
    low-order X25519 key; or a writer's recipients break a rule: over the limits, or
    post-quantum mixed with X25519-only ones (docs/FORMAT.md 4.3). The message never repeats
    the line (an identity line is a secret)."""


class BufferFullError(UsageError):
    """receive_data() was called while earlier input still waits for ring space."""


class ConcurrencyError(UsageError, RuntimeError):
    """A second thread called a Sealer or Opener while another call on it was under way.

    Neither is thread-safe: one object serves one thread at a time (handing it over between
    calls is fine). The second call is refused before it changes anything, so two threads
    can never seal two records under one nonce, whatever the interleaving."""


class OutOfRangeError(UsageError, ValueError):
    """buffer_updated() or consume() was given more bytes than were offered or are available."""


class UnsupportedBufferError(UsageError, TypeError):
    """A buffer the call cannot use: read-only where plaintext must be written (``readinto``),
    or not C-contiguous. Refused before anything is read or written."""


class SameFileError(UsageError, ValueError):
    """The output of a file function (``encrypt_file``, ``decrypt_file`` and their async twins,
    the command line's ``-o`` or stdout) is a file it reads: the rename at the end would replace
    the input, or, for a FIFO or a block device written in place, what is written would be
    read back. Refused before anything is read or written; and, where a name was made to lead
    to a file read while the work ran (a link, a rename), once the files are open or just
    before the rename, the output never made. ``what`` names the file read
    ("input file", "key file", ...), ``path`` its path (or descriptor number, an int). A
    character device (``/dev/null``, a terminal) or a socket is never "the same file": what
    is read from it and what is written to it are separate streams."""

    def __init__(self, what: str, path: str | int) -> None:
        shown = f"descriptor {path}" if isinstance(path, int) else repr(path)
        super().__init__(f"{shown} is both the {what} and the output: refused, the file left as it was")
        self.what = what
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.what, self.path), self.__dict__


class UnsupportedEndpointError(UsageError, TypeError):
    """A pipeline was given a source or sink it cannot read or write (a plain file object:
    ``anyio.wrap_file`` makes one it can)."""


class LimitReachedError(GcmStreamError):
    """Sealing would pass the hard per-key limit. Nothing was sealed; update the key first."""


class StoppedError(GcmStreamError):
    """The file engine (``gcmstream.files``: ``encrypt_path``, ``decrypt_path``, ``encrypt_fd``,
    ``decrypt_fd``, ``check_stop``) saw the ``stop`` event set and left its work: an output file
    is not made (its temporary file removed), and the Sealer or Opener it drove is broken (every
    later use raises StreamBrokenError). An async file function's task gets its cancellation
    instead: this is how the worker thread left."""


class StreamBrokenError(GcmStreamError):
    """The object failed earlier; ``original`` (also ``__cause__``) is the first error."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"stream is broken by an earlier error: {original}")
        self.original = original

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.original,), self.__dict__
