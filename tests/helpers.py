"""Helpers shared by the tests: keys, deterministic channel ends, and feeding an Opener.

Constants: ``KEY`` (AES-128) and ``SALT`` are the defaults every test uses unless it needs a
key of its own; ``CONTEXT`` is the context of forged streams.

A channel's keys come from fresh ephemeral keys, so a stream one end sent can be opened later
only by an end that repeats the same handshake. ``fixed_channel`` injects fixed salts and fixed
X25519 ephemeral keys (the test-only ``_salt``/``_ephemeral``), so a new end of the same role
always answers the same way: exactly what known-answer and tamper tests need.

Parser tests feed each input three ways (h11's rule, ``WAYS``): all at once, byte by byte (the
opener must answer "need more" and never "end" before the last byte) and with trailing data
(which must raise TrailingDataError and never come out as plaintext). Each way is run with
copying input (``receive_data``) and with zero-copy input (``get_buffer``/``buffer_updated``),
the two ``FEEDS``; ``run`` and ``check_valid`` do both, ``open_chunks`` feeds given chunks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import io
import itertools
import os
import pty
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.abc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gcmstream import (
    DEFAULT_RECORD_SIZE,
    Channel,
    GcmStreamError,
    KeyExchange,
    KeyLimits,
    KeyRing,
    LimitReachedError,
    Opener,
    ProtocolError,
    Role,
    Sealer,
    SecureStreamReader,
    SecureStreamWriter,
    StreamBrokenError,
    TrailingDataError,
    start_server,
)
from gcmstream._fixed import fixed_channel as fixed_randomness_channel
from gcmstream.anyio_stream import SecureStream, create_tcp_listener
from gcmstream.channel import self_connections_allowed
from gcmstream.cli import DEBUG_ENV, KEY_ENV, main
from gcmstream.format import (
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Suite,
    TrafficKeys,
    make_header,
)
from gcmstream.handshake import FixedEphemeral
from gcmstream.header import HeaderSpec
from gcmstream.testing import run_handshake

KEY = bytes(range(16))
SALT = bytes(range(32))
CONTEXT = b"hostile codec tests"

FIXED_SALTS = {Role.INITIATOR: b"\x01" * 32, Role.RESPONDER: b"\x02" * 32}
FIXED_EPHEMERAL = {
    Role.INITIATOR: FixedEphemeral(x25519=bytes(range(1, 33))),
    Role.RESPONDER: FixedEphemeral(x25519=bytes(range(33, 65))),
}


def fixed_channel(key: bytes, role: Role, **options: Any) -> Channel:
    """A channel end with a fixed salt (option ``salt``, or the role's) and fixed X25519
    ephemeral key (X25519 suite)."""
    options.setdefault("salt", FIXED_SALTS[role])
    return fixed_randomness_channel(
        key, role=role, key_exchange=KeyExchange.X25519, ephemeral=FIXED_EPHEMERAL[role], **options
    )


def fixed_pair(key: bytes, **options: Any) -> tuple[Channel, Channel]:
    """(initiator, responder), handshake done, both deterministic."""
    initiator = fixed_channel(key, Role.INITIATOR, **options)
    responder = fixed_channel(key, Role.RESPONDER, **options)
    run_handshake(initiator, responder)
    assert initiator.handshake_complete() and responder.handshake_complete()
    return initiator, responder


def vector_channel(case: Mapping[str, object], **options: Any) -> Channel:
    """The reading end of an invalid channel vector (tests/vectors/invalid/README.md): a
    RESPONDER for mode "channel", an INITIATOR for "channel-initiator", with the vector's
    fixed salt, ephemeral keys, key or key ring, key exchange and peer_id (``options``: other
    Channel keywords). Its first flight is taken, and an INITIATOR's must be the vector's
    ``receiver_sends``: the answer in ``input`` is bound to it by the transcript."""
    initiator = case["mode"] == "channel-initiator"
    peer_id, ring, seed = (case.get(f"receiver_{name}") for name in ("peer_id", "key_ring", "mlkem768_seed"))
    key = bytes.fromhex(str(case["key"]))
    channel = fixed_randomness_channel(
        KeyRing([bytes.fromhex(k) for k in ring]) if isinstance(ring, list) else key,
        role=Role.INITIATOR if initiator else Role.RESPONDER,
        context=bytes.fromhex(str(case["context"])),
        record_size=int(str(case["receiver_record_size"])),
        key_exchange=KeyExchange(int(str(case["receiver_key_exchange"]))),
        peer_id=bytes.fromhex(str(peer_id)) if peer_id is not None else None,
        salt=bytes.fromhex(str(case["receiver_salt"])),
        ephemeral=FixedEphemeral(
            x25519=bytes.fromhex(str(case["receiver_x25519"])),
            mlkem_seed=bytes.fromhex(str(seed)) if seed is not None else None,
        ),
        **options,
    )
    assert channel.initial_data() == bytes.fromhex(str(case.get("receiver_sends", "")))
    return channel


def handshake_bytes(initiator: Channel, responder: Channel) -> tuple[bytes, bytes]:
    """Run the handshake and return what each side sent before its records: (the initiator's
    header and Finished, the responder's header and Finished). Works outside tests too (at
    import), where the conftest fixture does not apply."""
    with self_connections_allowed():
        responder.initial_data()
        hello = initiator.initial_data()
        responder.opener.receive_data(hello)
        answer = responder.data_to_send()
        initiator.opener.receive_data(answer)
        finished = initiator.data_to_send()
        responder.opener.receive_data(finished)
        assert initiator.handshake_complete() and responder.handshake_complete()
    return hello + finished, answer


JUNK = b"\x00trailing junk"

FEEDS = ["copy", "zero-copy"]
WAYS = ["all", "bytewise", "trailing"]


# -- helpers ---------------------------------------------------------------------------------


def seal_stream(
    writes: list[bytes],
    *,
    record_size: int = 7,
    key: bytes = KEY,
    context: bytes = b"",
    flush_after: bool = False,
    limits: KeyLimits | None = None,
) -> bytes:
    sealer = Sealer(key, context=context, record_size=record_size, limits=limits)
    out = bytearray()
    for data in writes:
        out += sealer.seal(data)
        if flush_after:
            out += sealer.flush()
    out += sealer.close()
    return bytes(out)


def records(wire: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, flags, wire length) of each record of a valid stream."""
    pos = HEADER_SIZE
    while pos < len(wire):
        flags, length = RECORD_HEADER.unpack_from(wire, pos)
        yield pos, flags, RECORD_HEADER_SIZE + length
        pos += RECORD_HEADER_SIZE + length


def drain(opener: Opener, out: bytearray) -> bool:
    """Read everything that is ready into ``out``; True if the authenticated end was reached."""
    while True:
        got = opener.read()
        if got is None:
            return False
        if not got:
            return True
        out += got


def feed(opener: Opener, chunk: bytes, how: str, out: bytearray) -> None:
    """Give ``chunk`` to the opener, reading whenever it has no room (as an adapter would)."""
    if how == "copy":
        opener.receive_data(chunk)
        return
    pos = 0
    while pos < len(chunk):
        room = opener.get_buffer()
        if not room:
            before = len(out)
            drain(opener, out)
            room = opener.get_buffer()
            if not room:
                if len(out) == before:  # no room and nothing to read: only a failed opener
                    opener.read()  # raises the error that stops input
                    raise AssertionError("deadlock: opener offers no room and has nothing to read")
                continue
        count = min(len(room), len(chunk) - pos)
        room[:count] = chunk[pos : pos + count]
        opener.buffer_updated(count)
        pos += count


@dataclass
class Outcome:
    plaintext: bytes
    error: GcmStreamError | None
    ended_at: int | None  # index of the chunk after which the end was first reported


def chunks_for(data: bytes, way: str) -> list[bytes]:
    if way == "all":
        return [data]
    if way == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    if way == "trailing":
        return [data + JUNK]
    raise AssertionError(way)


def run(
    data: bytes, way: str, how: str, make: Callable[[], Opener] = lambda: Opener(KEY), eof: bool = True
) -> Outcome:
    opener = make()
    out = bytearray()
    ended_at: int | None = None
    chunks = chunks_for(data, way)
    try:
        for index, chunk in enumerate(chunks):
            feed(opener, chunk, how, out)
            if drain(opener, out) and ended_at is None:
                ended_at = index
        if eof:
            opener.receive_eof()
        if drain(opener, out) and ended_at is None:
            ended_at = len(chunks)
    except GcmStreamError as exc:
        error: GcmStreamError | None = exc
    else:
        return Outcome(bytes(out), None, ended_at)
    assert isinstance(error, ProtocolError), f"{type(error).__name__} is not a protocol error"
    # After the error, everything raises StreamBrokenError (or, once, the error itself).
    with pytest.raises(GcmStreamError):
        opener.read()
    with pytest.raises(StreamBrokenError) as broken:
        opener.read()
    assert broken.value.original is error
    assert broken.value.__cause__ is error
    return Outcome(bytes(out), error, ended_at)


def check_valid(
    data: bytes, plaintext: bytes, way: str, how: str, make: Callable[[], Opener] = lambda: Opener(KEY)
) -> None:
    outcome = run(data, way, how, make)
    if way == "trailing":
        assert isinstance(outcome.error, TrailingDataError)
        assert plaintext.startswith(outcome.plaintext)
        assert JUNK not in outcome.plaintext
        return
    assert outcome.error is None
    assert outcome.plaintext == plaintext
    # The end is reported after the last byte and not before.
    last = len(chunks_for(data, way)) - 1
    assert outcome.ended_at in (last, last + 1)


# -- reading API semantics -------------------------------------------------------------------


def opened(writes: list[bytes], record_size: int = 7) -> Opener:
    opener = Opener(KEY)
    opener.receive_data(seal_stream(writes, record_size=record_size))
    return opener


def wants_data(opener: Opener) -> bool:
    return opener.wants_data  # a call, so that mypy does not narrow the property across calls


# -- failures are final ------------------------------------------------------------------------


def tampered(wire: bytes, offset: int, mask: int = 1) -> bytes:
    out = bytearray(wire)
    out[offset] ^= mask
    return bytes(out)


def wire_records(wire: bytes) -> list[tuple[int, int]]:
    """(flags, plaintext length) of each record after the stream header."""
    found = []
    pos = HEADER_SIZE
    while pos < len(wire):
        flags, length = RECORD_HEADER.unpack_from(wire, pos)
        found.append((flags, length - TAG_SIZE))
        pos += RECORD_HEADER_SIZE + length
    assert pos == len(wire), "the last record is cut"
    return found


def refuses_untouched(seal: Sealer, data: bytes, **kwargs: bool) -> None:
    """seal() raises LimitReachedError and seals nothing, takes nothing."""
    before = (seal.records_sealed, seal.bytes_sealed, seal.pending, seal.key_generation)
    with pytest.raises(LimitReachedError, match="update_key"):
        seal.seal(data, **kwargs)
    assert (seal.records_sealed, seal.bytes_sealed, seal.pending, seal.key_generation) == before


def feed_zero_copy(opener: Opener, data: bytes) -> None:
    """Through get_buffer/buffer_updated, as many views as the opener offers (a header's fixed
    part first, then the rest once its length is known)."""
    while data:
        room = opener.get_buffer()
        assert room
        count = min(len(room), len(data))
        room[:count] = data[:count]
        opener.buffer_updated(count)
        data = data[count:]


# derandomize: the same examples on every run, so that the suite is deterministic.
PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (taken modulo its length, in any order)."""
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def open_chunks(opener: Opener, chunks: list[bytes], zero_copy: bool, out: bytearray) -> bool:
    """Feed the chunks (reading as needed), then EOF; plaintext goes to ``out`` as it is
    released. True if the authenticated end was reached; errors propagate."""
    how = "zero-copy" if zero_copy else "copy"
    for chunk in chunks:
        feed(opener, chunk, how, out)
        drain(opener, out)
    opener.receive_eof()
    return drain(opener, out)


@st.composite
def sealed_streams(draw: st.DrawFn) -> tuple[bytes, bytes, int]:
    """(wire, plaintext, record size): random writes with random flushes and key updates."""
    record_size = draw(st.integers(1, 64))
    writes = draw(
        st.lists(st.tuples(st.binary(max_size=200), st.sampled_from(["", "flush", "update"])), max_size=8)
    )
    limits = draw(st.sampled_from([None, KeyLimits(update_after_records=3, hard_records=4)]))
    sealer = Sealer(KEY, record_size=record_size, header_spec=HeaderSpec(salt=SALT), limits=limits)
    wire = bytearray()
    for data, then in writes:
        wire += sealer.seal(data)
        if then == "update":
            sealer.update_key()
        if then:
            wire += sealer.flush()
    wire += sealer.close()
    return bytes(wire), b"".join(data for data, _ in writes), record_size


def forge(records: list[tuple[int, bytes]], *, record_size: int = 24) -> tuple[bytes, list[bytes]]:
    """A one-way stream whose records are sealed correctly whatever their flags say."""
    header, secret = make_header(KEY, Role.ONE_WAY, record_size, CONTEXT, SALT)
    keys, seq, out = TrafficKeys(secret, Suite.AES_128_GCM), 0, bytearray(header)
    for flags, plaintext in records:
        record_header = RECORD_HEADER.pack(flags, len(plaintext) + TAG_SIZE)
        out += record_header + keys.aead.encrypt(keys.nonce(seq), plaintext, record_header)
        keys, seq = (keys.next(), 0) if flags & FLAG_KEY_UPDATE else (keys, seq + 1)
    return bytes(out), [p for _, p in records]


def record_offset(index: int, record_size: int = DEFAULT_RECORD_SIZE) -> int:
    """Wire offset of full record ``index`` of a one-way stream sealed with ``record_size``."""
    return HEADER_SIZE + index * (RECORD_HEADER_SIZE + record_size + TAG_SIZE)


def read_all(opener: Opener, wire: bytes) -> bytes:
    """Give the opener the whole of ``wire`` and the end of input; the plaintext up to the
    authenticated end (errors propagate)."""
    opener.receive_data(wire)
    opener.receive_eof()
    out = bytearray()
    while (got := opener.read()) is not None and got:
        out += got
    assert got == b""
    return bytes(out)


class CompareSpy:
    """Stands for the ``hmac`` module inside one gcmstream module (monkeypatch its ``hmac``):
    records every ``compare_digest`` call and answers as hmac does, so a test sees that a
    secret comparison went through the constant-time function (K9), not ``==`` / ``!=``."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, bytes]] = []

    def compare_digest(self, a: bytes, b: bytes) -> bool:
        self.calls.append((bytes(a), bytes(b)))
        return hmac.compare_digest(a, b)

    def __getattr__(self, name: str) -> object:
        return getattr(hmac, name)


# -- the command line in this process ------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    """What one ``gcmstream.cli.main(argv)`` call left: its exit status, stdout, stderr."""

    status: int
    stdout: bytes
    stderr: str


class _LeftTheProcessError(Exception):
    """The CLI called os._exit: in a subprocess it would have left at once; here that is a bug
    of the test (a thread was left blocked), so the call fails instead of ending pytest."""


def _drain(fd: int, into: list[bytes]) -> None:
    while chunk := os.read(fd, 1 << 16):
        into.append(chunk)


def _feed(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):  # the command stopped reading early, as it may
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    os.close(fd)


def pasted_at_a_terminal(text: bytes, mode: int) -> int:
    """A terminal (a pty of ``mode``) at which ``text`` was pasted, then ^D: its descriptor, to
    give a process as stdin (close it after). The echo is drained in a thread."""
    main, terminal = pty.openpty()
    os.fchmod(terminal, mode)
    os.write(main, text.replace(b"\n", b"\r") + b"\x04")  # (the line discipline makes \r \n)
    threading.Thread(target=_drain_terminal, args=(main,), daemon=True).start()
    return terminal


def _drain_terminal(fd: int) -> None:
    with contextlib.suppress(OSError):  # (EIO once the terminal's last user closed it)
        while os.read(fd, 4096):
            pass


def _take_stdin_as_controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # (after setsid: start_new_session)


def cli_process(
    *args: str | Path,
    stdin: int | None = None,
    pass_fds: tuple[int, ...] = (),
    cwd: Path | None = None,
    new_session: bool = False,
    controlling_terminal: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``gcmstream ARGS`` as a real process: its stdin what the shell's ``<FILE`` gives (a
    descriptor; /dev/null when None), ``pass_fds`` the shell's ``3<FILE``, the environment
    without the key variable or the debug switch; ``new_session``: a terminal given as stdin is
    not this session's; ``controlling_terminal``: it is, as /dev/tty (a new session too). For
    what the shell's redirections decide, as an attacker sets them up."""
    environ = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, DEBUG_ENV)}
    return subprocess.run(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        pass_fds=pass_fds,
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        cwd=cwd,
        check=False,
        start_new_session=new_session or controlling_terminal,
        preexec_fn=_take_stdin_as_controlling_terminal if controlling_terminal else None,
    )


def run_cli(*args: str | Path, input: bytes = b"", environ: Mapping[str, str] | None = None) -> CliRun:
    """``gcmstream ARGS`` run in this process: stdin a pipe holding ``input`` (then its end),
    stdout a pipe, as a subprocess with ``input=`` and ``capture_output=True`` gets them, and
    the environment without the key variable or the debug switch unless ``environ`` sets them.

    For what a subprocess adds nothing to (messages, exit statuses, files written); signals,
    terminals, a stdin left open and exit statuses as the shell sees them need a real process
    (tests/test_cli.py keeps those)."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    out: list[bytes] = []
    feeder = threading.Thread(target=_feed, args=(stdin_write, input), daemon=True)
    reader = threading.Thread(target=_drain, args=(stdout_read, out), daemon=True)
    feeder.start()
    reader.start()
    stderr = io.StringIO()
    saved_env = dict(os.environ)
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_exit = os._exit

    def leave(status: int) -> NoReturn:
        raise _LeftTheProcessError(f"the CLI called os._exit({status})")

    try:
        for name in (KEY_ENV, DEBUG_ENV):
            os.environ.pop(name, None)
        os.environ.update(environ or {})
        sys.stdin = io.TextIOWrapper(io.FileIO(stdin_read, "rb", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(stdout_write, "wb", closefd=False), write_through=True)
        sys.stderr = stderr
        os._exit = leave
        try:
            status = main([str(arg) for arg in args])
        except SystemExit as exc:  # argparse: --help, usage errors
            status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        sys.stdout.flush()
    finally:
        os._exit = saved_exit
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        os.close(stdout_write)
        os.close(stdin_read)  # a feeder still writing gets EPIPE and ends
        feeder.join(timeout=60)
        reader.join(timeout=60)
        os.close(stdout_read)
    return CliRun(status, b"".join(out), stderr.getvalue())


def interruptible() -> None:
    """In the child, before exec: SIGINT's default action, as a shell gives a foreground command
    (a job started in the background, as some runners start the suite, inherits SIGINT ignored,
    and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_under_ascii_locale(code: str, *args: str) -> list[str]:
    """Run ``code`` (with ``args`` in sys.argv[1:]) in a fresh Python whose locale encoding is
    ASCII: the C locale without Python's UTF-8 mode and without locale coercion, both of which
    would make it UTF-8 again. The child imports the gcmstream these tests import; its first
    output line is its locale encoding, so that a test can check the setting took. Returns the
    lines it printed."""
    import gcmstream

    environ = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONPATH": str(Path(gcmstream.__file__).parent.parent),
    }
    prelude = "import locale; print(locale.getpreferredencoding(False))\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"the child failed:\n{done.stderr}"
    return done.stdout.splitlines()


# Every gcmstream server path on every loop and backend: (path, anyio backend, its options),
# as the hostile tests parametrize a test that runs against each
SERVER_PATHS = [
    pytest.param("start_server", "asyncio", {}, id="start_server-asyncio"),
    pytest.param("start_server", "asyncio", {"use_uvloop": True}, id="start_server-uvloop"),
    pytest.param("listener", "asyncio", {}, id="listener-asyncio"),
    pytest.param("listener", "asyncio", {"use_uvloop": True}, id="listener-uvloop"),
    pytest.param("listener", "trio", {}, id="listener-trio"),
]


async def closing_server(
    stack: contextlib.AsyncExitStack, path: str
) -> tuple[int, Callable[[], Awaitable[None]]]:
    """A gcmstream server on 127.0.0.1 whose handler closes each connection at once, on
    ``path`` ("start_server": asyncio's, serving at once; else the anyio listener, serving from
    the returned ``start()``, which a test calls when it wants), closed with ``stack``: its
    port and ``start``."""

    async def close_at_once(reader: SecureStreamReader, writer: SecureStreamWriter) -> None:
        writer.close()

    async def close_stream(stream: SecureStream) -> None:
        await stream.aclose()

    async def serving_already() -> None:
        pass

    if path == "start_server":
        server = await start_server(close_at_once, "127.0.0.1", 0, key=KEY)
        await stack.enter_async_context(server)
        return server.sockets[0].getsockname()[1], serving_already
    listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1")
    await stack.enter_async_context(listener)

    async def start() -> None:
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)
        group.start_soon(listener.serve, close_stream)

    return listener.extra(anyio.abc.SocketAttribute.local_port), start
