"""The ``gcmstream`` command (also ``python -m gcmstream``): keys, files, pipes and sockets.

Every failure is one line on stderr and an exit status of its own (``EXIT_CODES``); a
traceback is shown only for a bug, and only with GCMSTREAM_DEBUG=1.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import os
import re
import select
import signal
import stat
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from functools import partial

from ._numbers import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    DEFAULT_WORK_FACTOR,
    HARD_MAX_RECORD_SIZE,
    MAX_CONTEXT_SIZE,
    RECIPIENT_PREFIX,
)
from .errors import (
    ArmoredInputError,
    ArmorError,
    AuthenticationError,
    DowngradeError,
    KeyCommitmentError,
    MalformedHeaderError,
    NoIdentityMatchedError,
    PeerIdentityError,
    ProtocolError,
    RecipientError,
    RecordTooLargeError,
    SelfConnectionError,
    StanzaError,
    StreamBrokenError,
    TruncatedArmorError,
    TruncatedStreamError,
    UnknownKeyError,
    UnsupportedFormatError,
    UsageError,
)

# What the commands run on (cryptography through the format, the file engine, anyio for listen
# and connect) is imported when a command runs (_import_runtime), not for --help or --version:
# those stay a few times `python -c pass` (benchmarks/README.md, "start-up"). The file commands
# run without an event loop (_FileRun): they import neither asyncio nor anyio.
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (12 ms of --help)
if TYPE_CHECKING:
    import logging
    from typing import Any, NoReturn, TextIO, TypeVar

    import anyio
    from anyio import from_thread, to_thread
    from anyio.abc import ByteStream, SocketStream
    from anyio.lowlevel import current_token
    from anyio.streams.memory import MemoryObjectReceiveStream

    from ._adapter import serve_listener
    from ._output import FileRead, output_target
    from .anyio_stream import SecureStream, connect_tcp
    from .armor import BEGIN_LINE, ArmorDecoder, is_armored
    from .config import Configuration
    from .files import (
        STOP_WAIT,
        TINK_IN_ORDER,
        atomic_fd,
        check_stop,
        decrypt_fd,
        encrypt_fd,
        new_opener,
        new_sealer,
        one_worker_reason,
    )
    from .format import (
        HEADER_FIXED_SIZE,
        MAX_FIELDS_SIZE,
        MAX_STANZA_FIELDS_SIZE,
        VERSION,
        FieldType,
        HeaderStart,
        KeyExchange,
        Role,
        check_fields_length,
        check_header_start,
        check_role,
        generate_key,
        parse_fields,
        parse_header_start,
        sealed_with,
    )
    from .keyfile import KEY_PREFIX, KeyFileError, format_key, parse_key, write_key_file
    from .opener import Opener
    from .pipeline import CHUNK_SIZE
    from .recipients import (
        IDENTITY_PREFIX,
        MAX_IDENTITIES,
        MAX_IDENTITY_FILE_SIZE,
        MAX_RECIPIENTS_FILE_SIZE,
        Identity,
        Recipient,
        RecipientKind,
        check_recipients,
        check_work_factor,
        parse_identities,
        parse_recipients_file,
        write_identity_file,
    )
    from .seekable import open_file, open_regular
    from .tinkfile import open_tink_file
    from .tinkstream import MAX_KEYSET_SIZE, TinkKeyset, TinkOpener, TinkSealer, read_tink_keyset


def _import_runtime(command: str) -> None:
    """Bind what ``command`` runs on as this module's globals, once it will run: the keys and
    their formats (cryptography) for every command, the file engine for the others, anyio,
    the channel and its adapter for listen and connect."""
    _import_keys()
    if command not in _LOCAL_COMMANDS:
        _import_files()
    if command in _NET_COMMANDS:
        _import_network()


def _import_keys() -> None:
    global HEADER_FIXED_SIZE, MAX_FIELDS_SIZE, MAX_STANZA_FIELDS_SIZE, VERSION, FieldType, KeyExchange, Role
    global check_fields_length, check_header_start, check_role, generate_key, parse_fields, parse_header_start
    global sealed_with
    global KEY_PREFIX, KeyFileError, format_key, parse_key
    global write_key_file, IDENTITY_PREFIX, MAX_IDENTITIES, MAX_IDENTITY_FILE_SIZE
    global MAX_RECIPIENTS_FILE_SIZE, Identity, Recipient, RecipientKind, check_recipients
    global check_work_factor, parse_identities, parse_recipients_file, write_identity_file
    global BEGIN_LINE, ArmorDecoder, is_armored
    from .armor import BEGIN_LINE, ArmorDecoder, is_armored
    from .format import (
        HEADER_FIXED_SIZE,
        MAX_FIELDS_SIZE,
        MAX_STANZA_FIELDS_SIZE,
        VERSION,
        FieldType,
        KeyExchange,
        Role,
        check_fields_length,
        check_header_start,
        check_role,
        generate_key,
        parse_fields,
        parse_header_start,
        sealed_with,
    )
    from .keyfile import KEY_PREFIX, KeyFileError, format_key, parse_key, write_key_file
    from .recipients import (
        IDENTITY_PREFIX,
        MAX_IDENTITIES,
        MAX_IDENTITY_FILE_SIZE,
        MAX_RECIPIENTS_FILE_SIZE,
        Identity,
        Recipient,
        RecipientKind,
        check_recipients,
        check_work_factor,
        parse_identities,
        parse_recipients_file,
        write_identity_file,
    )

    global _KEY_EXCHANGES
    exchanges = (KeyExchange.MLKEM768_X25519, KeyExchange.X25519)
    _KEY_EXCHANGES = dict(zip(_KEY_EXCHANGE_NAMES, exchanges, strict=True))


def _import_files() -> None:
    global output_target, STOP_WAIT, check_stop, atomic_fd, decrypt_fd, encrypt_fd, new_opener
    global new_sealer, CHUNK_SIZE, open_file, open_regular, one_worker_reason, TINK_IN_ORDER
    global TinkKeyset, TinkOpener, TinkSealer, read_tink_keyset, MAX_KEYSET_SIZE, open_tink_file
    from ._output import output_target
    from .files import (
        STOP_WAIT,
        TINK_IN_ORDER,
        atomic_fd,
        check_stop,
        decrypt_fd,
        encrypt_fd,
        new_opener,
        new_sealer,
        one_worker_reason,
    )
    from .pipeline import CHUNK_SIZE
    from .seekable import open_file, open_regular
    from .tinkfile import open_tink_file
    from .tinkstream import MAX_KEYSET_SIZE, TinkKeyset, TinkOpener, TinkSealer, read_tink_keyset


def _import_network() -> None:
    global anyio, to_thread, from_thread, current_token, Configuration, SecureStream, connect_tcp
    global serve_listener
    import anyio
    from anyio import from_thread, to_thread
    from anyio.lowlevel import current_token

    from ._adapter import serve_listener
    from .anyio_stream import SecureStream, connect_tcp
    from .config import Configuration


if TYPE_CHECKING:
    _T = TypeVar("_T")
    _K = TypeVar("_K")
    Keying = dict[str, Any]  # Sealer/Opener keywords: key=, recipients=, identities= or passphrase=
_log: logging.Logger  # set by _log_to_stderr, before listen or connect runs
# The command line's floor for a writer's scrypt work factor (N = 2**14: 16 MiB, about 40 ms
# here): below it a passphrase costs an attacker almost nothing to guess. The API stays lenient.
MIN_WORK_FACTOR = 14
MAX_PASSPHRASE_SIZE = 4096  # bytes of a --passphrase-file's first line; a longer one is refused
# A passphrase is all that stands between whoever holds the file and its plaintext, guessed
# offline (scrypt slows each guess, it does not stop them): NIST SP 800-63B-4, 3.1.1.2, asks at
# least 15 characters (Unicode code points) of a password used as the only factor. A shorter
# one is warned about when encrypting, not refused (age refuses none either).
MIN_PASSPHRASE_CHARACTERS = 15

__all__ = (
    "EXIT_BROKEN_PIPE",
    "EXIT_CODES",
    "EXIT_IDENTITY",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_RECORD_LIMIT",
    "EXIT_TAMPERED",
    "EXIT_TERMINATED",
    "EXIT_TRUNCATED",
    "EXIT_UNSUPPORTED",
    "EXIT_USAGE",
    "EXIT_WRONG_KEY",
    "KEY_ENV",
    "exit_status",
    "main",
)

KEY_ENV = "GCMSTREAM_KEY"
DEBUG_ENV = "GCMSTREAM_DEBUG"

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_WRONG_KEY = 3
EXIT_TAMPERED = 4
EXIT_TRUNCATED = 5
EXIT_IO = 6
EXIT_UNSUPPORTED = 7
EXIT_RECORD_LIMIT = 8
EXIT_IDENTITY = 9
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for cat or age in the same place
EXIT_TERMINATED = 143

# The one exit table: --help prints it, README.md's "Exit status" table is checked against it
# (tests/hostile/test_verdicts.py), and _FAILURES gives each error its row. Rule names are those
# of docs/FORMAT.md (8.1's H, R checks, 4.4's S checks).
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "internal error (a bug: please report it; GCMSTREAM_DEBUG=1 shows the traceback)",
    EXIT_USAGE: "usage: bad arguments, no key or a malformed key, a key file open to others, a key "
    "file that exists (--force), ciphertext to a terminal, an output that is a file the command "
    "reads (the input, a key, identity, recipients or passphrase file)",
    EXIT_WRONG_KEY: "wrong key, no --identity matched, wrong passphrase, or wrong --context, found "
    "at the header before any record is opened (H10, H12, S3, S6, S7), also a key given for a "
    "file sealed to recipients or a passphrase; a header altered where no reader can tell it from "
    "these (a stanza altered, as in age; a key ID altered where the key given does not verify "
    "the header under its own ID; a commitment failing under the key, identity or "
    "passphrase that fits: a wrong --context or an alteration) is 3 too, its message naming both; "
    "a connect refused by a listen (another key, --context, --key-exchange, names) sees only the "
    "connection cut during the handshake: 5, its message naming each cause its options leave open",
    EXIT_TAMPERED: "tampered or corrupt input: a damaged header after the right magic and version "
    "(H3..H7, H9, H13), a header altered where the key given fits it (H11, S8's key ID, a key "
    "ID naming another key while the key given verifies the rest of the header), "
    "malformed stanzas (S2, S4, S5), a failed channel handshake, a record "
    "that failed authentication or broke a rule (R1..R7), or data after the end of the stream (R8)",
    EXIT_TRUNCATED: "truncated input: it ended before the authenticated end of the stream",
    EXIT_IO: "I/O error: a file, pipe or connection failed, or the stdin or stdout the command "
    "needs was closed by the shell (<&-, >&-: 'stdin is closed', 'stdout is closed')",
    EXIT_UNSUPPORTED: "not gcmstream data or a format version this version does not read (H1, H2), "
    "or a critical header field this version does not know, under a valid commitment (H14)",
    EXIT_RECORD_LIMIT: "the header announces records larger than --max-record-size allows (H8); the "
    "message names the value that reads them",
    EXIT_IDENTITY: "identity refused: the peer claims this end's own --local-id (a connection "
    "reflected back to its own host), or is not the --peer-id expected (connect, and listen "
    "--once; a listen without --once logs the refusal and keeps serving; the refused side sees a "
    "cut connection: 5)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "the reader of the output went away (no message, as with cat)",
    EXIT_TERMINATED: "terminated (SIGTERM or SIGHUP); as with Ctrl-C, no partial output file is left",
}

_KEY_HELP = (
    f"key file written by 'gcmstream keygen'; without it the key text is read from the "
    f"environment variable {KEY_ENV} (the key file's line, e.g. {KEY_ENV}=$(cat KEYFILE)); "
    "'-k -' names a file called '-' (stdin is the input)"
)
_EXIT_EPILOG = "exit status (H, R, S: the checks of docs/FORMAT.md 8.1 and 4.4):\n" + "\n".join(
    textwrap.fill(text, 78, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7)
    for code, text in EXIT_CODES.items()
)
_STDOUT_NOTE = (
    "Decrypting to a file (-o FILE) is atomic: the plaintext goes to a temporary file beside FILE "
    "that replaces FILE only after the final record authenticated; on any failure it is removed and "
    "FILE is left as it was. Decrypting to stdout releases plaintext record by record, each only "
    "after it authenticated; on a failure the output ends after the last good record and the "
    "exit status is not 0, so check it (set -o pipefail in shells)."
)


class _Fail(Exception):
    """A failure the command words itself: one line, its own exit status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Usage(Exception):
    """A usage error found after parsing: reported as one line, exit status 2."""


class _Terminated(Exception):
    """SIGTERM or SIGHUP arrived; the command was cancelled (so its cleanup ran)."""


# Key text given where it does not belong (-k KEYLINE, a stray argument, a key line with its
# fields swapped) must not come back in a message. A key line or a bare key is a run of
# base64url characters and colons, 22 or more long, with no "/" or "." in it, which every path
# or address the messages name has: such runs are hidden wherever they appear. (Patterns, not
# compiled here: re compiles and keeps them when a message is first shown, not for --help.)
_KEY_LIKE = r"(?<![A-Za-z0-9_:/.-])[A-Za-z0-9_:-]{21,}[A-Za-z0-9_-](?![A-Za-z0-9_/.-])"


# Key text inside a path ("$(cat backup.key)/x" typed as -o): random base64url has upper and
# lower case letters in any 22 characters but for about 2 in 100,000 keys, while the words of a
# path or an address rarely mix both in a 22-character run without a separator. Such runs are
# hidden too, whatever surrounds them.
_MIXED_RUN = r"[A-Za-z0-9_-]{22,}"
_RECIPIENT_LINE = re.escape(RECIPIENT_PREFIX) + r"(:[a-z0-9]+)?:?"  # payload excluded


def _printable(text: str) -> str:
    """``text`` as the terminal shows it literally: every character that is not printable (C0
    and C1 controls, DEL, line and format characters such as a bidi override) escaped as
    Python writes it in a string (\\n, \\x1b, \\u202e), and a byte of a name that was not
    UTF-8 as \\xNN. The one filter of every path and peer-supplied string the command line
    prints (its messages, log lines, warnings and info's lines): a file name holding a newline
    or an escape sequence must not add lines or hide what follows it."""
    if text.isprintable():
        return text
    shown = []
    for char in text:
        if char.isprintable():
            shown.append(char)
        elif 0xDC80 <= ord(char) <= 0xDCFF:  # os.fsdecode's surrogateescape of a raw byte
            shown.append(f"\\x{ord(char) - 0xDC00:02x}")
        else:
            shown.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(shown)


def _hide_key_text(text: str) -> str:
    # the recipient prefix and kind name the format and are shown (so a message can say what
    # it expected); every run that may be key text is hidden, a pasted line's payload included
    shown, last = [], 0
    for line in re.finditer(_RECIPIENT_LINE, text):
        shown += [_hide_secret_runs(text[last : line.start()]), line.group(0)]
        last = line.end()
    return "".join([*shown, _hide_secret_runs(text[last:])])


def _hide_secret_runs(text: str) -> str:
    text = re.sub(_KEY_LIKE, "<hidden: may be key text>", text)
    return re.sub(_MIXED_RUN, _hide_if_mixed, text)


def _hide_if_mixed(match: re.Match[str]) -> str:
    run = match.group(0)
    if any(c.isupper() for c in run) and any(c.islower() for c in run):
        return "<hidden: may be key text>"
    return run


# argparse quotes the text after "=" given to an option that takes no value (--passphrase=TEXT,
# -qTEXT): it may be a secret, so the message says what was wrong without it
_IGNORED_VALUE = r"ignored explicit argument '.*'"


_NOT_SHOWN = "(its value is not shown)"


class _Parser(argparse.ArgumentParser):
    # the top parser's: the command named on the command line, set before parsing, since the
    # top parser reports the command's stray arguments ("unrecognized arguments")
    command_given: str | None = None
    # the words parsed (set before parsing, on the class: every subparser's error hides them)
    words: Sequence[str] = ()

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {_unrecognized(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        message = re.sub(_IGNORED_VALUE, "takes no value (the text given to it is not shown)", message)
        message = _without_values(message, self.words)
        # argparse's "ambiguous option: --pass=TEXT could match ...": the text may be a secret
        # (a value _unrecognized already hid leaves "--password=" bare: not hidden twice)
        message = re.sub(r"(?<!\S)(--?[\w-]+)=\S+", rf"\1= {_NOT_SHOWN}", message)
        # the word taken for the command, quoted by repr (escapes and all): shown only when it
        # is a plain word, not a flag pasted with look-alikes and its value (rev16, LOW-2)
        message = re.sub(
            r"argument COMMAND: invalid choice: (\S.*?) \(choose from",
            _choice_shown,
            message,
            flags=re.S,
        )
        command = self.prog.partition(" ")[2] or self.command_given
        helped = f"gcmstream {command}" if command else "gcmstream"
        self.exit(EXIT_USAGE, _stderr_line(command, f"{message} (see {helped} --help)") + "\n")


def _unrecognized(extras: Sequence[str]) -> str:
    """Stray words as a usage error names them, a value never among them: a misspelt
    ``--password=TEXT`` shows ``--password=``, and the word after an unknown flag is not shown
    (either may be a secret typed at the wrong flag)."""
    shown: list[str] = []
    hidden = False  # the word before was not shown: the word after it may be its value
    for word, previous in zip(extras, [None, *extras], strict=False):
        if word.startswith("-") and "=" in word:
            shown.append(f"{word.partition('=')[0]}= {_NOT_SHOWN}")
        elif word.startswith("-") and not word.startswith("--") and len(word) > 2:
            shown.append(f"{word[:2]} {_NOT_SHOWN}")  # -pTEXT: a short flag, its joined value
        elif hidden or (previous is not None and previous.startswith("-") and "=" not in previous):
            shown.append("(the next word is not shown)")
        elif not _plain_word(word):  # a flag typed with look-alikes (U+30FC...), spaces first
            shown.append("(a word that is not shown)")
            hidden = True
            continue
        else:
            shown.append(word)
        hidden = False
    return " ".join(shown)


def _choice_shown(found: re.Match[str]) -> str:
    """argparse's "invalid choice: 'WORD' (choose from", WORD hidden unless it is plain."""
    if re.fullmatch(r"'[\w.,:/+-]*'", found.group(1), re.ASCII):
        return found.group(0)
    return "argument COMMAND: invalid choice (the word is not shown) (choose from"


def _plain_word(word: str) -> bool:
    """A word a usage error may quote: printable ASCII with no space or '=' (a file's name, a
    command misspelt); any other may be a flag pasted with look-alikes and its value (rev16)."""
    return word.isascii() and word.isprintable() and " " not in word and "=" not in word


def _without_values(message: str, words: Sequence[str]) -> str:
    """argparse's (and the type functions') "argument --FLAG: ..." with the value given to
    --FLAG (or an abbreviation of it) replaced: an option's value is never quoted back."""
    named = re.match(r"argument (\S+): ", message)
    if named is None:
        return message
    flags = [flag for flag in named.group(1).split("/") if flag.startswith("-")]
    # the choices argparse lists are the parser's own words, never a value given: kept whole
    # (`--format x --format tink` blanked 'tink' there, a value given to --format too)
    rest, choices, listed = message[named.end() :].partition(" (choose from ")
    numeric = bool(flags) and all(flag in _NUMBER_FLAGS for flag in flags)
    for word, following in zip(words, [*words[1:], ""], strict=False):
        name, joined, value = word.partition("=")
        if any((flag.startswith(name) and len(name) > 2) or flag == name for flag in flags):
            given = value if joined else following
            if numeric and re.fullmatch(_A_NUMBER, given):
                continue  # `--offset -5`: a number is no secret, and the message needs it
            if given:
                hidden = f" {_NOT_SHOWN}" if numeric else _NOT_SHOWN
                rest = rest.replace(f": {given!r}" if numeric else repr(given), hidden)
    return message[: named.end()] + rest + choices + listed


# Flags that take a number: a value given to one that reads as a number (a sign, digits, a
# unit letter) is shown in its error; any other may be a secret typed at the wrong flag
_NUMBER_FLAGS = {"--offset", "--length", "--record-size", "--max-record-size", "--jobs", "--work-factor"}
_A_NUMBER = r"[+-]?[0-9]{1,30}[A-Za-z]?"


def _stderr_line(
    command: str | None, message: str, *, shown_as_is: bool = False, address: str | None = None
) -> str:
    """The one form of every line the command writes on stderr (errors, warnings, log lines,
    notes): 'gcmstream COMMAND: ...' (or 'gcmstream: ...' before a command is known), its
    control characters escaped (``_printable``: a name from a glob, `info dir/*`) and any run
    that may be key text hidden, unless ``shown_as_is``: a line this process made that must be
    read whole (a generated passphrase, an IPv6 address it bound). ``address``: a peer's
    address as the socket gave it (``_shown``), put before the message and outside the
    filter: never key text, and a long IPv6 address is a run the filter would hide."""
    prog = f"gcmstream {command}" if command else "gcmstream"
    said = _printable(message)
    if not shown_as_is:
        said = _hide_key_text(said)
    where = "" if address is None else f"{_printable(address)}: "
    return f"{prog}: {where}{said}"


# -- argument parsing -----------------------------------------------------------------------


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024 * 1024}
    scale = units.get(text[-1:].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = int(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with K or M)") from None
    if not 1 <= value <= HARD_MAX_RECORD_SIZE:
        raise argparse.ArgumentTypeError(f"must be from 1 byte to {HARD_MAX_RECORD_SIZE // (1024 * 1024)}M")
    return value


def _offset(text: str) -> int:
    """A plaintext position or length: bytes, or with a K, M or G suffix (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    scale = units.get(text[-1:].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = int(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with K, M or G)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _size_text(size: int) -> str:
    """A size as --record-size and --max-record-size take it: 2M, 16K or bytes."""
    for unit, scale in (("M", 1024 * 1024), ("K", 1024)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {text!r} (e.g. 600 or 644)") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"not a permission mode: {text!r} (000 to 777)")
    return mode


MAX_JOBS = 64  # workers --jobs may ask for: each holds two blocks of 1 MiB and a thread


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of workers: {text!r}") from None
    if not 1 <= jobs <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_JOBS}")
    return jobs


def _context(text: str) -> bytes:
    data = text.encode("utf-8", "surrogateescape")
    if len(data) > MAX_CONTEXT_SIZE:
        raise argparse.ArgumentTypeError(f"longer than {MAX_CONTEXT_SIZE} bytes")
    return data


def _stdin_as_its_file(word: str) -> str:
    """``info``'s FILE: ``-`` is stdin, as every command's input, through its link in /dev
    (info seeks to the final record, so a file redirected in reads and a pipe is refused as
    any FIFO is); a new user's ``info -`` was "-: No such file or directory"."""
    return "/dev/stdin" if word == "-" else word


def _channel_name(text: str) -> str:
    from .handshake import MAX_IDENTITY_SIZE

    size = len(text.encode("utf-8"))
    if not 1 <= size <= MAX_IDENTITY_SIZE:
        raise argparse.ArgumentTypeError(f"a name is 1 to {MAX_IDENTITY_SIZE} bytes of UTF-8, got {size}")
    return text


_KEY_EXCHANGE_NAMES = ("hybrid", "x25519")  # KeyExchange.MLKEM768_X25519, X25519 (_import_runtime)
_KEY_EXCHANGES: dict[str, KeyExchange] = {}


def _address(text: str, *, default_host: str | None) -> tuple[str, int]:
    """``[HOST:]PORT`` (listen: ``default_host`` when there is no host) or ``HOST:PORT``
    (connect), an IPv6 host in brackets (``[::1]:9000``). A usage error names the address as
    given and what is wrong with it, in words (never a Python repr)."""
    form = "HOST:PORT" if default_host is None else "[HOST:]PORT"

    def bad(problem: str) -> argparse.ArgumentTypeError:
        given = f'bad address "{text}"' if text else "an empty address"  # (quoted: it may end in ':')
        return argparse.ArgumentTypeError(f"{given}: {problem}")

    host, sep, port_text = text.rpartition(":")
    if host.startswith("["):  # [::1]:9000: the brackets enclose the whole host
        if not host.endswith("]") or "[" in host[1:-1] or "]" in host[1:-1]:
            raise bad("an IPv6 host goes in brackets before the port, as [::1]:9000")
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:  # ::1:9000 is ambiguous
        raise bad("an IPv6 host goes in brackets before the port, as [::1]:9000")
    if not host:
        if default_host is None:
            raise bad(f"no host: give {form}, as 127.0.0.1:9000" if sep else f"no port: give {form}")
        host = default_host
    if not port_text:
        raise bad(f"no port after the ':': give {form}" if sep else f"no port: give {form}")
    if not port_text.isdigit():  # (not int(): it takes " 80", "+80", "8_0" and "٨٠")
        raise bad(f"the port {port_text} is not a number")
    port = int(port_text)
    if port > 65535:
        raise bad(f"the port {port} is over 65535")
    return host, port


_EXAMPLES = {
    "keygen": """\
  gcmstream keygen -o backup.key                  # AES-128-GCM, mode 0600
  gcmstream keygen -o backup.key --suite aes256 --force
  export GCMSTREAM_KEY=$(gcmstream keygen -o -)   # the key line, for the environment""",
    "identity": """\
  gcmstream identity -o me.identity               # ML-KEM-768 + X25519; recipient on stderr
  gcmstream identity -o me.identity --x25519      # X25519 alone: a 78-character recipient""",
    "recipient": """\
  gcmstream recipient me.identity > me.recipient  # to give to others""",
    "encrypt": """\
  tar c docs | gcmstream encrypt -k backup.key --context "backup v1" > docs.tar.gcms
  gcmstream encrypt -R team.recipients -r gcmstream-recipient-v1:mlkem768x25519:... -o a.pdf.gcms a.pdf
  gcmstream encrypt -a --passphrase -o notes.txt.asc notes.txt     # -a: text, for mail""",
    "decrypt": """\
  gcmstream decrypt -k backup.key --context "backup v1" docs.tar.gcms | tar x
  gcmstream decrypt -k backup.key big.iso.gcms --offset 2G --length 4K | xxd
  gcmstream decrypt -i me.identity -o a.pdf a.pdf.gcms      # -i: --identity, as in age""",
    "info": """\
  gcmstream info -k backup.key big.iso.gcms
  gcmstream info -k backup.key --context "backup v1" docs.tar.gcms
  gcmstream info a.pdf.gcms          # no key: what the header claims (not verified)""",
    "listen": """\
  gcmstream listen 9000 -k backup.key < /dev/null > received.tar
  gcmstream listen 0.0.0.0:9000 -k backup.key --context "chat v1"
  gcmstream listen 0 -k backup.key --once         # any free port; one connection""",
    "connect": """\
  tar c docs | gcmstream connect otherhost:9000 -k backup.key
  gcmstream connect [::1]:9000 -k backup.key --context "chat v1"
  gcmstream connect otherhost:9000 -k backup.key < /dev/null > received.tar""",
}
_SEE_EXIT = "Exit status 0 on success; the others are listed by 'gcmstream --help'."


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, given the terminal's width as ``shutil.get_terminal_size`` finds it (COLUMNS,
    then stdout's terminal, else 80), so that argparse does not import shutil (and bz2, lzma
    and zlib) for it: it makes a formatter for every option added, help or not (5 ms of every
    command: ``python -X importtime -m gcmstream --help``)."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2  # as argparse does with shutil's figure
        super().__init__(prog, indent_increment, max_help_position, width)


def _terminal_columns() -> int:
    with contextlib.suppress(KeyError, ValueError):
        columns = int(os.environ["COLUMNS"])
        if columns > 0:
            return columns
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns or 80


def _build_parser() -> argparse.ArgumentParser:
    formatter = _HelpFormatter
    parser = _Parser(
        prog="gcmstream",
        description="Encrypt and authenticate streams as AES-GCM records: files, pipes and TCP sockets.",
        epilog="examples:\n"
        + "\n".join(_EXAMPLES[name].splitlines()[0] for name in _EXAMPLES)
        + "\n\n"
        + _EXIT_EPILOG,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action=_PrintVersion, nargs=0, help="print the version and exit")
    _add_completion_option(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=textwrap.fill(description, 78),
            epilog=f"examples:\n{_EXAMPLES[name]}\n\n{_SEE_EXIT}",
            formatter_class=formatter,
        )

    keygen = command(
        "keygen",
        "write a new random key to a key file",
        "Write a new random key to KEYFILE as one line of text "
        "('gcmstream-key-v1:aes128:...'), readable only by you (mode 0600).",
    )
    keygen.add_argument(
        "-o",
        "--output",
        metavar="KEYFILE",
        required=True,
        help="key file to create ('-': print the key line on stdout)",
    )
    keygen.add_argument(
        "--suite",
        choices=("aes128", "aes256"),
        default="aes128",
        help="AES-128-GCM (default) or AES-256-GCM",
    )
    keygen.add_argument("-f", "--force", action="store_true", help="overwrite KEYFILE if it exists")

    identity = command(
        "identity",
        "write a new identity (private key) for public-key encryption",
        "Write a new identity to FILE, readable only by you (mode 0600), and print its "
        "recipient line (the public key, 'gcmstream-recipient-v1:...') on stderr: others "
        "encrypt to you with 'encrypt -r LINE'. Hybrid ML-KEM-768 + X25519 by default.",
    )
    identity.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        required=True,
        help="identity file to create ('-': print the identity on stdout, its recipient on stderr)",
    )
    identity.add_argument("--x25519", action="store_true", help="X25519 alone (not post-quantum)")
    identity.add_argument("-f", "--force", action="store_true", help="overwrite FILE if it exists")
    recipient = command(
        "recipient",
        "print the recipient line of an identity file",
        "Print the recipient line (public key) of IDENTITY_FILE on stdout.",
    )
    recipient.add_argument("identity_file", metavar="IDENTITY_FILE", help="an identity file")

    def key_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-k", "--key-file", metavar="KEYFILE", help=_KEY_HELP)
        sub.add_argument(
            "--context",
            metavar="TEXT",
            type=_context,
            default=b"",
            help="text bound to the stream (a purpose, a file name); the other side needs the same TEXT",
        )

    def passphrase_options(
        sub: argparse.ArgumentParser, twice: str, empty: str = "", positional: str = "INPUT"
    ) -> None:
        sub.add_argument(
            "--passphrase",
            action="store_true",
            help=f"ask for a passphrase {twice}on the terminal (takes no value: the word after it is "
            f"{positional}){empty}",
        )
        sub.add_argument(
            "--passphrase-file",
            metavar="FILE",
            help="the passphrase is the first line of FILE, UTF-8, at most 4096 bytes, without its line "
            "ending (scripts); FILE must be readable by you only (chmod 600)",
        )

    def io_options(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument(
            "input", metavar="INPUT", nargs="?", default="-", help=f"{what} to read (default or '-': stdin)"
        )
        sub.add_argument(
            "-o", "--output", metavar="OUT", default="-", help="where to write (default: stdout)"
        )
        sub.add_argument(
            "-q", "--quiet", action="store_true", help="no progress bar (shown on a terminal for files)"
        )
        sub.add_argument(
            "--mode",
            metavar="OCTAL",
            type=_mode,
            default=0o600,
            help="permissions of an output file (default 600: only you; e.g. 644 to share it)",
        )

    def format_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--format",
            choices=("gcmstream", "tink"),
            default="gcmstream",
            help="gcmstream's own format (default), or tink: Tink's AES-GCM-HKDF streaming "
            "ciphertext, -k naming Tink's JSON cleartext keyset and --context its associated data",
        )

    def max_record_size_option(sub: argparse.ArgumentParser) -> None:
        limit = _size_text(DEFAULT_MAX_RECORD_SIZE)
        sub.add_argument(
            "--max-record-size",
            metavar="N",
            type=_size,
            default=DEFAULT_MAX_RECORD_SIZE,
            help=f"largest record to accept, up to 16M (default {limit}); memory grows with it",
        )

    def jobs_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--jobs",
            metavar="N",
            type=_jobs,
            help="workers (threads) for a regular INPUT to a file OUT (default: the usable cores "
            "from 64M of INPUT up, else 1; stdin, stdout, pipes: 1); the output is the same. An N "
            "over 1 that cannot be used (decrypting to stdout, a pipe, armor, --offset, --format "
            "tink, a file without the fixed layout) is said once on stderr, once the key and the "
            "input are accepted, and one worker goes on",
        )

    encrypt = command(
        "encrypt",
        "encrypt a file or stdin",
        "Encrypt INPUT (default stdin) into OUT (default stdout; refused if stdout is a terminal, "
        "unless armored). Output to a file is written to a temporary file and renamed when complete.",
    )
    key_options(encrypt)
    encrypt.add_argument(
        "-r",
        "--recipient",
        metavar="RECIPIENT",
        action="append",
        default=[],
        help="encrypt to this recipient line (repeatable), instead of a key",
    )
    encrypt.add_argument(
        "-R",
        "--recipients-file",
        metavar="FILE",
        action="append",
        default=[],
        help="encrypt to the recipients in FILE ('-': stdin), one a line, '#' comments (repeatable)",
    )
    encrypt.add_argument(
        "-i",
        "--identity",
        metavar="FILE",
        action="append",
        default=[],
        help="encrypt to the recipients of the identities in FILE (repeatable), as age -e -i does",
    )
    passphrase_options(
        encrypt,
        "twice ",
        "; left empty: a strong one is generated, shown once on stderr, its hyphens part of it; "
        f"one under {MIN_PASSPHRASE_CHARACTERS} characters is warned about, not refused",
    )
    encrypt.add_argument(
        "--work-factor",
        metavar="LOG2N",
        type=int,
        default=DEFAULT_WORK_FACTOR,
        help=f"scrypt cost of a passphrase, log2 of N, {MIN_WORK_FACTOR} to 19 "
        f"(default {DEFAULT_WORK_FACTOR}: about 1 s, 256 MiB)",
    )
    io_options(encrypt, "plaintext")
    format_option(encrypt)
    encrypt.add_argument(
        "-a",
        "--armor",
        action="store_true",
        help="write the text form (PEM-like lines of base64, as age -a): 'decrypt' reads it as it "
        "is; 'info' and --offset need the binary form",
    )
    encrypt.add_argument(
        "--record-size",
        metavar="N",
        type=_size,
        default=DEFAULT_RECORD_SIZE,
        help=f"plaintext bytes per record, e.g. 16K (default {DEFAULT_RECORD_SIZE // 1024}K); "
        "over 1M, decrypting needs --max-record-size",
    )
    jobs_option(encrypt)

    decrypt = command(
        "decrypt",
        "decrypt and verify a file or stdin",
        "Decrypt INPUT (default stdin) into OUT. Without -k, --identity or a passphrase option, "
        "the header says which one the file needs. " + _STDOUT_NOTE,
    )

    def reader_keying_options(sub: argparse.ArgumentParser, positional: str = "INPUT") -> None:
        key_options(sub)
        sub.add_argument(
            "-i",
            "--identity",
            metavar="FILE",
            action="append",
            default=[],
            help="open with the identities in FILE ('-': stdin), one a line, each tried "
            "(repeatable), instead of a key; -i as in age (before identity files, -i named the "
            "input)",
        )
        passphrase_options(sub, "", positional=positional)

    reader_keying_options(decrypt)
    io_options(decrypt, "ciphertext")
    format_option(decrypt)
    max_record_size_option(decrypt)
    jobs_option(decrypt)
    decrypt.add_argument(
        "--offset",
        metavar="N",
        type=_offset,
        help="start at plaintext byte N (K, M, G suffixes); INPUT must be a file: only the records "
        "the range touches are read, after the final record authenticated. N at or past the end "
        "of the plaintext writes nothing and exits 0, as tail -c +N and dd skip= do (the file is "
        "still authenticated: a cut or altered one fails as without --offset); 'gcmstream info' "
        "gives the length",
    )
    decrypt.add_argument(
        "--length", metavar="N", type=_offset, help="write at most N plaintext bytes (K, M, G suffixes)"
    )

    info = command(
        "info",
        "show what an encrypted file's header says",
        "Verify FILE's header and final record with the key and print what the header says "
        "(format version, cipher suite, record size, key ID, layout) and the plaintext length. "
        "Without -k, --identity or a passphrase option (and no GCMSTREAM_KEY), print what the "
        "header claims, marked 'verified: NO' (format version, how it was sealed: a key, "
        "recipients or a passphrase, and so what reads it, suite, record size, the key ID of a "
        "key-sealed file, layout), asking for nothing. Nothing secret is printed.",
    )
    reader_keying_options(info, "FILE")  # info's one positional is FILE, not INPUT
    format_option(info)
    max_record_size_option(info)
    info.add_argument(
        "file",
        metavar="FILE",
        type=_stdin_as_its_file,
        help="the encrypted file ('-': the file redirected to stdin, < FILE; info seeks, so not a pipe)",
    )

    def channel_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--record-size",
            metavar="N",
            type=_size,
            default=DEFAULT_RECORD_SIZE,
            help=f"largest record to send (default {DEFAULT_RECORD_SIZE // 1024}K)",
        )
        sub.add_argument(
            "--local-id",
            metavar="NAME",
            type=_channel_name,
            help="this end's name, sent to the peer and bound into the keys; a peer that claims "
            "it is refused (exit 9). A host that runs both 'listen' and 'connect' with one key "
            "must set --peer-id (on either command) or --local-id on both: otherwise an attacker "
            "can route its own 'connect' into its 'listen'. --local-id on one of them alone does "
            "not stop that",
        )
        sub.add_argument(
            "--peer-id",
            metavar="NAME",
            type=_channel_name,
            help="the name the peer must send (its --local-id); any other is refused (exit 9)",
        )
        sub.add_argument(
            "--key-exchange",
            choices=_KEY_EXCHANGE_NAMES,
            default="hybrid",
            help="hybrid (ML-KEM-768 + X25519, the default) or x25519 (smaller handshake); "
            "'listen' refuses a weaker one than its own, 'connect' offers it",
        )

    net_note = (
        "Sends stdin to the peer and writes what the peer sends to stdout, over an encrypted, "
        "authenticated channel. At the end of stdin the final record is sent (the peer's output "
        "ends there); stdout is closed when the peer's final record arrives; the command exits "
        "once both directions ended. For a one-way transfer give the receiving side no input "
        "(< /dev/null)."
    )
    listen = command(
        "listen",
        "accept one peer on a TCP port: socket to stdout, stdin to socket",
        "Listen on [HOST:]PORT (default host 127.0.0.1; PORT 0 picks a free port, printed on "
        "stderr as 'listening on HOST:PORT') until one peer completes the handshake, then stop "
        "listening; a connection whose handshake fails (a wrong key, a port scan) is logged on "
        "stderr and closed, and listening goes on (--once: stop after the first connection "
        "whatever happens). " + net_note,
    )
    listen.add_argument(
        "address", metavar="[HOST:]PORT", help="address to listen on (an IPv6 host in brackets: [::1]:9000)"
    )
    key_options(listen)
    listen.add_argument("-q", "--quiet", action="store_true", help="do not print the listening address")
    listen.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="a line for every failed handshake (without it, those within 10 s of the last line "
        "said are only counted, in one line per 10 s)",
    )
    listen.add_argument(
        "--once",
        action="store_true",
        help="take only the first connection; its failed handshake ends the command",
    )
    max_record_size_option(listen)
    channel_options(listen)

    connect = command(
        "connect",
        "connect to a 'gcmstream listen': stdin to socket, socket to stdout",
        "Connect to HOST:PORT where 'gcmstream listen' runs. " + net_note,
    )
    connect.add_argument(
        "address", metavar="HOST:PORT", help="address to connect to (an IPv6 host in brackets: [::1]:9000)"
    )
    key_options(connect)
    max_record_size_option(connect)
    channel_options(connect)
    return parser


class _PrintVersion(argparse.Action):
    """--version, the version read only when asked (importlib.metadata: 30 ms)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option: str | None = None,
    ) -> None:
        from . import __version__

        print(f"{parser.prog} {__version__}")
        parser.exit(0)


# -- keys ---------------------------------------------------------------------------------------


def _load_key(key_file: str | None) -> bytes:
    if key_file is not None:
        try:
            # read once: the key used is the file whose mode is checked and that the same-file
            # rule compares OUT with (read again by name, a file renamed onto KEY meanwhile was
            # used, and the one read first could be replaced; rev8). A file named '-' is a file:
            # stdin is the input
            read = _read_text(key_file, MAX_IDENTITY_FILE_SIZE, named=True, private="key file")
            _refuse_other_kind(key_file, read, "key")
            _check_private(key_file, "key file")
            return parse_key(read[:_KEY_FILE_TEXT])
        except KeyFileError as exc:
            raise _Usage(f"key file {key_file}: {exc}") from None
        except (OSError, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _Usage(f"cannot read key file {key_file}: {reason}") from None
    text = os.environ.get(KEY_ENV)
    if text is None:
        raise _Usage(f"no key: give -k KEYFILE or set {KEY_ENV}")
    try:
        return parse_key(text)
    except KeyFileError as exc:
        raise _Usage(f"{KEY_ENV}: {exc}") from None


# the characters of a key file read_key_file parses (it reads no more)
_KEY_FILE_TEXT = 4096


# /dev/tty (major 5, minor 0): the process's own terminal, whose node is 0666 for everyone
_CONTROLLING_TERMINAL = os.makedev(5, 0)


def _controlling_terminal() -> os.stat_result | None:
    """The terminal /dev/tty stands for (this process's controlling terminal, /proc/self/stat's
    tty_nr), as one of descriptors 0-2 has it open; None where none does (rev18, LOW-2)."""
    try:
        with open("/proc/self/stat", "rb") as status:
            terminal = int(status.read().rsplit(b")", 1)[1].split()[4])  # after "(comm)": tty_nr
    except (OSError, ValueError, IndexError):
        return None
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            found = os.fstat(fd)
            if stat.S_ISCHR(found.st_mode) and found.st_rdev == terminal:
                return found
    return None


def _check_private(path: str, what: str) -> None:
    """Refuse a key, identity, keyset or passphrase file others may read or write: they would
    have the secret, or could swap it for theirs. The file looked at is the one read
    (``_note_read``), never ``path`` again: a name looked at apart from the read let a private
    file renamed in for the look pass for an open one read after it (review 2026-12-05,
    MEDIUM-1). Who could put another file at the name is ``_open_secret``'s question."""
    read = _files_read_were[path]
    # a socket (0777) or /dev/tty given as stdin: their modes say nothing of who reads what
    # passes through them (rev16); a terminal's read bits do, a file's, a FIFO's or a disk's all
    if stat.S_ISSOCK(read.st_mode):
        return
    if stat.S_ISCHR(read.st_mode) and read.st_rdev == _CONTROLLING_TERMINAL:
        read = _controlling_terminal() or read  # /dev/tty's node is 0666: the terminal behind it
        if read.st_rdev == _CONTROLLING_TERMINAL:
            return  # (not found on descriptors 0-2: not asked)
    mode = stat.S_IMODE(read.st_mode)
    where, fix = ("on stdin", "chmod 600 the file") if path == "-" else (path, f"chmod 600 {path}")
    if stat.S_ISCHR(read.st_mode):  # a terminal others may read takes what is pasted (rev17)
        if mode & 0o044:
            raise _Usage(
                f"{what} {where} is a terminal open to other users (mode {mode:04o}): chmod 600 $(tty)"
            )
    elif mode & 0o077:
        raise _Usage(f"{what} {where} is open to other users (mode {mode:04o}): {fix}")


# the links one name may go through, as the kernel's limit (MAXSYMLINKS)
_MAX_LINKS = 40


def _open_secret(path: str, what: str) -> int:
    """A descriptor of the secret file ``path`` (a key, identity, keyset or passphrase file),
    reached the way the kernel resolves the name but one name at a time, each folder opened
    from the one before (so what is checked is what is opened, with no second look by name),
    refused as soon as another user could have put something else at the name: a folder it goes
    through that the group or others may write in (unless sticky, as /tmp is) or that a user
    other than root, this process's and the file's owner owns (``_refuse_replaceable``); a
    name in a sticky folder (a link, a folder, the file) that neither root, this process's user
    nor the folder's owner made (``_refuse_squatted``). Whoever writes in such a place could
    put there a link to one of the user's own private files whose first line is known (a PEM
    key's), which then passed as a private passphrase file (reviews of 2026-12-05, rev10 to
    rev13). A link in /proc as the last name (``/dev/fd/N``, ``<(...)``: the process's own
    descriptors) is the kernel's to open, where /proc is procfs. ``-`` is a file."""
    if not path:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))  # (FileNotFoundError)
    folders: list[tuple[str, os.stat_result]] = []  # (the name so far, the folder) on the way
    names = collections.deque(path.split("/"))
    walked = "/" if path.startswith("/") else "."
    fd = os.open(walked, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    proc = _procfs_device()
    links = 0
    try:
        folders.append((walked, os.fstat(fd)))
        while True:
            while names and names[0] in ("", "."):
                names.popleft()
            here = folders[-1][1]
            if not names:  # a name that ends in a folder: refused as one (_judge_opened)
                entry = here
                secret = os.open(".", os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)
                break
            name = names.popleft()
            walked = os.path.join(walked, name)
            entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            _refuse_squatted(path, what, folders[-1], name, entry)
            if stat.S_ISLNK(entry.st_mode) and proc is not None and here.st_dev == proc and not names:
                # /proc/PID/fd/N (/dev/fd/N, <(...)): a descriptor of this process, which the
                # kernel's link opens (a pipe's has no name to walk); only as the last name:
                # /proc/self/root/... or cwd/... are walked as any other link
                secret = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)
                break
            if stat.S_ISLNK(entry.st_mode):
                links = _one_more_link(links)
                target = os.readlink(name, dir_fd=fd)
                names.extendleft(reversed(target.split("/")))
                walked = "/" if target.startswith("/") else os.path.dirname(walked)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    folders.append(("/", os.fstat(fd)))
                continue
            if names:  # a folder on the way (``..`` too: the one above, from this one)
                inner = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = inner
                folders.append((walked, os.fstat(fd)))
                continue
            # judged before it is opened: a FIFO or a device another user put there is refused,
            # not opened (rev12, LOW-2); what is opened must then be what was judged
            _refuse_replaceable(path, what, folders, entry)
            secret = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            break
    finally:
        os.close(fd)
    try:
        _judge_opened(path, what, folders, entry, os.fstat(secret))
    except BaseException:
        os.close(secret)
        raise
    return secret


def _judge_opened(
    path: str,
    what: str,
    folders: list[tuple[str, os.stat_result]],
    entry: os.stat_result,
    found: os.stat_result,
) -> None:
    """``_open_secret``'s last look, at what it opened (``found``): the kernel's link in /proc
    is judged as opened; any other file was judged as ``entry`` before the open, and must be
    that file (only a user the verdict trusts could have swapped it, but it is checked). A
    folder is refused here, its descriptor closed (``open`` on it raised, leaving it open)."""
    if stat.S_ISDIR(found.st_mode):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))  # (IsADirectoryError)
    if stat.S_ISLNK(entry.st_mode):
        _refuse_replaceable(path, what, folders, found)
        _refuse_unseen_folder(path, what, found)
    elif (found.st_dev, found.st_ino) != (entry.st_dev, entry.st_ino):
        raise _Usage(f"{what} {path} changed while it was opened: give it again")


def _refuse_unseen_folder(path: str, what: str, found: os.stat_result) -> None:
    """The verdict on a secret given through a descriptor (``3</tmp/NAME``, ``</tmp/NAME``,
    ``-i -``): the folder the shell opened it in is not seen, so what the folder rules ask of
    it cannot be asked, and what they would refuse there is refused: another user's file (she
    could have made it first in /tmp: rev14, MEDIUM-1) and one with other names (a hard link
    another user made there: rev15, LOW-1). Given by its path, either is judged by its folders."""
    if found.st_uid not in (0, os.geteuid()):
        raise _Usage(
            f"{what} {path} belongs to another user (uid {found.st_uid}), and a descriptor does not "
            "show the folder it was opened in (anyone could have made it first in /tmp): give the "
            "file's path instead, where its folders are checked"
        )
    if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        raise _Usage(
            f"{what} {path} has other names, and a descriptor does not show the folder it was opened "
            "in (another user may have linked it into /tmp): give the file's path instead"
        )


def _procfs_device() -> int | None:
    """The device of /proc if procfs is mounted there, else None: in a chroot without it /proc is
    a folder like any other, and taking its device for procfs's made every folder of that
    filesystem "below /proc" (rev12, MEDIUM-1). Asked of a descriptor of this process: its
    link in /proc/self/fd must lead to what it is (``self`` naming this process's pid was wrong
    in a PID namespace sharing its parent's /proc, where ``<(...)`` was then refused; rev13)."""
    probe = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        if os.path.samestat(os.stat(f"/proc/self/fd/{probe}"), os.fstat(probe)):
            return os.stat("/proc").st_dev
    except OSError:
        pass
    finally:
        os.close(probe)
    return None


def _one_more_link(links: int) -> int:
    """``links`` + 1, the links a name went through, or ELOOP past the kernel's limit."""
    if links >= _MAX_LINKS:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    return links + 1


def _refuse_squatted(
    path: str, what: str, folder: tuple[str, os.stat_result], name: str, entry: os.stat_result
) -> None:
    """``_open_secret``'s verdict on ``name``, found in ``folder``: in a sticky folder (/tmp),
    where anyone may add names, one made by neither root, this process's user nor the folder's
    owner was put there by someone else, who chose what it is: a link and where it leads (the
    kernel's protected_symlinks, whatever the sysctl says), or a folder and all it holds, her
    own secret among them, which root would then use (rev13, MEDIUM-1). ``..`` is no name
    made in the folder."""
    where, held = folder
    if name != ".." and held.st_mode & stat.S_ISVTX and entry.st_uid not in (0, os.geteuid(), held.st_uid):
        raise _Usage(
            f"{what} {path} goes through {name}, which another user made in {where} (a folder "
            "anyone may add names to): they chose what it is"
        )


def _refuse_replaceable(
    path: str, what: str, folders: list[tuple[str, os.stat_result]], found: os.stat_result
) -> None:
    """``_open_secret``'s verdict on the folders the name went through and the file found."""
    trusted = {0, os.geteuid(), found.st_uid}
    for name, folder in folders:
        mode = stat.S_IMODE(folder.st_mode)
        if (mode & 0o022 and not mode & stat.S_ISVTX) or folder.st_uid not in trusted:
            whose = f"mode {mode:04o}" if folder.st_uid in trusted else f"owned by uid {folder.st_uid}"
            raise _Usage(
                f"{what} {path} could be replaced by other users: they can write in {name} "
                f"({whose}); keep it in folders only you (or root) can write in"
            )
    last, held = folders[-1]
    if held.st_mode & stat.S_ISVTX and stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        raise _Usage(
            f"{what} {path} has other names, and lies in {last}, a folder anyone may add names to:"
            " another user may have linked it there"
        )
    # (a file another user owns is used: she holds that secret anyway, as a service's key in
    # root's /etc/app; one she made first in a sticky folder is refused by _refuse_squatted,
    # and one given through a descriptor, whose folder is not seen, by _judge_opened)


def _keygen(args: argparse.Namespace) -> int:
    key = generate_key(256 if args.suite == "aes256" else 128)
    if args.output == "-":  # e.g. GCMSTREAM_KEY=$(gcmstream keygen -o -)
        _print_out(format_key(key))
        return EXIT_OK
    try:
        write_key_file(args.output, key, force=args.force)
    except FileExistsError:
        raise _Usage(f"{args.output} exists; use --force to overwrite it") from None
    return EXIT_OK


def _identity(args: argparse.Namespace) -> int:
    identity = Identity.generate(RecipientKind.X25519 if args.x25519 else RecipientKind.MLKEM768_X25519)
    if args.output == "-":  # as keygen -o -: the identity on stdout, its recipient on stderr
        _print_out(identity.to_text())
        _print_recipient_line(identity)
        return EXIT_OK
    try:
        write_identity_file(args.output, identity, force=args.force)
    except FileExistsError:
        raise _Usage(f"{args.output} exists; use --force to overwrite it") from None
    _print_recipient_line(identity)
    return EXIT_OK


def _print_recipient_line(identity: Identity) -> None:
    """The recipient (public key) on stderr, in the form of every stderr line ("gcmstream
    identity: "), whole: the key-text filter would hide the public key it is there to give."""
    print(
        _stderr_line("identity", f"recipient: {identity.recipient}", shown_as_is=True),
        file=sys.stderr,
        flush=True,
    )


def _kind_of_file(text: str) -> tuple[str, str] | None:
    """Which kind of gcmstream file ``text`` is, and the prefix of its lines that tells it:
    "identity" (an identity file may also name its recipient in a comment), "key",
    "recipients"; None."""
    for kind, prefix in (
        ("identity", IDENTITY_PREFIX),
        ("key", KEY_PREFIX),
        ("recipients", RECIPIENT_PREFIX),
    ):
        if prefix + ":" in text:
            return kind, prefix
    return None


# each kind of file: what its lines are, and the option that reads it
_FILE_KINDS = {
    "key": ("a key file", "give it with -k"),
    "identity": ("an identity file", "give it with -i"),
    "recipients": (
        "a recipients file",
        "it holds public keys: give it to 'encrypt -R'; decrypting needs the identity file it came from (-i)",
    ),
}


# `gcmstream recipient FILE` given another kind of file: what to do instead
_NOT_FOR_RECIPIENT = {
    "key": "a key is a shared secret and has no recipient: 'gcmstream identity' makes an identity "
    "file and prints its recipient line",
    "recipients": "it holds recipient lines already (public keys): give it to 'encrypt -R'; "
    "'gcmstream recipient' reads an identity file",
}


def _refuse_other_kind(path: str, text: str, wanted: str, command: str = "") -> None:
    """A file of another kind given where a ``wanted`` one goes (-k IDENTITYFILE, -R KEYFILE,
    -i KEYFILE, ``recipient`` RECIPIENTSFILE...): the usage error says what it is and what
    reads it. Before the private-file check: a recipients file is public, and chmod is not
    what it needs."""
    found = _kind_of_file(text)
    if found is None or found[0] == wanted:
        return
    kind, prefix = found
    what, where = _FILE_KINDS[kind]
    if command == "recipient":
        where = _NOT_FOR_RECIPIENT[kind]
    article = "an" if wanted == "identity" else "a"
    raise _Usage(f"{path} is {what} ({prefix}: line), not {article} {wanted} file: {where}")


def _read_identities(path: str, command: str) -> list[Identity]:
    """The identities in FILE ('-': stdin), one a line. A file that is no identity file at all
    given to -i is most likely an input, as -i meant before it meant --identity: say so."""
    try:
        text = _read_text(path, MAX_IDENTITY_FILE_SIZE, private="identity file")
        _refuse_other_kind(path, text, "identity", command)
        if IDENTITY_PREFIX not in text and RECIPIENT_PREFIX not in text and command != "recipient":
            raise _Usage(
                f"{path} is not an identity file (no {IDENTITY_PREFIX}: line): -i is short for "
                "--identity, as in age (before identity files, -i named the input); the file to "
                f"{command} is an argument of its own: gcmstream {command} [OPTIONS] {path}"
            )
        _check_private(path, "identity file")  # (the file read above, stdin too)
        return parse_identities(text)
    except RecipientError as exc:
        raise _Usage(f"identity file {path}: {exc}") from None
    except OSError as exc:
        raise _Usage(f"cannot read identity file {path}: {exc.strerror or exc}") from None


# What each file read by path (a key, identity, Tink keyset, recipients or passphrase file)
# was when it was read, by its path: the same-file rule compares OUT with that file, not with
# whatever the path leads to by the time OUT is renamed (``_files_open``)
_files_read_were: dict[str, os.stat_result] = {}


def _note_read(path: str, fd: int) -> None:
    """Record what ``path``, open as ``fd``, is as it is read (``_files_read_were``)."""
    _files_read_were[path] = os.fstat(fd)


def _read_text(path: str, limit: int, *, named: bool = False, private: str | None = None) -> str:
    """At most ``limit`` characters (and one more, to tell a longer file) of the UTF-8 text in
    FILE or, for '-', stdin (unless ``named``: then '-' is a file's name); an invalid byte
    becomes U+FFFD, as recipients.py reads files. ``private``: what the file is (a key file...),
    a secret opened by ``_open_secret``."""
    if path != "-" or named:
        source = path if private is None else _open_secret(path, private)  # (a file, never a folder)
        with open(source, encoding="utf-8", errors="replace") as file:
            _note_read(path, file.fileno())
            return file.read(limit + 1)
    fd, data = _stdin_fd(), b""
    if private is not None:  # (-i -: a secret on stdin, judged as any given through a descriptor)
        found = os.fstat(fd)
        _refuse_unseen_folder("on stdin", private, found)
        _files_read_were[path] = found
    while len(data) <= 4 * limit and (chunk := os.read(fd, 4 * limit + 4 - len(data))):
        data += chunk  # 4 bytes a character at most: enough to see a text over the limit
    return data.decode("utf-8", errors="replace")[: limit + 1]


def _recipient(args: argparse.Namespace) -> int:
    # stdout may be the identity file ('>> ID', '1<>ID'): the line would be written into it.
    # Looked at before it is read (the message) and once it is, as it was read
    _refuse_same_file(args)
    identities = _read_identities(args.identity_file, "recipient")
    _refuse_same_file(args)
    for identity in identities:
        _print_out(str(identity.recipient))
    return EXIT_OK


def _recipient_line_hint(line: str, exc: RecipientError) -> str:
    """Why -r's value is no recipient line, for age's habits: a file's name (age's -R is -R
    here too) or age's own recipient (age1...). The value itself is never repeated."""
    if os.path.lexists(line):
        return "names a file: -r takes a recipient line; give a file of them with -R FILE"
    if line.startswith(("age1", "ssh-")):
        return (
            "is an age recipient (age1... or ssh-...): gcmstream reads its own lines, "
            f"{RECIPIENT_PREFIX}:..., printed by 'gcmstream recipient IDENTITY_FILE'"
        )
    return str(exc)


def _read_recipients(args: argparse.Namespace, of_identities: list[Recipient]) -> list[Recipient]:
    """The recipients of -i identities, then -r's and -R's, all checked together."""
    recipients = list(of_identities)
    for number, line in enumerate(args.recipient, 1):
        try:
            recipients.append(Recipient.parse(line))
        except RecipientError as exc:
            raise _Usage(f"recipient {number} (-r): {_recipient_line_hint(line, exc)}") from None
    for path in args.recipients_file:
        try:
            text = _read_text(path, MAX_RECIPIENTS_FILE_SIZE)
            _refuse_other_kind(path, text, "recipients")
            recipients += parse_recipients_file(text)
        except RecipientError as exc:
            raise _Usage(f"recipients file {path}: {exc}") from None
        except (OSError, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _Usage(f"cannot read recipients file {path}: {reason}") from None
    try:  # too many, or post-quantum beside classic: refused before anything is read
        return check_recipients(recipients)
    except RecipientError as exc:
        raise _Usage(str(exc)) from None


def _read_passphrase(args: argparse.Namespace, *, encrypting: bool) -> str:
    """The passphrase from --passphrase-file or the terminal. Messages never quote it, nor a
    decoding error's byte and position (which would show part of it)."""
    if args.passphrase_file is not None:
        path = args.passphrase_file
        try:
            with open(_open_secret(path, "passphrase file"), "rb") as file:
                _note_read(path, file.fileno())
                _check_private(path, "passphrase file")
                line = file.readline(MAX_PASSPHRASE_SIZE + 2).rstrip(b"\r\n")
        except OSError as exc:
            if not os.path.lexists(path):  # not shown: a passphrase typed where its file's name
                # goes (also one over 255 bytes, "File name too long": rev16, LOW-3)
                raise _Usage(
                    "no file at the path given to --passphrase-file (not shown: it may be the "
                    "passphrase itself; --passphrase-file takes a file's name, --passphrase asks)"
                ) from None
            raise _Usage(f"cannot read passphrase file {path}: {exc.strerror or 'failed'}") from None
        if len(line) > MAX_PASSPHRASE_SIZE:
            raise _Usage(f"passphrase file {path}: its first line is over {MAX_PASSPHRASE_SIZE} bytes")
        if not line:
            raise _Usage(f"passphrase file {path}: its first line is empty")
        try:
            return line.decode("utf-8")
        except UnicodeError:
            raise _Usage(f"passphrase file {path}: its first line is not UTF-8 text") from None
    return _ask_passphrase(encrypting=encrypting)


def _ask_passphrase(*, encrypting: bool) -> str:
    """The passphrase typed on the terminal (twice to encrypt; left empty to encrypt: a
    generated one)."""
    if not _has_terminal():  # getpass falls back to stdin without one: stdin may be the data
        raise _Usage("no terminal to ask for a passphrase: use --passphrase-file FILE")
    import getpass  # here, not for every command

    try:
        passphrase = getpass.getpass("passphrase (empty: generate one): " if encrypting else "passphrase: ")
        if not passphrase and encrypting:
            return _generated_passphrase()
        if not passphrase:
            raise _Usage("empty passphrase")
        if encrypting and getpass.getpass("passphrase again: ") != passphrase:
            raise _Usage("the two passphrases differ")
    except UnicodeError:
        raise _Usage("the passphrase typed is not text in the terminal's encoding (UTF-8?)") from None
    return passphrase


# A generated passphrase: 24 characters drawn by `secrets` from 32 that cannot be misread (no
# 0/o, 1/l), 5 bits each: 120 bits, in groups of four for reading aloud or typing.
_PASSPHRASE_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # noqa: S105 - an alphabet, no secret
_PASSPHRASE_GROUPS, _PASSPHRASE_GROUP = 6, 4
_PASSPHRASE_BITS = _PASSPHRASE_GROUPS * _PASSPHRASE_GROUP * 5  # log2(32) bits a character


def _generated_passphrase() -> str:
    """A new random passphrase, printed once on stderr, as age does (the terminal's prompt
    was left empty); it is never written anywhere else."""
    import secrets

    groups = (
        "".join(secrets.choice(_PASSPHRASE_ALPHABET) for _ in range(_PASSPHRASE_GROUP))
        for _ in range(_PASSPHRASE_GROUPS)
    )
    passphrase = "-".join(groups)
    shown = (
        f"using the generated passphrase ({_PASSPHRASE_BITS} bits; it is shown only this once; its "
        f"hyphens are part of it): {passphrase}"
    )
    print(_stderr_line("encrypt", shown, shown_as_is=True), file=sys.stderr, flush=True)
    return passphrase


def _has_terminal() -> bool:
    """Whether this process has a controlling terminal (/dev/tty) to ask a passphrase on."""
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


def _keying(args: argparse.Namespace, *, encrypting: bool) -> Keying:
    """Sealer/Opener keywords from -k (or the environment), -r/-R or --identity, or a
    passphrase: exactly one of these ways; for a reader given none, the one its header names."""
    _one_reader_of_stdin(args)
    public = bool(args.identity) or (encrypting and bool(args.recipient or args.recipients_file))
    secret = args.passphrase or args.passphrase_file is not None
    option = "-r/-R/-i" if encrypting else "-i/--identity"
    if public + secret + (args.key_file is not None) > 1 or (args.passphrase and args.passphrase_file):
        raise _Usage(_ways_given(args, option, encrypting=encrypting))
    if public and encrypting:
        return {"recipients": _read_recipients(args, [i.recipient for i in _identities(args)])}
    if public:
        return {"identities": _identities(args)}
    if secret:
        if encrypting:  # checked before the passphrase is asked for
            _check_work_factor(args.work_factor)
        passphrase = _read_passphrase(args, encrypting=encrypting)
        if encrypting and len(passphrase) < MIN_PASSPHRASE_CHARACTERS:
            _warn_short_passphrase()
        return {"passphrase": passphrase}
    if args.key_file is None and KEY_ENV not in os.environ and not encrypting:
        if args.command == "info":  # what the header claims, shown as not verified; nothing asked
            return {}
        return _what_the_header_asks_for(args)
    if args.key_file is None and KEY_ENV not in os.environ:  # encrypt given no way of keying
        raise _Usage(
            f"no key: give -k KEYFILE or set {KEY_ENV}, -r RECIPIENT or -R FILE, or --passphrase "
            "or --passphrase-file FILE (see gcmstream encrypt --help)"
        )
    return {"key": _load_key(args.key_file)}


def _ways_given(args: argparse.Namespace, option: str, *, encrypting: bool) -> str:
    """Two ways of keying given at once: which were given (flags only, never a value), and the
    one way each reader takes."""
    given = [
        flag
        for flag, value in (
            ("-k", args.key_file is not None),
            ("-i", bool(args.identity)),
            ("-r", encrypting and bool(args.recipient)),
            ("-R", encrypting and bool(args.recipients_file)),
            ("--passphrase", args.passphrase),
            ("--passphrase-file", args.passphrase_file is not None),
        )
        if value
    ]
    both = f"{', '.join(given[:-1])} and {given[-1]} were given together"
    if encrypting:
        return f"{both}: give one of -k, {option} (these together), --passphrase or --passphrase-file"
    return (
        f"{both}: a file is sealed one way, so give one of -k, {option}, --passphrase or "
        "--passphrase-file (without any, the file's header names the one it needs)"
    )


def _warn_short_passphrase() -> None:
    """Said on stderr, once, without the passphrase or its length."""
    warning = (
        f"warning: the passphrase is shorter than {MIN_PASSPHRASE_CHARACTERS} characters, the "
        "least NIST SP 800-63B-4 asks of a password used alone: whoever gets the file can guess it "
        "offline, scrypt only slows each guess (left empty at the prompt, a 120-bit one is generated)"
    )
    print(_stderr_line("encrypt", warning), file=sys.stderr, flush=True)


def _check_work_factor(work_factor: int) -> None:
    if work_factor < MIN_WORK_FACTOR:
        raise _Usage(
            f"--work-factor {work_factor}: at least {MIN_WORK_FACTOR}, or the passphrase is cheap to guess"
        )
    try:
        check_work_factor(work_factor)
    except ValueError as exc:
        raise _Usage(f"--work-factor: {exc}") from None


def _one_reader_of_stdin(args: argparse.Namespace) -> None:
    """stdin is read once: by INPUT, -R -, or -i -, never two of them."""
    readers = [f"-i {p}" for p in args.identity if p == "-"]
    readers += [f"-R {p}" for p in getattr(args, "recipients_file", []) if p == "-"]
    if getattr(args, "input", None) == "-":
        readers.append("INPUT (absent or '-')")
    if len(readers) > 1:
        raise _Usage(f"stdin is read by both {readers[0]} and {readers[1]}: give the input as a file")


def _identities(args: argparse.Namespace) -> list[Identity]:
    identities = [each for path in args.identity for each in _read_identities(path, args.command)]
    if len(identities) > MAX_IDENTITIES:
        raise _Usage(f"{len(identities)} identities (-i/--identity): at most {MAX_IDENTITIES} are tried")
    return identities


def _what_the_header_asks_for(args: argparse.Namespace) -> Keying:
    """No key, identity or passphrase given to decrypt: the header of the file says which it
    needs; a passphrase is asked for on the terminal, the others are named."""
    path = args.input
    where = "the input" if path == "-" else path
    sealing = _sealed_with(path)
    if sealing == "passphrase":
        if _has_terminal():
            return {"passphrase": _read_passphrase(args, encrypting=False)}
        raise _Usage(
            f"{where} is encrypted with a passphrase: give --passphrase (asked on the terminal) "
            "or --passphrase-file FILE"
        )
    if sealing == "recipients":
        raise _Usage(f"{where} is encrypted to recipients: give -i/--identity FILE")
    if sealing is not None:
        raise _Usage(
            f"no key: {where} is encrypted with a key: give -k KEYFILE or set {KEY_ENV} "
            f"(see gcmstream {args.command} --help)"
        )
    raise _Usage(
        f"no key: give -k KEYFILE or set {KEY_ENV}; for a file encrypted to you or with a "
        "passphrase, -i/--identity FILE, --passphrase or --passphrase-file FILE "
        f"(see gcmstream {args.command} --help)"
    )


def _sealed_with(path: str) -> str | None:
    """How the header of the encrypted file at ``path`` says it was sealed (``format.sealed_with``),
    None when it cannot be told: no regular file (a pipe is not read ahead: its bytes would be
    gone) or no gcmstream header (the command itself then says what is wrong). Unverified:
    it names the option to give, it decides nothing."""
    return _at_header_of(path, _sealed_at)


def _at_header_of(path: str, read: Callable[[int, int | None], _T]) -> _T | None:
    """``read(fd, at)`` of the header of the file at ``path`` (stdin too), read again after a
    command failed on it: ``at`` is None unless it is a regular file; None if it cannot be
    opened or read."""
    try:  # a FIFO is not opened: that would let its writer start, then see this end close
        if path != "-" and not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = _stdin_fd() if path == "-" else os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return read(fd, os.lseek(fd, 0, os.SEEK_CUR) if _regular_size(fd) is not None else None)
    except OSError:
        return None
    finally:
        if path != "-":
            os.close(fd)


def _key_id_altered_in(path: str, keying: Keying, context: bytes) -> bool:
    """``_key_id_altered_at`` for the file at ``path``."""
    return _at_header_of(path, partial(_key_id_altered_at, keying=keying, context=context)) or False


def _key_id_altered_at(fd: int, at: int | None, keying: Keying, context: bytes) -> bool:
    """Whether the header at offset ``at`` of the regular file ``fd``, whose key ID names no
    key given (H10), fits the key given once its key ID is that key's: the commitment
    (docs/FORMAT.md 5.1) covers the key ID, the key and the context, so it then verifies only
    if the header was sealed under this key and context and its key ID alone was altered.
    It words the message only: the header is refused either way (H10)."""
    from .format import KEY_ID_SIZE, SALT_SLICE, Suite, key_id, verify_commitment

    key = keying.get("key")
    if at is None or not isinstance(key, bytes):
        return False
    try:
        os.lseek(fd, at, os.SEEK_SET)
        start, _ = _unverified_header(fd)
        if Suite.for_key(key) != start.suite:
            return False
        header = bytearray(_binary_start(fd, start.size))
        header[SALT_SLICE.start - KEY_ID_SIZE : SALT_SLICE.start] = key_id(key)  # 4.1: before the salt
        verify_commitment(key, bytes(header), context)
    except (OSError, ValueError, ProtocolError):  # (a short read: the header check refuses it)
        return False
    return True


def _sealed_at(fd: int, at: int | None) -> str | None:
    """``_sealed_with`` for the header at offset ``at`` of the regular file ``fd`` the command
    has open (None: no regular file, nothing to read again); ``fd``'s position is moved."""
    if at is None:
        return None
    try:
        os.lseek(fd, at, os.SEEK_SET)
        return sealed_with(_unverified_header(fd)[1])
    except (OSError, ProtocolError):
        return None


def _unverified_header(
    fd: int, read: Callable[[int, int], bytes] | None = None
) -> tuple[HeaderStart, tuple[tuple[int, bytes], ...]]:
    """The fixed part and the fields of a file's header at the position of the regular file
    ``fd`` (not consumed; ``read(fd, size)`` gives its first bytes: binary or armored, by
    default), checked for form as every reader of a file checks them, with or without a key:
    H1..H7 and H13, H9 (a file's role is ONE_WAY), and H7's bound for the sealing the fields
    claim (a key's header: ``MAX_FIELDS_SIZE``), so that no header a keyed reader refuses by
    its form passes here. Nothing in them is verified: anyone can write them."""
    read = read or _binary_start
    head = read(fd, HEADER_FIXED_SIZE)
    if len(head) < HEADER_FIXED_SIZE:
        check_header_start(head)  # another format's short start is that format's (H1, H2)
        raise TruncatedStreamError(
            f"input ended inside the stream header ({len(head)} bytes)", in_header=True
        )
    start = parse_header_start(head, MAX_STANZA_FIELDS_SIZE)
    check_role(start, Role.ONE_WAY)  # a channel's header is no file's
    whole = read(fd, start.size)
    if len(whole) < start.size:
        raise TruncatedStreamError(
            f"input ended inside the stream header ({len(whole)} of {start.size} bytes)", in_header=True
        )
    fields = parse_fields(whole[HEADER_FIXED_SIZE : HEADER_FIXED_SIZE + start.fields_length])
    if sealed_with(fields) == "key":  # no stanza: the bound of a key's reader (H7)
        check_fields_length(start, MAX_FIELDS_SIZE)
    return start, fields


def _binary_only(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of the regular file ``fd`` from its position, as they are:
    armored text is left to ``check_header_start`` to refuse, as a seeking reader does."""
    return os.pread(fd, size, os.lseek(fd, 0, os.SEEK_CUR))


# Each sealing as `info` without a key shows it and a key given in its place is told: how the
# header says the stream was sealed, and what reads it
_SEALED_WORDS = {
    "key": ("with a key", f"-k KEYFILE or {KEY_ENV}"),
    "recipients": ("to recipients (its header holds recipient stanzas)", "-i IDENTITY_FILE (--identity)"),
    "passphrase": (
        "with a passphrase (its header holds a passphrase stanza)",
        "--passphrase or --passphrase-file FILE",
    ),
}


def _binary_start(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of the binary file in the regular file ``fd`` (from its
    position), decoded if it holds the armored form; not consumed."""
    at = os.lseek(fd, 0, os.SEEK_CUR)
    text = os.pread(fd, len(BEGIN_LINE), at)
    if not is_armored(text):
        return os.pread(fd, size, at)
    # base64 lines of 48 bytes each, 66 characters at most with CRLF, after the begin line
    text = os.pread(fd, len(BEGIN_LINE) + 2 + (size // 48 + 1) * 66, at)
    return ArmorDecoder().feed(text)[:size]


# -- files, stdin, stdout ---------------------------------------------------------------------

# A pipe, FIFO or terminal can leave an open, read or write blocked for ever. The file engine
# polls its input, so it sees a stop while it waits to read; a write blocked on a reader that
# stopped reading is given up after _PIPE_STOP_WAIT, an open at once. Once a worker was
# abandoned the process leaves with os._exit (a blocked thread would hold up a normal exit).
_abandoned_io: list[bool] = []
# Seconds a stopped engine writing to a pipe, terminal or FIFO (no temporary file) gets to leave
# before it is given up: several polls of its input (files.py) and a record or two of work.
_PIPE_STOP_WAIT = 0.1


async def _blocking(call: Callable[..., _T], *args: Any) -> _T:
    try:
        return await to_thread.run_sync(call, *args, abandon_on_cancel=True)
    except Exception:
        raise  # the call itself failed (a missing file...): its thread is done, nothing is left
    except BaseException:
        _abandoned_io.append(True)  # cancelled (a signal): the thread may still be blocked
        raise


class _OutputClosed(Exception):
    """Whoever read our output went away (EPIPE): leave quietly, as cat does."""


def _fd_writer(fd: int) -> Callable[[memoryview], Awaitable[None]]:
    async def write(view: memoryview) -> None:
        while view:
            try:
                view = view[await _blocking(os.write, fd, view) :]
            except BrokenPipeError:
                raise _OutputClosed from None

    return write


def _closed(name: str) -> OSError:
    return OSError(errno.EBADF, f"{name} is closed")


def _standard_fd(stream: TextIO | None, name: str) -> int:
    """The descriptor of stdin or stdout. A shell's ``<&-`` or ``>&-`` closes it: Python then
    makes ``sys.stdin`` or ``sys.stdout`` None (and fd 0 or 1 may become a file this process
    opens later), so say it, as an I/O error."""
    try:
        if stream is None:
            raise _closed(name)
        fd = stream.fileno()
        os.fstat(fd)
    except (OSError, ValueError):
        raise _closed(name) from None
    return fd


def _stdin_fd() -> int:
    return _standard_fd(sys.stdin, "stdin")


def _stdout_fd() -> int:
    return _standard_fd(sys.stdout, "stdout")


def _print_out(text: str) -> None:
    """A command's one line of output (a key, an identity, a recipient, info) on stdout.
    print() would drop it silently when the shell closed stdout (Python's sys.stdout is then
    None); a write to a descriptor that failed raises its own OSError."""
    stdout: TextIO | None = sys.stdout
    if stdout is None:
        raise _closed("stdout")
    try:
        stdout.write(text + "\n")
        stdout.flush()
    except BrokenPipeError:  # `gcmstream recipient F | true`: quiet, as cat
        raise _OutputClosed from None


def _regular_size(fd: int) -> int | None:
    st = os.fstat(fd)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _si(count: float) -> str:
    """Bytes in decimal units, as the progress bar shows them."""
    if count < 1000:
        return f"{int(count)} B"
    units = ("kB", "MB", "GB", "TB")
    step = 0
    count /= 1000
    while count >= 999.95 and step < len(units) - 1:
        count /= 1000
        step += 1
    return f"{count:.1f} {units[step]}"


class _Progress:
    """A tqdm bar on stderr, only when stderr is a terminal and the input size is known;
    it ends with a one-line summary. (No dataclass: dataclasses costs --help 8 ms.)"""

    def __init__(self, bar: Any = None, desc: str = "", done: int = 0, started: float = 0.0) -> None:
        self.bar, self.desc, self.done, self.started = bar, desc, done, started

    @classmethod
    def start(cls, total: int | None, desc: str, quiet: bool) -> _Progress:
        if quiet or total is None or not sys.stderr.isatty():
            return cls()
        from tqdm import tqdm

        bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1000,  # kB, MB and MB/s: one unit system, like the summary
            file=sys.stderr,
            leave=False,
            dynamic_ncols=True,
        )
        return cls(bar, desc, 0, time.monotonic())

    def update(self, count: int) -> None:
        self.done += count
        self.bar.update(count)

    @property
    def callback(self) -> Callable[[int], object] | None:
        return self.update if self.bar is not None else None

    def close(self, *, summary: bool = False) -> None:
        if self.bar is None:
            return
        self.bar.close()
        self.bar = None
        if summary:
            seconds = max(time.monotonic() - self.started, 1e-6)
            rate = _si(self.done / seconds)
            line = _stderr_line(self.desc, f"{_si(self.done)} in {seconds:.2f} s ({rate}/s)")
            print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _open_input(path: str) -> Iterator[tuple[int, int | None]]:
    """(fd, size if a regular file) of IN; opening a FIFO waits for a writer, so a stop gives
    it up at once."""
    if path == "-":
        stdin = _stdin_fd()
        yield stdin, _regular_size(stdin)
        return
    with _file_run.step(0):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # named here: a read would only say "fd 6"
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        yield fd, _regular_size(fd)
    finally:
        os.close(fd)


def _files_read(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(what, path) of every file a file command reads: INPUT, the key, identity, recipients
    and passphrase files ('-': stdin); recipient's identity file, listen's and connect's key."""
    read = [("input file", getattr(args, "input", None) or getattr(args, "file", None))]
    read += [("key file", getattr(args, "key_file", None))]
    read += [("identity file", path) for path in getattr(args, "identity", [])]
    read += [("identity file", getattr(args, "identity_file", None))]  # recipient's
    read += [("recipients file", path) for path in getattr(args, "recipients_file", [])]
    read += [("passphrase file", getattr(args, "passphrase_file", None))]
    return [(what, path) for what, path in read if path is not None]


def _refuse_same_file(args: argparse.Namespace) -> None:
    """OUT (-o, or stdout) being a file the command reads (INPUT, a key, identity, recipients
    or passphrase file) would replace it (the output is renamed over it at the end), or, for
    stdout, read what the shell's '>' emptied or what '>>' keeps growing, or (a FIFO, a block
    device) read back what is written: refuse, as cp and cat do, before anything is read or
    written. The rule is the library's (``_output.refuse_same_file``: a regular file, a FIFO
    or a block device; never /dev/null or a socket); the message is the command line's. It is
    applied again to what is open (``_open_output``): a name may lead elsewhere by then."""
    from ._output import refuse_same_file

    target = getattr(args, "output", "-")  # (info, recipient, listen, connect: stdout)
    with _same_file_usage(target, give_output=hasattr(args, "output") or args.command == "info"):
        refuse_same_file(1 if target == "-" else target, _files_open(args, None))


def _files_open(args: argparse.Namespace, source: int | None) -> list[FileRead]:
    """``_files_read`` for the rule: stdin as descriptor 0, INPUT as the descriptor ``source``
    it is read through, once it is open, and any other file as it was when it was read
    (``_note_read``): its name may lead elsewhere by now."""
    read: list[FileRead] = []
    for what, path in _files_read(args):
        if what == "input file" and source is not None:
            read.append((what, source) if path == "-" else (what, path, source))
        elif what != "input file" and path in _files_read_were:
            read.append((what, path, _files_read_were[path]))
        else:
            read.append((what, 0 if path == "-" else path))
    return read


@contextlib.contextmanager
def _same_file_usage(output: str, *, give_output: bool = True) -> Iterator[None]:
    """The rule's SameFileError in the command line's words (a usage error: exit 2).
    ``give_output``: the command has -o to suggest (recipient, listen, connect have not)."""
    from .errors import SameFileError

    try:
        yield
    except SameFileError as same:
        path = "-" if isinstance(same.path, int) else same.path
        raise _Usage(_same_file_message(same.what, path, output, give_output=give_output)) from None


def _same_file_message(what: str, path: str, output: str, *, give_output: bool = True) -> str:
    if output != "-":
        if path == "-" or path.startswith(("/dev/", "/proc/")):  # `-o F < F`, `-o F /dev/stdin < F`
            shown = "stdin" if path == "-" else _printable(path)
            read = shown if what == "input file" else f"{shown} ({what})"
            return f"{read} is {_printable(output)}, the output: give another -o"
        if what == "input file":
            return f"{_printable(path)} is both the input and the output: give another -o"
        return f"{_printable(path)} is both the {what} and the output: give another -o"
    read = "stdin" if path == "-" else _printable(path)
    if stat.S_ISREG(os.fstat(1).st_mode):
        import fcntl  # (POSIX; only here, when stdout is the file read)

        flags = fcntl.fcntl(1, fcntl.F_GETFL)
        if flags & os.O_APPEND:
            done = "with '>>' what is written would be appended to what is read"
        elif flags & os.O_ACCMODE == os.O_RDWR:  # '1<>F': opened, not emptied
            done = "what is written would overwrite what is read"
        else:
            done = "with '>' the shell already emptied it"
    else:  # a FIFO or a block device, written in place
        done = "what is written would be read back"
    elsewhere = "redirect stdout elsewhere or give -o" if give_output else "redirect stdout elsewhere"
    return f"the output (stdout) is the {what}, {read}: nothing read ({done}); {elsewhere}"


@contextlib.contextmanager
def _open_output(
    path: str, mode: int, *, no_terminal: bool = False, read: Sequence[FileRead] = ()
) -> Iterator[int]:
    """A descriptor of OUT: stdout, a file replaced atomically (``files.atomic_fd``: committed
    only if the block ends normally and no stop came), or (a FIFO, a device) in place.
    ``no_terminal``: a terminal is refused (usage), told by the descriptor opened, after the
    one rule of where an output may go decided (a path is never opened before). OUT must be
    none of the files ``read`` (``_files_open``) as they are now: when it is decided, and
    just before the rename."""
    from ._output import refuse_same_file

    with _same_file_usage(path):
        if path == "-":
            stdout = _stdout_fd()
            refuse_same_file(stdout, read)
            if no_terminal and os.isatty(stdout):
                raise _Usage(_NO_TERMINAL)
            yield stdout
            return
        # refuses what others planted, and a /dev/fd/N this process opened itself
        destination = output_target(path, given=_descriptors_given)
        with contextlib.ExitStack() as opened:
            # opening a FIFO waits for its reader: a stop gives the wait up at once; a temporary
            # file is created (and, at the end, renamed or removed) whole, however long a stop
            # waits
            with _file_run.step(0 if destination.in_place else None):
                out = opened.enter_context(atomic_fd(destination, mode=mode, stop=_file_run.stop, read=read))
            if no_terminal and os.isatty(out):
                raise _Usage(_NO_TERMINAL)
            yield out


_NO_TERMINAL = "refusing to write ciphertext to a terminal: use -o FILE or redirect stdout"


# errors that only a write gives (a full disk or quota, a file over its size limit): the
# engine's error then names OUT, as "gcmstream encrypt: /dev/full: No space left on device"
_WRITE_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def _run_engine(work: Callable[..., None], out: int, output: str) -> None:
    """The file engine (``gcmstream.files``) writing to ``out`` (in the command's worker
    thread); a signal or Ctrl-C stops it within one read or one poll of an idle input, or
    gives it up if it is blocked writing to a pipe or terminal nobody reads: after
    ``_PIPE_STOP_WAIT`` when ``out`` is no regular file (stdout, a FIFO: no temporary file the
    worker may still be writing, so nothing to wait for), else after ``STOP_WAIT``."""
    in_place = not stat.S_ISREG(os.fstat(out).st_mode)
    try:
        with _file_run.step(_PIPE_STOP_WAIT if in_place else STOP_WAIT):
            work(stop=_file_run.stop)
    except BrokenPipeError:
        raise _OutputClosed from None
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            exc.filename = "stdout" if output == "-" else output
        raise


def _record_limit_error(command: str, size: int, limit: int, where: str) -> _Fail:
    return _Fail(
        EXIT_RECORD_LIMIT,
        f"{where} announces records of {_size_text(size)}, over {command}'s limit of "
        f"{_size_text(limit)}: if you trust it, rerun with --max-record-size {_size_text(size)}",
    )


def _jobs_for(args: argparse.Namespace, source: int, out: int, size: int | None) -> int:
    """--jobs, or the default for an input of ``size`` bytes (None: not a regular file). The
    engine itself keeps to one worker where records cannot go to their places (pipes); a
    --jobs N over 1 it will not use is said on stderr (``_jobs_unused``): by encrypt here,
    its key and input accepted already; by decrypt once the header authenticated
    (``_jobs_said``)."""
    from .files import default_jobs

    if args.command == "encrypt" and (args.jobs or 1) > 1:
        _jobs_unused(args, _one_worker_reason(args, source, out))
    return args.jobs if args.jobs is not None else default_jobs(size)


def _jobs_said(args: argparse.Namespace, source: int, out: int) -> Callable[[str], None]:
    """decrypt's ``one_worker``: the engine's reason for one worker, told once the header
    authenticated, in the command line's words where they name more (stdout, the input),
    found now: before the engine reads (armor is told from the input's first bytes)."""
    known = _one_worker_reason(args, source, out)
    return lambda why: _jobs_unused(args, known or why)


def _one_worker_reason(args: argparse.Namespace, source: int, out: int) -> str | None:
    """``files.one_worker_reason`` (the engine's rule) in the command line's words: stdin,
    stdout and the paths given; None when the engine places records (a file without the
    fixed layout is found only as it is read)."""
    return one_worker_reason(
        source,
        out,
        opening=args.command == "decrypt",
        eager=args.command == "decrypt" and args.output == "-",  # as decrypt_fd is called
        armor=getattr(args, "armor", False),
        names=("stdin" if args.input == "-" else args.input, "stdout" if args.output == "-" else args.output),
    )


def _jobs_unused(args: argparse.Namespace, reason: str | None) -> None:
    """An explicit --jobs N (N > 1) that one worker replaces, said once on stderr, not refused:
    the output is the same bytes, only slower than asked for, and a script that gives --jobs
    to every call (some to stdout) keeps working."""
    if reason is not None and (getattr(args, "jobs", None) or 1) > 1:
        line = _stderr_line(args.command, f"--jobs {args.jobs} ignored: {reason}")
        bars = sys.modules.get("tqdm")  # a progress bar drawn already: the line goes above it
        with contextlib.suppress(OSError):
            if bars is not None:
                bars.tqdm.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)


def _encrypt_command(args: argparse.Namespace, keying: Keying) -> None:
    if "passphrase" in keying:
        keying = {**keying, "work_factor": args.work_factor}
    sealer = new_sealer(context=args.context, record_size=args.record_size, fixed_layout=True, **keying)
    with _open_input(args.input) as (source, size):
        progress = _Progress.start(size, "encrypt", args.quiet)
        try:
            with _open_output(
                args.output, args.mode, no_terminal=not args.armor, read=_files_open(args, source)
            ) as out:
                jobs = _jobs_for(args, source, out, size)
                work = partial(
                    encrypt_fd, source, out, sealer, progress=progress.callback, armor=args.armor, jobs=jobs
                )
                _run_engine(work, out, args.output)
        except BaseException:
            progress.close()
            raise
        progress.close(summary=True)


def _decrypt_command(args: argparse.Namespace, keying: Keying) -> None:
    if args.offset is not None or args.length is not None:
        _decrypt_range_command(args, keying)
        return
    opener = new_opener(context=args.context, max_record_size=args.max_record_size, **keying)
    where = "the input" if args.input == "-" else args.input

    def verdict(exc: BaseException, source: int, header_at: int | None) -> _Fail | None:
        return _header_verdict(
            exc,
            "decrypt",
            where,
            key_from=_key_source(args),
            sealed=partial(_sealed_at, source, header_at),
            key_id_altered=partial(_key_id_altered_at, source, header_at, keying, args.context),
        )

    _decrypt_through(
        args,
        opener,
        lambda source, out, size: (_jobs_for(args, source, out, size), _jobs_said(args, source, out)),
        verdict,
    )


def _decrypt_through(
    args: argparse.Namespace,
    opener: Opener | TinkOpener,
    workers: Callable[[int, int, int | None], tuple[int, Callable[[str], None]]],
    verdict: Callable[[BaseException, int, int | None], _Fail | None],
) -> None:
    """decrypt's one path, either format: INPUT through ``opener`` into OUT (stdout record by
    record, a file atomically), with the progress bar. ``workers(source, out, size)``: the
    --jobs count and what says a count that is not used; ``verdict(exc, source, header_at)``:
    the failure worded for the input (None: raised as it is), ``header_at`` the header's
    offset in a regular input (None: not one, it cannot be read again)."""
    with _open_input(args.input) as (source, size):
        header_at = os.lseek(source, 0, os.SEEK_CUR) if size is not None else None
        progress = _Progress.start(size, "decrypt", args.quiet)
        try:
            with _open_output(args.output, args.mode, read=_files_open(args, source)) as out:
                jobs, one_worker = workers(source, out, size)
                # to stdout: pass each record on as it authenticates; to a file: gather
                work = partial(
                    decrypt_fd,
                    source,
                    out,
                    opener,
                    eager=args.output == "-",
                    progress=progress.callback,
                    jobs=jobs,
                    one_worker=one_worker,
                )
                _run_engine(work, out, args.output)
        except BaseException as exc:
            progress.close()
            fault = verdict(exc, source, header_at)
            if fault is None:
                raise
            raise fault from None
        progress.close(summary=True)


def _seekable_input(path: str) -> str:
    if path != "-":
        return path
    if _regular_size(_stdin_fd()) is None:
        raise _Usage(
            "--offset and --length need a file to seek in: give INPUT as a file (stdin is not a file)"
        )
    return "/dev/stdin"


@contextlib.contextmanager
def _open_regular_input(path: str) -> Iterator[int]:
    """A descriptor of the regular file ``path`` (``seekable.open_regular``: anything else is
    refused, a FIFO without waiting)."""
    from .seekable import open_regular

    fd = open_regular(path)
    try:
        yield fd
    finally:
        os.close(fd)


def _copy_range(
    source: int, out: int, args: argparse.Namespace, keying: Keying, stop: threading.Event | None = None
) -> None:
    """Write the plaintext range [offset, offset + length) of the encrypted file open as
    ``source`` (read through that descriptor: no /proc or /dev/fd needed)."""
    with open_file(source, context=args.context, max_record_size=args.max_record_size, **keying) as file:
        # said once the header and the FINAL record authenticated: never before a refusal
        _jobs_unused(args, "--offset and --length read the records they touch in one worker")
        offset = args.offset or 0
        end = file.length if args.length is None else min(file.length, offset + args.length)
        remaining = max(0, end - offset)
        file.seek(offset)
        buf = memoryview(bytearray(min(CHUNK_SIZE, remaining)))
        while remaining:
            check_stop(stop)
            got = file.readinto(buf[: min(len(buf), remaining)])
            if not got:
                break
            view = buf[:got]
            while view:
                view = view[os.write(out, view) :]
            remaining -= got


def _header_verdict(
    exc: BaseException,
    command: str,
    where: str,
    seeks: str = "",
    key_from: str = "",
    sealed: Callable[[], str | None] | None = None,
    key_id_altered: Callable[[], bool] = lambda: False,
) -> _Fail | None:
    """The message of a fault of the input for ``decrypt``, ``decrypt --offset`` and ``info``
    alike, naming the file; None for any other failure (and for a fault of stdin past its
    header). The exit status is the one the class has in ``_FAILURES``. ``seeks``: what needs
    the binary file (info, --offset), said of armored input. ``key_from``: where a key given
    came from (``_key_source``), named when the header does not name it. ``sealed``: how the
    header says it was sealed, from the input the command has open (default: ``where`` read
    again by name, a file; stdin is not). ``key_id_altered``: whether the key given fits the
    header but for its key ID (``_key_id_altered_at``)."""
    fault = _leaf(exc)
    if not isinstance(fault, ProtocolError):
        return None
    code = _classify(fault)[0]
    if isinstance(fault, UnknownKeyError):  # from the 62 fixed bytes alone, on every path
        if sealed is None:
            sealed = partial(_sealed_with, where) if where != "the input" else lambda: None
        return _unknown_key_verdict(where, key_from, sealed(), key_id_altered)
    if isinstance(fault, ArmoredInputError) and seeks:  # info, --offset: binary files only
        return _Fail(
            code,
            f"{where} is armored text ('encrypt -a'): {seeks} the binary file to seek in; "
            f"'gcmstream decrypt' reads armor whole; the binary file: {_DEARMOR_IN_A_SHELL}",
        )
    if isinstance(fault, RecordTooLargeError) and fault.rule == "H8":
        return _Fail(code, _record_limit_error(command, fault.size, fault.limit, where).message)
    if isinstance(fault, (MalformedHeaderError, StanzaError)):
        return _Fail(code, f"{where} has a corrupt stream header: {fault}")
    # a cut input is named as one, stdin too: the Opener's words speak of a sender
    if isinstance(fault, TruncatedArmorError):
        return _Fail(code, f"truncated input: {where} ends before its armor's end line: it was cut short")
    if isinstance(fault, TruncatedStreamError):
        ends = "inside its stream header" if fault.in_header else "before its FINAL record"
        return _Fail(code, f"truncated input: {where} ends {ends}: it was cut short")
    if where == "the input":  # stdin: no file to name, the error's own words
        return None
    return _Fail(code, f"{where}: {_classify(fault)[1]}")  # wrong key or context, tampered


# armor's strict form (docs/FORMAT.md 12) is a begin line, standard base64 in lines, an end line:
# no gcmstream command writes the binary file back, the shell's tools do (tests/test_cli_armor.py)
_DEARMOR_IN_A_SHELL = "sed '1d;$d' FILE.asc | base64 -d > FILE.gcms (in Python, gcmstream.armor.dearmor)"


def _unknown_key_verdict(
    where: str, key_from: str, sealed: str | None, key_id_altered: Callable[[], bool]
) -> _Fail:
    """H10: a key ID that names no key given; an altered one where the key fits (4, as H11)."""
    if sealed == "key" and key_id_altered():
        return _Fail(
            EXIT_TAMPERED,
            f"{where} has a corrupt stream header: its key ID was altered (it names another key, "
            "but the key given and the context verify the rest of the header, its commitment)",
        )
    return _Fail(EXIT_WRONG_KEY, _key_not_named(where, key_from, sealed))


def _key_not_named(where: str, key_from: str, sealed: str | None) -> str:
    """A key the header does not name (H10): a file ``sealed`` to recipients or a passphrase
    (None: not known) is named as such, with the option that reads it; a key that came from
    the environment, not the command line, is said to have come from there. (The Opener
    refuses the key at the header's 62 fixed bytes, before its fields are read: which stanza
    field follows is read here, unverified, only to word the message.)"""
    given = f" ({key_from})" if key_from else ""
    if sealed in ("recipients", "passphrase"):
        sealed_how, reads_it = _SEALED_WORDS[sealed]
        return f"{where} is sealed {sealed_how}, not with a key: give {reads_it} instead of a key{given}"
    if sealed == "key":
        return f"{_WRONG_KEY_OR_ALTERED}: {where} names (by its key ID) a key that was not given{given}"
    return (
        f"{_WRONG_KEY_OR_ALTERED}: {where} names (by its key ID) a key that was not given{given}; "
        "a file sealed to recipients or with a passphrase is read with --identity or "
        "--passphrase[-file]"
    )


# H10 (a key ID that names no key given) from the fixed part alone: a key ID altered in transit
# and a wrong key look the same there (the commitment that tells them apart comes later)
_WRONG_KEY_OR_ALTERED = "wrong key, or the header's key ID was altered"


def _key_source(args: argparse.Namespace) -> str:
    """Where the key a reader was given came from, when the user may not know it was given:
    the environment (``-k`` names its file on the command line itself)."""
    if args.key_file is None and KEY_ENV in os.environ:
        return f"the key came from {KEY_ENV}; unset it to give none, e.g. env -u {KEY_ENV} gcmstream ..."
    return ""


def _decrypt_range_command(args: argparse.Namespace, keying: Keying) -> None:
    path = _seekable_input(args.input)
    try:
        # INPUT is opened before OUT, and read through that descriptor (the kernel's link to
        # it), so the rule compares OUT with the file being read: its name moved onto OUT's
        # meanwhile was replaced by the rename, exit 0, the ciphertext gone (a hostile review)
        with (
            _open_regular_input(path) as source,
            _open_output(args.output, args.mode, read=_files_open(args, source)) as out,
        ):
            work = partial(_copy_range, source, out, args, keying)
            _run_engine(work, out, args.output)
    except BaseException as exc:
        where = "the input" if args.input == "-" else args.input
        verdict = _header_verdict(
            exc,
            "decrypt",
            where,
            seeks="--offset and --length need",
            key_from=_key_source(args),
            key_id_altered=partial(_key_id_altered_in, args.input, keying, args.context),
        )
        if verdict is None:
            raise
        raise verdict from None


def _describe(path: str, args: argparse.Namespace, keying: Keying) -> str:
    with open_file(path, context=args.context, max_record_size=args.max_record_size, **keying) as file:
        header = file.header
        suite = header.suite.name.replace("_", "-")
        if file.fixed_layout:
            layout = "fixed: every record full but the last (seeks by arithmetic)"
        else:
            layout = "variable: record places found by walking the record headers"
        return "\n".join(
            (
                _verified_only(
                    "the header and the final record",
                    file.records - 1,
                    "record",
                    path,
                    args,
                ),
                f"file: {_printable(path)}",
                f"format: gcmstream version {VERSION}, {header.role.name.lower().replace('_', '-')} stream",
                f"suite: {suite}",
                f"record size: {_size_text(header.record_size)} ({header.record_size} bytes)",
                f"key ID: {header.key_id.hex()}",
                f"layout: {layout}",
                f"records: {file.records}",
                f"plaintext length: {file.length} bytes (told by the authenticated final record)",
            )
        )


def _check_options(args: argparse.Namespace) -> str:
    """The options ``info`` was given that opening the file needs, as ``decrypt`` takes them:
    the format, the key file's path (never key text), identity and passphrase files, the
    context, the record limit. A key from the environment is said to come from there."""
    import shlex  # here, not for --help

    def quoted(text: str) -> str:
        return shlex.quote(_printable(text))

    words = ["--format tink"] if getattr(args, "format", "gcmstream") == "tink" else []
    if args.key_file is not None:
        words.append(f"-k {quoted(args.key_file)}")
    words += [f"-i {quoted(path)}" for path in args.identity]
    if args.passphrase:
        words.append("--passphrase")
    if args.passphrase_file is not None:
        words.append(f"--passphrase-file {quoted(args.passphrase_file)}")
    if args.context:
        words.append(f"--context {quoted(args.context.decode('utf-8', 'surrogateescape'))}")
    if args.max_record_size != DEFAULT_MAX_RECORD_SIZE:
        words.append(f"--max-record-size {_size_text(args.max_record_size)}")
    return " ".join(words)


def _key_from_environment(args: argparse.Namespace) -> str:
    """What info's suggested command needs besides its options: the key in the environment."""
    return f", with {KEY_ENV} still set" if args.key_file is None and KEY_ENV in os.environ else ""


def _verified_only(checked: str, others: int, unit: str, path: str, args: argparse.Namespace) -> str:
    """info's first line with a key: what it authenticated, and that the ``others`` records
    (or segments) it did not read are not checked (one altered in place passes info), with
    the command that checks them all, made of the options info was given (``_check_options``)."""
    import shlex  # here, not for --help

    if others <= 0:
        return f"verified: {checked}, so every {unit}"
    plural = unit if others == 1 else f"{unit}s"
    options = " ".join(filter(None, ("gcmstream decrypt", _check_options(args), "-o /dev/null")))
    return (
        f"verified: {checked} only; the other {others} {plural} were not read, so not checked "
        f"(to check every {unit}{_key_from_environment(args)}: {options} {shlex.quote(_printable(path))})"
    )


def _describe_unverified(path: str) -> str:
    """What the header of ``path`` claims, read with no key: the fixed part and which stanza
    field it holds, never a salt, a stanza or the commitment; marked first as verified by
    nothing. Refused as ``info`` with a key refuses it: armored text, a header malformed for
    every reader (``_unverified_header``)."""
    fd = open_regular(path)
    try:
        start, fields = _unverified_header(fd, _binary_only)
    finally:
        os.close(fd)
    sealing = sealed_with(fields)
    fixed = any(kind == FieldType.FIXED_LAYOUT for kind, _ in fields)
    lines = [
        "verified: NO: no key, identity or passphrase was given, so this is what the header "
        "claims, which anyone can write; give one to verify it and see the plaintext length",
        f"file: {_printable(path)}",
        f"format: gcmstream version {VERSION}, {start.role.name.lower().replace('_', '-')} stream",
        "sealed: {}; read with {}".format(*_SEALED_WORDS[sealing]),
        f"suite: {start.suite.name.replace('_', '-')}",
        f"record size: {_size_text(start.record_size)} ({start.record_size} bytes)",
    ]
    if sealing == "key":  # a stanza file's key ID names only its random file key
        lines.append(f"key ID: {start.key_id.hex()}")
    lines.append(f"layout: {'fixed' if fixed else 'variable'}")
    return "\n".join(lines)


def _info_command(args: argparse.Namespace, keying: Keying) -> None:
    _print_description(
        lambda: _describe(args.file, args, keying) if keying else _describe_unverified(args.file),
        lambda exc: _header_verdict(
            exc,
            "info",
            args.file,
            seeks="info needs",
            key_from=_key_source(args),
            key_id_altered=partial(_key_id_altered_in, args.file, keying, args.context),
        ),
    )


def _print_description(describe: Callable[[], str], verdict: Callable[[BaseException], _Fail | None]) -> None:
    """``info``'s one path, either format: the description printed, or the input's fault
    named by ``verdict`` (None: raised as it is)."""
    try:
        text = describe()
    except BaseException as exc:
        fault = verdict(exc)
        if fault is None:
            raise
        raise fault from None
    _file_run.check()  # a signal while the header was read: nothing printed
    _print_out(text)


# -- Tink's format (--format tink) -------------------------------------------------------------


def _tink_keyset(args: argparse.Namespace) -> TinkKeyset:
    """The keyset of --format tink: -k names Tink's JSON cleartext keyset (no environment
    variable: it holds a gcmstream key line); gcmstream's other keying and layout options do
    not apply to Tink's format and are refused."""
    refused = [
        name
        for name, given in (
            (
                "-r/-R/-i",
                getattr(args, "recipient", []) or getattr(args, "recipients_file", []) or args.identity,
            ),
            ("--passphrase", args.passphrase or args.passphrase_file is not None),
            ("--armor", getattr(args, "armor", False)),
            (
                "--record-size (the keyset sets the segment size)",
                getattr(args, "record_size", None) not in (None, DEFAULT_RECORD_SIZE),
            ),
            (
                "--max-record-size",
                getattr(args, "max_record_size", None) not in (None, DEFAULT_MAX_RECORD_SIZE),
            ),
            (
                "--offset/--length",
                getattr(args, "offset", None) is not None or getattr(args, "length", None) is not None,
            ),
        )
        if given
    ]
    if refused:
        raise _Usage(f"--format tink does not take {', '.join(refused)}")
    if args.key_file is None:
        raise _Usage("--format tink needs -k KEYSET.json (Tink's JSON cleartext keyset)")
    path = args.key_file
    try:
        text = _read_text(path, MAX_KEYSET_SIZE, named=True, private="keyset file")  # ('-': a file)
        _check_private(path, "keyset file")
        return read_tink_keyset(text)
    except KeyFileError as exc:
        raise _Usage(f"keyset file {path}: {exc}") from None
    except OSError as exc:
        raise _Usage(f"cannot read keyset file {path}: {exc.strerror or exc}") from None


def _tink_verdict(exc: BaseException, where: str) -> _Fail | None:
    """The message of a fault of a Tink ciphertext, naming the file (None: not such a fault, or
    stdin, whose fault keeps the error's own words). The exit status is the class's row of
    ``_FAILURES``: 4 tampered (a wrong keyset or --context too: Tink's header names no key, so
    they look the same), 5 truncated."""
    fault = _leaf(exc)
    if not isinstance(fault, ProtocolError) or where == "the input":
        return None
    code = _classify(fault)[0]
    if isinstance(fault, TruncatedStreamError):
        return _Fail(code, f"truncated input: {where} ends before its last segment: the file was cut short")
    if isinstance(fault, MalformedHeaderError):
        return _Fail(code, f"{where} has a corrupt Tink header: {fault}")
    if isinstance(fault, AuthenticationError) and fault.record_number == 0:
        return _Fail(
            code,
            f"{where}: Tink segment 0 did not authenticate under any key of the keyset: a wrong "
            "keyset or --context, or tampered",
        )
    if isinstance(fault, AuthenticationError):
        return _Fail(code, f"{where}: Tink segment {fault.record_number} failed authentication: tampered")
    return _Fail(code, f"{where}: {_classify(fault)[1]}")


def _tink_encrypt_command(args: argparse.Namespace, keyset: TinkKeyset) -> None:
    """encrypt --format tink: the file engine and the output path of ``encrypt``, with a
    TinkSealer."""
    sealer = TinkSealer(keyset, args.context)
    with _open_input(args.input) as (source, size):
        progress = _Progress.start(size, "encrypt", args.quiet)
        try:
            with _open_output(
                args.output, args.mode, no_terminal=True, read=_files_open(args, source)
            ) as out:
                _jobs_unused(args, TINK_IN_ORDER)  # the keyset, input and output accepted
                _run_engine(
                    partial(encrypt_fd, source, out, sealer, progress=progress.callback), out, args.output
                )
        except BaseException:
            progress.close()
            raise
        progress.close(summary=True)


def _tink_decrypt_command(args: argparse.Namespace, keyset: TinkKeyset) -> None:
    """decrypt --format tink: the file engine and the output path of ``decrypt``, with a
    TinkOpener: a file appears only once the last segment authenticated."""
    opener = TinkOpener(keyset, args.context)
    where = "the input" if args.input == "-" else args.input
    _decrypt_through(
        args,
        opener,
        # said once the header authenticated; one worker reads (Tink: files.TINK_IN_ORDER)
        lambda *_: (args.jobs or 1, partial(_jobs_unused, args)),
        lambda exc, *_: _tink_verdict(exc, where),
    )


def _tink_describe(path: str, args: argparse.Namespace, keyset: TinkKeyset) -> str:
    with open_tink_file(path, keyset, args.context) as file:
        key = file.key
        return "\n".join(
            (
                _verified_only(
                    "the header, segment 0 and the last segment"
                    if file.segments > 1
                    else "the header and its segment",
                    file.segments - 2,
                    "segment",
                    path,
                    args,
                ),
                f"file: {_printable(path)}",
                "format: Tink AES-GCM-HKDF streaming (AesGcmHkdfStreamingKey)",
                f"key ID: {key.key_id} (the keyset's key that authenticated segment 0)",
                f"derived key size: {key.derived_key_size} bytes (AES-{8 * key.derived_key_size}-GCM)",
                f"HKDF hash: {key.hkdf_hash.name}",
                f"segment size: {_size_text(key.ciphertext_segment_size)} "
                f"({key.ciphertext_segment_size} bytes of ciphertext)",
                f"segments: {file.segments}",
                f"plaintext length: {file.length} bytes (told by the authenticated last segment)",
            )
        )


def _tink_info_command(args: argparse.Namespace, keyset: TinkKeyset) -> None:
    _print_description(
        lambda: _tink_describe(args.file, args, keyset), lambda exc: _tink_verdict(exc, args.file)
    )


_TINK_COMMANDS = {
    "encrypt": _tink_encrypt_command,
    "decrypt": _tink_decrypt_command,
    "info": _tink_info_command,
}


# -- network pipes ------------------------------------------------------------------------------


_stdin_threads: list[threading.Thread] = []


def _stdin_pump(token: Any, send: Callable[[bytes | OSError], Any]) -> None:
    """Daemon thread: stdin chunks to the event loop, b"" at its end, or the OSError that
    stopped it (which must not look like an end: no FINAL may follow it). A daemon thread, not
    a worker thread, so that a read blocked on a terminal never holds up the exit."""
    with contextlib.suppress(Exception):  # the event loop is gone: nobody is reading any more
        while True:
            chunk: bytes | OSError
            try:
                chunk = os.read(_stdin_fd(), CHUNK_SIZE)
            except OSError as exc:
                chunk = exc
            from_thread.run(send, chunk, token=token)
            if not isinstance(chunk, bytes) or not chunk:
                return


async def _session(stream: ByteStream) -> None:
    """stdin to ``stream`` (FINAL at its end), ``stream`` to stdout (closed at the peer's FINAL),
    until both are done."""
    send_chunk, receive_chunk = anyio.create_memory_object_stream[bytes | OSError](1)
    thread = threading.Thread(
        target=_stdin_pump, args=(current_token(), send_chunk.send), name="gcmstream stdin", daemon=True
    )
    thread.start()
    _stdin_threads.append(thread)

    async def upload(chunks: MemoryObjectReceiveStream[bytes | OSError]) -> None:
        async with chunks:
            while chunk := await chunks.receive():
                if isinstance(chunk, OSError):
                    raise chunk
                await stream.send(chunk)
        await stream.send_eof()  # only at the true end of stdin

    async def download() -> None:
        write = _fd_writer(_stdout_fd())
        while True:
            try:
                data = await stream.receive(CHUNK_SIZE)
            except anyio.EndOfStream:
                break
            await write(memoryview(data))
        await to_thread.run_sync(_close_stdout)

    async with anyio.create_task_group() as tg:
        tg.start_soon(upload, receive_chunk)
        tg.start_soon(download)


def _close_stdout() -> None:
    """Let whoever reads our stdout see its end now, while fd 1 stays valid."""
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)


async def _bind(host: str, port: int, quiet: bool) -> anyio.abc.Listener[SocketStream]:
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:  # named: "127.0.0.1:9125: Address already in use"
        raise OSError(exc.errno, exc.strerror or str(exc), _shown((host, port))) from None
    bound = listener.extra(anyio.abc.SocketAttribute.local_address)
    if port == 0 or not quiet:
        line = _stderr_line("listen", f"listening on {_shown(bound)}", shown_as_is=True)
        print(line, file=sys.stderr, flush=True)
    return listener


def _shown(address: Any) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


async def _accept_one(listener: anyio.abc.Listener[SocketStream]) -> SocketStream:
    accepted: list[SocketStream] = []
    async with anyio.create_task_group() as tg:

        async def accept(sub: Any) -> None:
            stream = await sub.accept()
            if accepted:
                await stream.aclose()
                return
            accepted.append(stream)
            tg.cancel_scope.cancel()

        for sub in getattr(listener, "listeners", [listener]):
            tg.start_soon(accept, sub)
    return accepted[0]


def _channel_config(args: argparse.Namespace, key: bytes) -> Configuration:
    """What ``listen`` and ``connect`` were told, as the one Configuration both use (checked
    here, once); what the command line does not set keeps the library's defaults (the
    handshake and record timeouts, no idle timeout, the servers' admission policy)."""
    return Configuration(
        key=key,
        context=args.context,
        record_size=args.record_size,
        max_record_size=args.max_record_size,
        key_exchange=_KEY_EXCHANGES[args.key_exchange],
        local_id=args.local_id,
        peer_id=args.peer_id,
    )


async def _handshake(transport: SocketStream, config: Configuration) -> SecureStream:
    return await SecureStream.wrap(  # the shared handshake policy: timeout, close on failure
        transport, role=Role.RESPONDER, config=config
    )


async def _first_peer(
    listener: anyio.abc.Listener[SocketStream], args: argparse.Namespace, config: Configuration
) -> SecureStream:
    """Accept connections until one completes the handshake; every failed one is closed and
    logged as the servers log them (``FailureReport``: a stranger's line at most once per 10 s,
    the rest counted), so a stranger (a port scan, a probe, a wrong key) does not end the
    session, nor flood stderr.
    Handshakes run side by side: one that stalls does not hold up the real peer. The servers'
    one loop (``serve_listener``: the server core's admission, at its defaults, and deadlines)
    with a handler that takes the first peer and stops it."""
    winner: list[SecureStream] = []
    async with anyio.create_task_group() as tg:

        async def take(stream: SecureStream) -> None:
            if winner:  # a second one completed in the same pass: not this session's
                await anyio.aclose_forcefully(stream.transport_stream)
                return
            winner.append(stream)
            tg.cancel_scope.cancel()

        async def failed(exc: Exception, transport: object, peer: object, level: int) -> None:
            # (the core's level: a stranger's failure is debug once another was said within
            # 10 s, and counted in the core's one line per 10 s, which goes to _log as well)
            shown = _shown(peer) if isinstance(peer, tuple) else str(peer)
            _log.log(level, "%s; still listening", _peer_failure(exc, args), extra={"peer": shown})

        async def responder(
            transport: Any, deadlines: Any, observe: Callable[[Any], object], scope: anyio.CancelScope
        ) -> SecureStream:
            # the handshake runs in the admission's scope (cancelled to evict the connection: a
            # TimeoutError, which the core does not log), under its own deadline: one scope and
            # no frame of ours between (~0.25 KB less per pending handshake, tests/test_pending.py)
            return await SecureStream.wrap(
                transport, role=Role.RESPONDER, config=config, on_handshake_input=observe, cancel_scope=scope
            )

        async def serve() -> None:
            from .anyio_stream import AnyioTruncatedStreamError  # (what a hang-up raises on anyio)

            truncation = AnyioTruncatedStreamError
            await serve_listener(listener, config, responder, take, failed, None, _log, truncation)

        tg.start_soon(serve)
    return winner[0]


def _peer_failure(exc: BaseException, args: argparse.Namespace) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, RecordTooLargeError):
        return _record_limit_error(args.command, leaf.size, leaf.limit, "the peer").message
    if isinstance(leaf, TruncatedStreamError) and leaf.in_header:  # says what the peer did
        return str(leaf)
    return _classify(leaf)[1]


async def _listen_command(args: argparse.Namespace, key: bytes) -> None:
    host, port = args.address
    _stdout_fd()  # where the session writes: a closed one is said before a peer is involved
    config = _channel_config(args, key)  # its key a KeyRing once, not one per connection
    async with await _bind(host, port, args.quiet) as listener:
        if args.once:  # the first connection only, whatever its handshake gives
            transport = await _accept_one(listener)
        else:
            stream = await _first_peer(listener, args, config)
    if args.once:
        try:
            stream = await _handshake(transport, config)
        except RecordTooLargeError as exc:
            raise _record_limit_error("listen", exc.size, exc.limit, "the peer") from None
    await _session_then_close(stream)


async def _session_then_close(stream: SecureStream) -> None:
    """Run the session; on any failure close the connection at once (no FINAL is sealed:
    only send_eof does that), so the peer sees a cut stream, never a complete one."""
    try:
        await _session(stream)
    except BaseException:
        await anyio.aclose_forcefully(stream.transport_stream)
        raise
    await stream.aclose()


async def _connect_command(args: argparse.Namespace, key: bytes) -> None:
    host, port = args.address
    _stdout_fd()  # where the session writes: a closed one is said before a peer is involved
    config = _channel_config(args, key)
    try:
        stream = await connect_tcp(host, port, config=config)
    except RecordTooLargeError as exc:
        raise _record_limit_error("connect", exc.size, exc.limit, "the peer") from None
    except TimeoutError:
        raise  # the handshake's own timeout: its own message
    except OSError as exc:  # anyio says "All connection attempts failed": say where, and why
        raise _Fail(EXIT_IO, f"cannot connect to {_shown((host, port))}: {_os_reason(exc)}") from None
    except Exception as exc:
        cut = _leaf(exc)  # (under anyio's wrapping)
        if not (isinstance(cut, TruncatedStreamError) and cut.in_header):
            raise
        raise _Fail(EXIT_TRUNCATED, _refused_by_listen(args)) from None
    await _session_then_close(stream)


def _refused_by_listen(args: argparse.Namespace) -> str:
    """connect's handshake cut before the listen's answer was whole. A listen answers only once
    it accepted this end's header (docs/FORMAT.md 5.2: H1..H14, then K1..K8), and refuses
    silently, so that a prober learns nothing: this end names every cause its own options leave
    open (the listen's stderr names the one it found)."""
    causes = ["another key", "another --context"]
    if args.key_exchange != _KEY_EXCHANGE_NAMES[0]:  # hybrid, the strongest, is refused by none
        causes.append(f"--key-exchange hybrid (this end offers {args.key_exchange}, which is weaker)")
    if args.local_id is None:
        causes.append("a --peer-id (this end gives no --local-id)")
    else:
        causes += [
            f"a --peer-id other than this end's --local-id '{args.local_id}'",
            f"its own --local-id '{args.local_id}' too (it takes this for a connection to itself)",
        ]
    causes.append(f"a --max-record-size under this end's --record-size {_size_text(args.record_size)}")
    address = _shown(args.address)
    return (
        f"truncated input: {address} hung up during the handshake before answering: a listen "
        "refuses a header silently, and says why on its own stderr. From here the causes cannot "
        f"be told apart: the listen has {', '.join(causes[:-1])}, or {causes[-1]} (or the "
        "connection was cut on the way)"
    )


def _os_reason(exc: BaseException) -> str:
    """The first OSError's own words under anyio's wrapper and exception groups."""
    while True:
        if isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        elif isinstance(exc, OSError) and (exc.errno or exc.strerror):
            # asyncio words a refusal "Connect call failed (...)": the errno's own text says why;
            # a name lookup's errno is getaddrinfo's (EAI_*, negative), its strerror the words
            gai = (exc.errno or 0) < 0  # socket.gaierror's EAI_* codes are negative
            reason = os.strerror(exc.errno) if exc.errno and not gai else str(exc.strerror)
            return reason[:1].lower() + reason[1:]
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            return str(exc)


# -- errors and main ----------------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    """The error that matters inside task-group exception groups and StreamBrokenError."""
    while True:
        if isinstance(exc, BaseExceptionGroup):
            cancelled = getattr(sys.modules.get("asyncio"), "CancelledError", ())  # none if unloaded
            inner = [e for e in exc.exceptions if not isinstance(e, cancelled)]
            exc = (inner or list(exc.exceptions))[0]
        elif isinstance(exc, StreamBrokenError):
            exc = exc.original
        else:
            return exc


def _os_failure(exc: BaseException) -> str:
    if not isinstance(exc, OSError):  # _FAILURES gives it only OSErrors
        return str(exc)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {reason}" if exc.filename else reason


def _connection_lost(exc: BaseException) -> str:
    cause = exc.__cause__
    return f"connection lost{f': {cause}' if cause else ''}"


class _Broke:
    """A ProtocolError raised by one check of docs/FORMAT.md 8.1 (its ``rule``)."""

    def __init__(self, kind: type[ProtocolError], rule: str) -> None:
        self.kind, self.rule = kind, rule

    def matches(self, exc: BaseException) -> bool:
        return isinstance(exc, self.kind) and exc.rule == self.rule


class _StreamEnd:
    """anyio's ends of a stream (broken, closed, at its end), matched without importing anyio
    before a command runs (anyio is loaded by then if one can be raised)."""

    def matches(self, exc: BaseException) -> bool:
        anyio = sys.modules.get("anyio")
        ends = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) if anyio else ()
        return isinstance(exc, ends)


_Kind = type[BaseException] | tuple[type[BaseException], ...] | _Broke | _StreamEnd

# (kind of error, exit status, its message): the first match wins, so the specific come before
# the general (the key errors are ProtocolErrors; TimeoutError and BrokenPipeError are OSErrors).
# The one map from error to exit status: every command's failure goes through it.
_FAILURES: tuple[tuple[_Kind, int, Callable[[BaseException], str]], ...] = (
    (_OutputClosed, EXIT_BROKEN_PIPE, lambda _: ""),
    ((_Usage, UsageError), EXIT_USAGE, str),
    # its key ID, shown, would look like key text
    (
        UnknownKeyError,
        EXIT_WRONG_KEY,
        lambda _: f"{_WRONG_KEY_OR_ALTERED}: the stream names (by its key ID) a key that was not given",
    ),
    # the key ID proves the key fits (H11: the suite byte disagrees with it; S8: an identity
    # opened the stanza, but the header names another file key): altered, not a wrong key
    (_Broke(KeyCommitmentError, "H11"), EXIT_TAMPERED, lambda e: f"corrupt stream header: {e}"),
    (_Broke(KeyCommitmentError, "S8"), EXIT_TAMPERED, lambda e: f"corrupt stream header: {e}"),
    (KeyCommitmentError, EXIT_WRONG_KEY, str),  # it says "wrong key" and what else it can be
    ((SelfConnectionError, PeerIdentityError), EXIT_IDENTITY, lambda e: f"identity refused: {e}"),
    # K1: a listen's --key-exchange above the connect's (X25519 is x25519, MLKEM768_X25519 hybrid)
    (
        DowngradeError,
        EXIT_TAMPERED,
        lambda e: (
            f"key exchange refused: {e} (--key-exchange: x25519 is X25519, hybrid is "
            "MLKEM768_X25519; a weaker one than this end's is refused)"
        ),
    ),
    (NoIdentityMatchedError, EXIT_WRONG_KEY, str),
    # damage (H3..H7, H13, S1..): magic and version right; before their parent class
    ((MalformedHeaderError, StanzaError), EXIT_TAMPERED, lambda e: f"corrupt stream header: {e}"),
    (TruncatedArmorError, EXIT_TRUNCATED, lambda e: f"truncated input: {e}"),
    (ArmorError, EXIT_TAMPERED, lambda e: f"corrupt armor: {e}"),
    (UnsupportedFormatError, EXIT_UNSUPPORTED, lambda e: f"unsupported input: {e}"),
    # H8: the header's record size over --max-record-size; a record's length field (R1) is damage
    (_Broke(RecordTooLargeError, "H8"), EXIT_RECORD_LIMIT, lambda e: f"record size over the limit: {e}"),
    (TruncatedStreamError, EXIT_TRUNCATED, lambda e: f"truncated input: {e}"),
    (ProtocolError, EXIT_TAMPERED, lambda e: f"tampered or corrupt input: {e}"),
    (TimeoutError, EXIT_IO, lambda _: "timed out waiting for the channel handshake to complete"),
    (BrokenPipeError, EXIT_IO, lambda _: "output closed before the end (broken pipe)"),
    (OSError, EXIT_IO, _os_failure),
    (_StreamEnd(), EXIT_IO, _connection_lost),
    (KeyboardInterrupt, EXIT_INTERRUPTED, lambda _: "interrupted"),
    (_Terminated, EXIT_TERMINATED, str),
)


def exit_status(exc: BaseException) -> int:
    """The exit status the command line gives the error ``exc`` (a row of ``EXIT_CODES``)."""
    return _classify(_leaf(exc))[0]


def _classify(exc: BaseException) -> tuple[int, str]:
    """(exit status, message) for an error that ended a command."""
    if isinstance(exc, _Fail):
        return exc.code, exc.message
    for kind, code, message in _FAILURES:
        if kind.matches(exc) if isinstance(kind, (_Broke, _StreamEnd)) else isinstance(exc, kind):
            return code, message(exc)
    return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


async def _run(
    command: Callable[[argparse.Namespace, _K], Awaitable[None]], args: argparse.Namespace, key: _K
) -> None:
    """Run ``command``; SIGTERM or SIGHUP cancel it (as Ctrl-C does), so its cleanup runs."""
    received: list[int] = []
    async with anyio.create_task_group() as tg:

        async def watch(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                task_status.started()  # handlers are in place before the command starts
                async for signum in signals:
                    received.append(signum)
                    tg.cancel_scope.cancel()
                    return

        await tg.start(watch)
        await command(args, key)
        tg.cancel_scope.cancel()
    if received:
        raise _Terminated(f"terminated by {signal.Signals(received[0]).name}")


class _FileRun:
    """A file command (encrypt, decrypt, info) run with no event loop: in one worker thread,
    while the main thread waits for it and for SIGINT, SIGTERM or SIGHUP. A signal is only
    recorded and ``stop`` set, so no exception lands in the command halfway through creating,
    writing or removing its output: the engine sees ``stop`` within one read or one poll of an
    idle input, ``files.atomic_fd`` removes the temporary file, and the command leaves with the
    signal's exit status. Once stopped, the main thread waits for the worker as long as the
    ``step`` it is in allows (``budget``): None, until it leaves (deciding, creating, renaming
    or removing an output, reading a header); 0, not at all (opening a FIFO, which waits for
    its other end); the engine's ``STOP_WAIT``, or ``_PIPE_STOP_WAIT`` writing to a pipe,
    terminal or FIFO (no temporary file to remove). A worker given up is left behind
    (``_abandoned_io``: the process leaves with os._exit). The main thread sleeps in poll()
    on a pipe that the worker writes to when it leaves or changes step and that signals wake
    (``signal.set_wakeup_fd``: a signal may be delivered to any thread)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signals: list[int] = []
        self.stopped_at = 0.0
        self.budget: float | None = None
        self.since = 0.0  # when the step began
        self.done = False
        self.error: BaseException | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    @contextlib.contextmanager
    def step(self, budget: float | None) -> Iterator[None]:
        """A step of the worker that, once stopped, is waited for ``budget`` seconds."""
        self.since = time.monotonic()  # before the budget: the main thread reads them reversed
        self.budget = budget
        self._wake()
        try:
            yield
        finally:
            self.budget = None

    def check(self) -> None:
        check_stop(self.stop)

    def run(
        self, command: Callable[[argparse.Namespace, _K], None], args: argparse.Namespace, key: _K
    ) -> None:
        """Run ``command`` in the worker; raise what it raised, or, once a signal came, the
        signal's failure (exit status 130 or 143), whatever the command did after it."""
        worker = threading.Thread(
            target=self._work, args=(command, args, key), name="gcmstream-command", daemon=True
        )
        with self._signals_stop():
            worker.start()
            self._wait()
            if self.done:
                worker.join()  # past its last write to the pipe
        if self.done:  # (a worker given up may still write to it; signals no longer do)
            os.close(self._wake_read)
            os.close(self._wake_write)
        if self.signals:
            if self.signals[0] == signal.SIGINT:  # as KeyboardInterrupt is reported
                raise _Fail(EXIT_INTERRUPTED, "interrupted")
            raise _Terminated(f"terminated by {signal.Signals(self.signals[0]).name}")
        if self.error is not None:
            raise self.error

    def _work(
        self, command: Callable[[argparse.Namespace, _K], None], args: argparse.Namespace, key: _K
    ) -> None:
        try:
            command(args, key)
        except BaseException as exc:  # raised again in the main thread
            self.error = exc
        finally:
            self.done = True
            self._wake()

    def _wait(self) -> None:
        woken = select.poll()  # (not select(): a descriptor number may be over FD_SETSIZE)
        woken.register(self._wake_read, select.POLLIN)
        while not self.done:
            timeout = None
            budget = self.budget  # before ``since`` (written after it): never a stale start
            if self.signals and budget is not None:
                timeout = max(self.since, self.stopped_at) + budget - time.monotonic()
                if timeout <= 0:
                    _abandoned_io.append(True)
                    return
            woken.poll(None if timeout is None else max(1, int(timeout * 1000 + 1)))
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_read, 4096)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: the main thread has wake-ups waiting
            os.write(self._wake_write, b"\0")

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self.signals:
            self.stopped_at = time.monotonic()
        self.signals.append(signum)
        self.stop.set()

    @contextlib.contextmanager
    def _signals_stop(self) -> Iterator[None]:
        """SIGTERM and SIGHUP, and SIGINT unless it is ignored (a background job), set ``stop``
        while the command runs (only the main thread can catch signals)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        caught = [signal.SIGTERM, signal.SIGHUP]
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            caught.append(signal.SIGINT)
        saved = {signum: signal.signal(signum, self._on_signal) for signum in caught}
        wakeup = signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        try:
            yield
        finally:
            signal.set_wakeup_fd(wakeup)
            for signum, handler in saved.items():
                signal.signal(signum, handler)


_file_run: _FileRun  # the file command this process runs (_run_file_command)


def _run_file_command(
    command: Callable[[argparse.Namespace, _K], None], args: argparse.Namespace, key: _K
) -> None:
    global _file_run
    _file_run = _FileRun()
    _file_run.run(command, args, key)


_NET_COMMANDS = {"listen": _listen_command, "connect": _connect_command}


_LOCAL_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "keygen": _keygen,
    "identity": _identity,
    "recipient": _recipient,
}


# The descriptors open when main() began: the ones the shell (or caller) gave, which -o
# /dev/fd/N may name; any other is the command's own (its signal wake-up pipe: ciphertext
# written into it was a hostile review's finding)
_descriptors_given: frozenset[int] | None = None


def _open_descriptors() -> frozenset[int] | None:
    """The descriptors open now (None: not known, no /proc or /dev/fd to list them)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        open_now = set()
        for name in names:
            try:  # the listing's own descriptor is closed by now: not one given
                os.fstat(int(name))
            except (OSError, ValueError):
                continue
            open_now.add(int(name))
        return frozenset(open_now)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    _files_read_were.clear()  # (main may run again in one process)
    global _descriptors_given
    _descriptors_given = _open_descriptors()  # before any of our own: the stand-in below is not given
    if sys.stderr is None:  # closed by the shell (2>&-): print(file=None) would write to stdout
        # diagnostics go nowhere, never into the output; the exit status still tells
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    args = _parse_args(_build_parser(), sys.argv[1:] if argv is None else argv)
    if isinstance(args, int):
        return args
    _import_runtime(args.command)
    if args.command in _NET_COMMANDS:  # the only commands that log (listen's refused peers)
        _log_to_stderr(args.command, verbose=getattr(args, "verbose", False))
    try:
        local = _LOCAL_COMMANDS.get(args.command)
        if local is not None:
            return local(args)
        _run_command(args)
    except BaseException as exc:  # one line on stderr, never a traceback (unless debugging)
        if isinstance(exc, SystemExit):
            raise
        code, message = _classify(_leaf(exc))
        if code == EXIT_INTERNAL and os.environ.get(DEBUG_ENV):
            raise
        _report_failure(args, code, message)
        return _exit_now_if_blocked(code)
    return _exit_now_if_blocked(EXIT_OK)


def _parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed command line, or the exit status when there is no command to run."""
    if isinstance(parser, _Parser):
        parser.command_given = next((word for word in argv if word in _EXAMPLES), None)
        _Parser.words = list(argv)
    slip = _secret_after_a_flag(argv) or _age_habit(argv) or _unknown_flag_with_a_value(argv, parser)
    if slip is not None:
        parser.error(slip)
    try:
        args = parser.parse_args(argv)  # (help and --print-completion write here, then exit)
    except BrokenPipeError:  # `gcmstream --print-completion bash | head`: quiet, as cat
        _close_stdout()
        return EXIT_BROKEN_PIPE
    if args.command is None:  # bare `gcmstream`: the help, as a usage error
        parser.print_help()
        return EXIT_USAGE
    if args.command in ("listen", "connect"):
        try:
            args.address = _address(
                args.address, default_host="127.0.0.1" if args.command == "listen" else None
            )
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    return args


# Options that take no value, but that a new user gives the passphrase to: --passphrase asks on
# the terminal, and -p is age's name for it (not an option here). The word after one of them is
# then taken as the input (or an unknown argument), and argparse or the open would quote it.
_PASSPHRASE_FLAGS = {
    "--passphrase": "--passphrase takes no value",
    "-p": "-p is not an option: age's -p is --passphrase here, which takes no value",
}


def _secret_after_a_flag(argv: Sequence[str]) -> str | None:
    """The usage message for a passphrase typed as the value of a flag that takes none: the
    word right after it names no file (so it is no input) or is joined by '='. The word is
    never quoted: it may be the passphrase. Checked before parsing, so before any prompt.
    ``-pTEXT``: age's -p with its value joined, as a short flag takes one."""
    for flag, following in zip(argv, [*argv[1:], None], strict=False):  # (None: after the last)
        if flag == "--":  # what follows is an input, whatever its name
            return None
        name, joined, _ = flag.partition("=")
        if flag.startswith("-p") and not joined and len(flag) > 2:
            name, joined = "-p", "joined"
        if name not in _PASSPHRASE_FLAGS:
            continue
        if not joined and (following is None or following.startswith("-") or os.path.lexists(following)):
            continue
        given = {"=": "the text after '='", "joined": "the text joined to it"}.get(
            joined, "the word after it names no file, and"
        )
        return (
            f"{_PASSPHRASE_FLAGS[name]}: it asks for the passphrase on the terminal, or give "
            f"--passphrase-file FILE; {given} is not shown (it may be the passphrase)"
        )
    return None


# age's flags that gcmstream spells otherwise, (command or None before one, flag): what to give
_USAGE_DECRYPT = "gcmstream decrypt [-i IDENTITY_FILE | -k KEYFILE | --passphrase] [FILE]"
_USAGE_ENCRYPT = "gcmstream encrypt [-r LINE | -R FILE | -k KEYFILE | --passphrase] [FILE]"
_AGE_HABITS = {
    (None, "-d"): f"age's -d is a command here: {_USAGE_DECRYPT}",
    (None, "--decrypt"): f"age's --decrypt is a command here: {_USAGE_DECRYPT}",
    (None, "-e"): f"age's -e is a command here: {_USAGE_ENCRYPT}",
    (None, "--encrypt"): f"age's --encrypt is a command here: {_USAGE_ENCRYPT}",
    ("decrypt", "-d"): "-d is age's flag to decrypt: the command 'decrypt' does it, leave -d out",
    ("decrypt", "--decrypt"): "--decrypt is age's flag: the command 'decrypt' does it, leave it out",
    ("encrypt", "-e"): "-e is age's flag to encrypt: the command 'encrypt' does it, leave -e out",
    ("encrypt", "--encrypt"): "--encrypt is age's flag: the command 'encrypt' does it, leave it out",
    ("encrypt", "-d"): f"age's -d is the command 'decrypt' here: {_USAGE_DECRYPT}",
    ("decrypt", "-e"): f"age's -e is the command 'encrypt' here: {_USAGE_ENCRYPT}",
    ("decrypt", "-a"): "decrypt reads armored text ('encrypt -a') as it is: leave -a out",
    ("decrypt", "--armor"): "decrypt reads armored text ('encrypt -a') as it is: leave --armor out",
    ("decrypt", "-r"): "-r names a recipient, for encrypt: decrypt with your identity file, -i FILE",
    ("decrypt", "--recipient"): "--recipient is encrypt's: decrypt with your identity file, -i FILE",
    ("decrypt", "-R"): "-R names recipients, for encrypt: decrypt with your identity file, -i FILE",
    ("decrypt", "--recipients-file"): "--recipients-file is encrypt's: decrypt with -i IDENTITY_FILE",
    # before a command, argparse took the word after one of these for the command ("invalid
    # choice"), quoting it: only the flag is named, gcmstream's spelling with it
    (None, "-r"): "age's -r RECIPIENT is `gcmstream encrypt -r RECIPIENT` here",
    (None, "--recipient"): "age's --recipient RECIPIENT is `gcmstream encrypt -r RECIPIENT` here",
    (None, "-R"): "age's -R PATH is `gcmstream encrypt -R FILE` here",
    (None, "--recipients-file"): "age's --recipients-file PATH is `gcmstream encrypt -R FILE` here",
    (None, "-i"): "age's -i PATH is `gcmstream decrypt -i IDENTITY_FILE` here",
    (None, "--identity"): "age's --identity PATH is `gcmstream decrypt -i IDENTITY_FILE` here",
    (None, "-a"): "age's -a is `gcmstream encrypt -a` here",
    (None, "--armor"): "age's --armor is `gcmstream encrypt -a` here",
    (None, "-o"): "age's -o OUTPUT is `gcmstream encrypt -o FILE` (or decrypt -o FILE) here",
    (None, "--output"): "age's --output OUTPUT is `gcmstream encrypt -o FILE` (or decrypt -o FILE) here",
    (None, "-p"): "age's -p is `gcmstream encrypt --passphrase` (or decrypt --passphrase) here: it "
    "asks for the passphrase on the terminal, or give --passphrase-file FILE",
}
_AGE_P = (
    "-p is not an option: age's -p is --passphrase here (it asks for the passphrase on the "
    "terminal), or give --passphrase-file FILE"
)


# What a page, a word processor or an input method may make of '-' beside the Unicode dashes
# (category Pd): horizontal strokes (a minus sign, a hyphen bullet, a modifier minus, a
# prolonged sound mark, box drawing lines, a CJK or Hangul "one"; reviews rev14 to rev18)
_DASH_LOOK_ALIKES = frozenset(
    "\u2212\u2043\u2796\u02d7\u30fc\uff70\u2500\u2501\u23af\u4e00\u3161\u1173\u1428\u2f00\u31d0"
)
# blanks that are no spaces to Unicode (a braille blank, Hangul fillers) and ASCII controls
_BLANK_LOOK_ALIKES = frozenset("\u2800\u3164\u115f\u1160\uffa0")
_ASCII_BLANKS = "".join(map(chr, range(33))) + "\x7f"


def _typed_like_an_option(word: str) -> bool:
    """True for a word typed as an option that argparse would not take for one, and so quote (as
    the input's name, a stray word, the command): an option with something invisible, blank or
    a control character before it, an option whose name holds a look-alike (a fullwidth '='),
    or one or two look-alikes of '-' before an ASCII name ('—password=', '一一password'): what
    a page, a word processor or an input method makes of ``--NAME=VALUE`` (reviews rev14 to
    rev18). A file's name that starts with a symbol, an emoji or a word in another script
    (``📄 report.pdf``, ``ーメモ.txt``, ``旧iPhone バックアップ.zip``) is no option; one named
    like an option is given as ``./NAME``."""
    if word.isascii():  # an ASCII option is _unknown_flag's to judge; one after blanks is not
        stripped = word.lstrip(_ASCII_BLANKS)
        return stripped != word and stripped[:1] == "-"
    import unicodedata  # (only for a word that is not ASCII)

    start = 0
    while start < len(word) and (
        unicodedata.category(word[start])[0] in "ZCM" or word[start] in _BLANK_LOOK_ALIKES
    ):
        start += 1
    stripped = word[start:]
    if stripped[:1] == "-":  # ASCII dashes: the option's name, up to an ASCII '=', must be ASCII
        return start > 0 or not stripped.partition("=")[0].isascii()
    dashes = 0
    while dashes < min(2, len(stripped)) and (
        unicodedata.category(stripped[dashes]) == "Pd" or stripped[dashes] in _DASH_LOOK_ALIKES
    ):
        dashes += 1
    following = stripped[dashes : dashes + 1]
    return dashes > 0 and following.isascii() and following.isalpha()


def _unknown_flag_with_a_value(argv: Sequence[str], parser: argparse.ArgumentParser) -> str | None:
    """The usage message for a flag argparse would quote a value with (``_unknown_flag``),
    checked before parsing, so before any prompt; after ``--`` a word is an input, whatever its
    name (a file whose name starts with '-' is given as ``./NAME`` or after ``--``)."""
    options = _options_by_command(parser)
    command: str | None = None
    for word in argv:
        if word == "--":
            return None
        if command is None and word in options:
            command = word
            continue
        slip = _unknown_flag(word, options[command], before_command=command is None)
        if slip is not None:
            return slip
    return None


def _options_by_command(parser: argparse.ArgumentParser) -> dict[str | None, Collection[str]]:
    """The option strings each command's parser knows, and (under None) the top parser's."""
    options: dict[str | None, Collection[str]] = {None: parser._option_string_actions.keys()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            options.update((name, sub._option_string_actions.keys()) for name, sub in action.choices.items())
    return options


def _unknown_flag(word: str, known: Collection[str], *, before_command: bool) -> str | None:
    """``word``'s usage message, where argparse would quote a value given with it: only the flag
    is named. A misspelt ``--password="three word passphrase"`` was opened as a file and quoted
    back (the new user, 2026-12-05); an abbreviation of two options (``--pass=...``) was quoted
    by argparse after its first word; a flag pasted with a typographic dash was quoted whole;
    one before the command gave its value to argparse as the command, "invalid choice: 'VALUE'"
    (rev14, MEDIUM-2, LOW-1, LOW-2)."""
    if _typed_like_an_option(word):
        return (
            "a word is typed as an option with a character that only looks like '-' or '=' (a "
            "typographic dash, a fullwidth '=', an invisible character: a page may have turned "
            "'--' into one): type options with '-' and '=' (a file named so is ./NAME); the word "
            "is not shown"
        )
    name, joined, _ = word.partition("=")
    if not name.startswith("-") or name == "-" or name in known:
        return None
    spaced = any(c.isspace() for c in name)
    if spaced and re.match(r"--?[A-Za-z]", name) and (name.startswith("--") or name[:2] not in known):
        # an option and its value quoted as one word ('--password Hunter2x'), which argparse
        # takes for a positional and names (rev17, LOW-2, LOW-3); '-fWORD ...' is -f's to judge
        return (
            "a word starts like an option and holds a space (an option and its value quoted as "
            "one word?): give them as two words; the word is not shown"
        )
    if re.fullmatch(r"--[A-Za-z][\w-]*", name):
        matches = sorted(option for option in known if option.startswith(name))
    else:  # (no option is '--', '---NAME' or '--1NAME': no abbreviation of one either)
        matches = []
    if len(matches) == 1:
        return None  # argparse's abbreviation of that option
    if before_command:  # named without a value joined to it ('-PTEXT', '-h TEXT': rev18, LOW-4)
        shown = name.split()[0] if name.startswith("--") else name[:2]
        return (
            f"{shown} is given before the command: options follow it (gcmstream COMMAND {shown} ...);"
            " what follows it is not shown"
        )
    if not joined:
        return None  # "unrecognized arguments", the next word not shown (_unrecognized)
    if matches:
        return f"ambiguous option {name}= {_NOT_SHOWN}: it could be {', '.join(matches)}"
    return f"unrecognized option {name}= {_NOT_SHOWN}"


def _age_habit(argv: Sequence[str]) -> str | None:
    """The usage message for one of age's flags that gcmstream spells otherwise (``-d``,
    ``-e``, ``-p`` without a value, ``decrypt --armor``, ``decrypt -r``, ``-r``/``-i``/``-o``/
    ``-a`` before a command): what to give instead.
    Only the flag is named, never a word given with it. Checked before parsing (argparse would
    say "unrecognized arguments", or take ``gcmstream -d FILE``'s FILE for a command)."""
    command = None
    for word in argv:
        if word == "--":  # what follows is an input, whatever its name
            return None
        if command is None and word in _EXAMPLES:
            command = word
            continue
        flag = word.partition("=")[0] if word.startswith("--") else word
        if flag == "-p" and command in ("encrypt", "decrypt", "info"):
            return _AGE_P
        habit = _AGE_HABITS.get((command, flag))
        if habit is not None:
            return habit
    return None


def _run_command(args: argparse.Namespace) -> None:
    """Run a command that does I/O: a file command in a worker thread (``_FileRun``), listen
    and connect in an event loop."""
    if args.command in ("encrypt", "decrypt", "info", "listen", "connect"):
        _refuse_same_file(args)  # before a key, identity, passphrase or input is read
    if getattr(args, "format", "gcmstream") == "tink":
        _run_file_command(_TINK_COMMANDS[args.command], args, _tink_keyset(args))
    elif args.command == "encrypt":
        _run_file_command(_encrypt_command, args, _keying(args, encrypting=True))
    elif args.command == "decrypt":
        _run_file_command(_decrypt_command, args, _keying(args, encrypting=False))
    elif args.command == "info":
        _run_file_command(_info_command, args, _keying(args, encrypting=False))
    else:
        anyio.run(_run, _NET_COMMANDS[args.command], args, _load_key(args.key_file))


def _report_failure(args: argparse.Namespace, code: int, message: str) -> None:
    """The one line on stderr for a failed command (nothing for a closed output pipe)."""
    if code == EXIT_BROKEN_PIPE:
        _close_stdout()  # nothing left to flush into the closed pipe at exit
    elif message:
        if args.command == "decrypt" and args.output == "-" and code in (EXIT_TAMPERED, EXIT_TRUNCATED):
            message += "; output stops after the last authenticated record"
        with contextlib.suppress(OSError):
            print(_stderr_line(args.command, message), file=sys.stderr, flush=True)


def _log_to_stderr(command: str, *, verbose: bool = False) -> None:
    """Log lines (listen's refused connections) as one line each, like the error line;
    ``verbose`` (listen -v): the debug ones too, a line for each failed handshake."""
    import logging  # here, not for --help (10 ms)

    class HidingFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            # a peer's words are filtered; its address (``extra={"peer": ...}``) is not
            return _stderr_line(command, super().format(record), address=getattr(record, "peer", None))

    global _log
    _log = logging.getLogger("gcmstream.cli")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(HidingFormatter("%(message)s"))
    _log.handlers[:] = [handler]
    _log.setLevel(logging.DEBUG if verbose else logging.INFO)
    _log.propagate = False


def _exit_now_if_blocked(code: int) -> int:
    """A thread blocked on stdin or stdout (a terminal, an idle pipe, a stalled reader) holds
    up interpreter shutdown, even as a daemon thread; when one is left, flush and leave at once."""
    if _abandoned_io or any(thread.is_alive() for thread in _stdin_threads):
        for stream in (sys.stdout, sys.stderr):  # (None: closed by the shell)
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.flush()
        os._exit(code)
    return code


def _add_completion_option(parser: argparse.ArgumentParser) -> None:
    """``--print-completion SHELL``, for every shell shtab supports (README.md names them,
    tests/test_cli.py compares): a completion script made by shtab from this very parser (so it
    cannot fall behind the options). shtab is imported only when asked (80 ms)."""
    parser.add_argument(
        "--print-completion",
        choices=COMPLETION_SHELLS,
        action=_PrintCompletion,
        help="print a shell completion script and exit",
    )


# shtab.SUPPORTED_SHELLS, written here so that --help does not import shtab (a test compares)
COMPLETION_SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")


class _PrintCompletion(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option: str | None = None,
    ) -> None:
        import shtab

        print(shtab.complete(parser, values))
        parser.exit(0)
