"""The ``gcmstream`` command (also ``python -m gcmstream``): keys, files, pipes and sockets.

Every failure is one line on stderr and an exit status of its own (``EXIT_CODES``); a
traceback is shown only for a bug, and only with GCMSTREAM_DEBUG=1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import stat
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import anyio
from anyio import AsyncFile, from_thread, to_thread
from anyio.abc import ByteStream, SocketStream
from anyio.lowlevel import current_token
from anyio.streams.memory import MemoryObjectReceiveStream

from .anyio_stream import SecureStream, connect_tcp
from .codec import Opener, Sealer
from .errors import (
    KeyCommitmentError,
    ProtocolError,
    StreamBrokenError,
    TruncatedStreamError,
    UnsupportedFormatError,
    UsageError,
)
from .format import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_RECORD_SIZE,
    HARD_MAX_RECORD_SIZE,
    MAX_CONTEXT_SIZE,
    Role,
    generate_key,
)
from .keyfile import KeyFileError, format_key, parse_key, read_key_file, write_key_file
from .pipeline import CHUNK_SIZE, _decrypt, _encrypt, _reader, _writer, atomic_output

__all__ = (
    "EXIT_CODES",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_TAMPERED",
    "EXIT_TRUNCATED",
    "EXIT_UNSUPPORTED",
    "EXIT_USAGE",
    "EXIT_WRONG_KEY",
    "HANDSHAKE_TIMEOUT",
    "KEY_ENV",
    "main",
)

KEY_ENV = "GCMSTREAM_KEY"
HANDSHAKE_TIMEOUT = DEFAULT_HANDSHAKE_TIMEOUT  # seconds for the whole channel handshake
DEBUG_ENV = "GCMSTREAM_DEBUG"

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_WRONG_KEY = 3
EXIT_TAMPERED = 4
EXIT_TRUNCATED = 5
EXIT_IO = 6
EXIT_UNSUPPORTED = 7
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "internal error (a bug: please report it)",
    EXIT_USAGE: "usage: bad arguments, no key or a malformed key, refused to overwrite a key "
    "file or to write ciphertext to a terminal",
    EXIT_WRONG_KEY: "wrong key or wrong --context (checked before any record is opened)",
    EXIT_TAMPERED: "tampered or corrupt input: a record failed authentication or broke a rule, "
    "or data follows the end of the stream",
    EXIT_TRUNCATED: "truncated input: it ended before the authenticated end of the stream",
    EXIT_IO: "I/O error: a file, pipe or connection failed",
    EXIT_UNSUPPORTED: "not gcmstream data, or a format version or suite this version does not read",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_TERMINATED: "terminated (SIGTERM or SIGHUP); like Ctrl-C, no partial output file is left",
}

_KEY_HELP = (
    f"key file written by 'gcmstream keygen'; without it the key text is read from the "
    f"environment variable {KEY_ENV} (the key file's line, e.g. {KEY_ENV}=$(cat KEYFILE))"
)
_EXIT_EPILOG = "exit status:\n" + "\n".join(
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


class _Usage(Exception):
    """A usage error found after parsing: reported as one line, exit status 2."""


class _Terminated(Exception):
    """SIGTERM or SIGHUP arrived; the command was cancelled (so its cleanup ran)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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


def _context(text: str) -> bytes:
    data = text.encode("utf-8", "surrogateescape")
    if len(data) > MAX_CONTEXT_SIZE:
        raise argparse.ArgumentTypeError(f"longer than {MAX_CONTEXT_SIZE} bytes")
    return data


def _address(text: str, *, default_host: str | None) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep:
        if default_host is None:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
        host = default_host
    host = host.strip("[]")  # [::1]:9000
    if not host:
        if default_host is None:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
        host = default_host
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0..65535")
    return host, port


def _build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="gcmstream",
        description="Encrypt and authenticate streams as AES-GCM records: files, pipes and TCP sockets.",
        epilog=_EXIT_EPILOG,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=textwrap.fill(description, 78),
            epilog=_EXIT_EPILOG,
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

    def key_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-k", "--key-file", metavar="KEYFILE", help=_KEY_HELP)
        sub.add_argument(
            "--context",
            metavar="TEXT",
            type=_context,
            default=b"",
            help="text bound to the stream (a purpose, a file name); the other side needs the same TEXT",
        )

    def io_options(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument("-i", "--input", metavar="IN", default="-", help=f"{what} to read (default: stdin)")
        sub.add_argument(
            "-o", "--output", metavar="OUT", default="-", help="where to write (default: stdout)"
        )
        sub.add_argument(
            "-q", "--quiet", action="store_true", help="no progress bar (shown on a terminal for files)"
        )

    encrypt = command(
        "encrypt",
        "encrypt a file or stdin",
        "Encrypt IN (default stdin) into OUT (default stdout; refused if stdout is a terminal). "
        "Output to a file is written to a temporary file and renamed when complete.",
    )
    key_options(encrypt)
    io_options(encrypt, "plaintext")
    encrypt.add_argument(
        "--record-size",
        metavar="N",
        type=_size,
        default=DEFAULT_RECORD_SIZE,
        help=f"plaintext bytes per record, e.g. 16K (default {DEFAULT_RECORD_SIZE // 1024}K)",
    )

    decrypt = command("decrypt", "decrypt and verify a file or stdin", "Decrypt IN into OUT. " + _STDOUT_NOTE)
    key_options(decrypt)
    io_options(decrypt, "ciphertext")

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
        "stderr as 'listening on HOST:PORT'), accept one peer, then stop listening. " + net_note,
    )
    listen.add_argument("address", metavar="[HOST:]PORT", help="address to listen on")
    key_options(listen)
    listen.add_argument("-q", "--quiet", action="store_true", help="do not print the listening address")
    listen.add_argument(
        "--record-size", metavar="N", type=_size, default=DEFAULT_RECORD_SIZE, help="largest record to send"
    )

    connect = command(
        "connect",
        "connect to a 'gcmstream listen': stdin to socket, socket to stdout",
        "Connect to HOST:PORT where 'gcmstream listen' runs. " + net_note,
    )
    connect.add_argument("address", metavar="HOST:PORT", help="address to connect to")
    key_options(connect)
    connect.add_argument(
        "--record-size", metavar="N", type=_size, default=DEFAULT_RECORD_SIZE, help="largest record to send"
    )
    return parser


def _version() -> str:
    from . import __version__

    return __version__


# -- keys ---------------------------------------------------------------------------------------


def _load_key(key_file: str | None) -> bytes:
    if key_file is not None:
        try:
            return read_key_file(key_file)
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


def _keygen(args: argparse.Namespace) -> int:
    key = generate_key(256 if args.suite == "aes256" else 128)
    if args.output == "-":  # e.g. GCMSTREAM_KEY=$(gcmstream keygen -o -)
        sys.stdout.write(format_key(key) + "\n")
        sys.stdout.flush()
        return EXIT_OK
    try:
        write_key_file(args.output, key, force=args.force)
    except FileExistsError:
        raise _Usage(f"{args.output} exists; use --force to overwrite it") from None
    return EXIT_OK


# -- files, stdin, stdout ---------------------------------------------------------------------


def _stdio(fd: int, mode: str) -> AsyncFile[bytes]:
    raw: IO[bytes] = open(fd, mode, buffering=0, closefd=False)  # noqa: SIM115 (fd stays open)
    return anyio.wrap_file(raw)


def _is_terminal(path: str) -> bool:
    if path == "-":
        return os.isatty(sys.stdout.fileno())
    try:
        if not stat.S_ISCHR(os.stat(path).st_mode):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False  # opening it for real reports the problem
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def _regular_size(fd: int) -> int | None:
    st = os.fstat(fd)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


@dataclass
class _Progress:
    """A tqdm bar on stderr, only when stderr is a terminal and the input size is known."""

    bar: Any = None

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
            unit_divisor=1024,
            file=sys.stderr,
            leave=False,
            dynamic_ncols=True,
        )
        return cls(bar)

    def update(self, count: int) -> None:
        self.bar.update(count)

    @property
    def callback(self) -> Callable[[int], object] | None:
        return self.update if self.bar is not None else None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextlib.asynccontextmanager
async def _open_input(path: str) -> AsyncIterator[tuple[AsyncFile[bytes], int | None]]:
    if path == "-":
        yield _stdio(sys.stdin.fileno(), "rb"), _regular_size(sys.stdin.fileno())
        return
    async with await anyio.open_file(path, "rb", buffering=0) as file:
        yield file, _regular_size(file.wrapped.fileno())


@contextlib.asynccontextmanager
async def _open_output(path: str) -> AsyncIterator[AsyncFile[bytes]]:
    if path == "-":
        yield _stdio(sys.stdout.fileno(), "wb")
        return
    async with atomic_output(path) as file:
        yield file


async def _encrypt_command(args: argparse.Namespace, key: bytes) -> None:
    if _is_terminal(args.output):
        raise _Usage("refusing to write ciphertext to a terminal: use -o FILE or redirect stdout")
    sealer = Sealer(key, context=args.context, record_size=args.record_size)
    async with _open_input(args.input) as (source, size):
        progress = _Progress.start(size, "encrypt", args.quiet)
        try:
            async with _open_output(args.output) as sink:
                await _encrypt(_reader(source, CHUNK_SIZE, progress.callback), _writer(sink), sealer)
        finally:
            progress.close()


async def _decrypt_command(args: argparse.Namespace, key: bytes) -> None:
    opener = Opener(key, context=args.context)
    async with _open_input(args.input) as (source, size):
        progress = _Progress.start(size, "decrypt", args.quiet)
        try:
            async with _open_output(args.output) as sink:
                # to stdout: pass each record on as it authenticates; to a file: gather
                read = _reader(source, CHUNK_SIZE, progress.callback)
                await _decrypt(read, _writer(sink), opener, eager=args.output == "-")
        finally:
            progress.close()


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
                chunk = os.read(sys.stdin.fileno(), CHUNK_SIZE)
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
    stdout = _stdio(sys.stdout.fileno(), "wb")

    async def upload(chunks: MemoryObjectReceiveStream[bytes | OSError]) -> None:
        async with chunks:
            while chunk := await chunks.receive():
                if isinstance(chunk, OSError):
                    raise chunk
                await stream.send(chunk)
        await stream.send_eof()  # only at the true end of stdin

    async def download() -> None:
        write = _writer(stdout)
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


async def _accept_one(host: str, port: int, quiet: bool) -> SocketStream:
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with listener:
        bound = listener.extra(anyio.abc.SocketAttribute.local_address)
        if port == 0 or not quiet:
            shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
            print(f"gcmstream: listening on {shown}:{bound[1]}", file=sys.stderr, flush=True)
        accepted: list[SocketStream] = []
        async with anyio.create_task_group() as tg:

            async def accept(sub: Any) -> None:
                stream = await sub.accept()
                if accepted:
                    await stream.aclose()
                    return
                accepted.append(stream)
                tg.cancel_scope.cancel()

            for sub in listener.listeners:
                tg.start_soon(accept, sub)
        return accepted[0]


async def _listen_command(args: argparse.Namespace, key: bytes) -> None:
    host, port = args.address
    transport = await _accept_one(host, port, args.quiet)
    try:
        with anyio.fail_after(HANDSHAKE_TIMEOUT):
            stream = await SecureStream.wrap(
                transport, key=key, role=Role.RESPONDER, context=args.context, record_size=args.record_size
            )
    except BaseException:
        await anyio.aclose_forcefully(transport)
        raise
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
    stream = await connect_tcp(host, port, key=key, context=args.context, record_size=args.record_size)
    await _session_then_close(stream)


# -- errors and main ----------------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    """The error that matters inside task-group exception groups and StreamBrokenError."""
    while True:
        if isinstance(exc, BaseExceptionGroup):
            inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
            exc = (inner or list(exc.exceptions))[0]
        elif isinstance(exc, StreamBrokenError):
            exc = exc.original
        else:
            return exc


def _classify(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, _Usage | UsageError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, KeyCommitmentError):
        return EXIT_WRONG_KEY, f"wrong key or context: {exc}"
    if isinstance(exc, UnsupportedFormatError):
        return EXIT_UNSUPPORTED, f"unsupported input: {exc}"
    if isinstance(exc, TruncatedStreamError):
        return EXIT_TRUNCATED, f"truncated input: {exc}"
    if isinstance(exc, ProtocolError):
        return EXIT_TAMPERED, f"tampered or corrupt input: {exc}"
    if isinstance(exc, TimeoutError):
        return EXIT_IO, "timed out waiting for the channel handshake to complete"
    if isinstance(exc, BrokenPipeError):
        return EXIT_IO, "output closed before the end (broken pipe)"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return EXIT_IO, f"{exc.strerror or exc}{where}"
    if isinstance(exc, anyio.BrokenResourceError | anyio.ClosedResourceError | anyio.EndOfStream):
        cause = exc.__cause__
        return EXIT_IO, f"connection lost{f': {cause}' if cause else ''}"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(exc, _Terminated):
        return EXIT_TERMINATED, str(exc)
    return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


async def _run(
    command: Callable[[argparse.Namespace, bytes], Awaitable[None]], args: argparse.Namespace, key: bytes
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


_COMMANDS = {
    "encrypt": _encrypt_command,
    "decrypt": _decrypt_command,
    "listen": _listen_command,
    "connect": _connect_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _build_parser()
    if argv is None:
        argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.command in ("listen", "connect"):
        try:
            args.address = _address(
                args.address, default_host="127.0.0.1" if args.command == "listen" else None
            )
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument address: {exc}")
    try:
        if args.command == "keygen":
            return _keygen(args)
        key = _load_key(args.key_file)
        anyio.run(_run, _COMMANDS[args.command], args, key)
    except BaseException as exc:  # one line on stderr, never a traceback (unless debugging)
        if isinstance(exc, SystemExit):
            raise
        code, message = _classify(_leaf(exc))
        if code == EXIT_INTERNAL and os.environ.get(DEBUG_ENV):
            raise
        if args.command == "decrypt" and args.output == "-" and code in (EXIT_TAMPERED, EXIT_TRUNCATED):
            message += "; output stops after the last authenticated record"
        with contextlib.suppress(OSError):
            print(f"gcmstream {args.command}: {message}", file=sys.stderr, flush=True)
        return _exit_now_if_stdin_blocked(code)
    return _exit_now_if_stdin_blocked(EXIT_OK)


def _exit_now_if_stdin_blocked(code: int) -> int:
    """A thread blocked reading stdin (a terminal, an idle pipe) holds up interpreter shutdown
    even as a daemon thread; when one is left, flush and leave at once."""
    if any(thread.is_alive() for thread in _stdin_threads):
        with contextlib.suppress(OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    return code
