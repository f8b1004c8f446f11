"""Glue the asyncio adapter, the anyio adapter and the CLI share (private).

The decisions are the server core's (``_server.py``: admission, deadlines, the handler's and
the handshake's log lines, statistics); what is here needs a loop or an await. One copy of
each piece, so the adapters cannot drift apart: the handshake driver (it arms the core's
handshake deadline around the whole exchange and closes on failure), a failing handler's fate
(it ends its connection, never the server: ``run_handler``), the anyio server loop that the
anyio listener and ``gcmstream listen`` share (``serve_listener``), accept loops that survive
EMFILE, what the end made by leaving ``async with`` ignores (``PEER_GONE``), the guard against
an opener that needs input but cannot take any, cause chaining onto a truncation, fairness,
one receive size and one logger."""

from __future__ import annotations

import asyncio
import collections
import enum
import errno
import logging
import math
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import AsyncResource, SocketAttribute

from ._server import AnyOpener, ConnectionDeadlines, Deadline, ServerCore, log_handler_failure
from .admission import REPORT_INTERVAL
from .codec import Channel, Opener
from .config import DEFAULT_HANDSHAKE_TIMEOUT as DEFAULT_HANDSHAKE_TIMEOUT  # the adapters' defaults
from .config import DEFAULT_IDLE_TIMEOUT as DEFAULT_IDLE_TIMEOUT
from .config import DEFAULT_RECORD_TIMEOUT as DEFAULT_RECORD_TIMEOUT
from .config import Configuration
from .errors import TruncatedStreamError
from .format import RECORD_HEADER_SIZE, TAG_SIZE

logger = logging.getLogger("gcmstream")

RECEIVE_SIZE = 256 * 1024
"""Bytes asked of a transport per read (wrapped asyncio streams, anyio byte streams)."""

# A reader yields to its event loop once it has opened this much without waiting for input,
# so a peer that slices its stream into tiny records cannot hold the loop: 64 one-byte records
# cost ~0.2 ms, 4 MiB of full records ~0.5 ms (benchmarks/README.md, the flood row).
FAIR_RECORDS = 64
FAIR_BYTES = 4 * 1024 * 1024


# What the end that leaving ``async with`` makes (FINAL, then a half-close) raises when the peer
# has gone: it ended its stream and closed its socket (a client that read its answer), so the
# half-close finds the connection reset (ENOTCONN) or the send a broken pipe. Neither adapter
# raises that from the block, as trio's SSLStream.aclose suppresses BrokenResourceError when its
# close_notify cannot be sent: FINAL is all that end sends, and a peer that is gone needs none.
# (An explicit write_eof()/send_eof() still raises: the caller asked.)
PEER_GONE: tuple[type[BaseException], ...] = (OSError, anyio.BrokenResourceError)


class Fairness:
    """What one reader has opened since it last gave its event loop to others."""

    __slots__ = ("bytes", "records")

    def __init__(self) -> None:
        self.records = self.bytes = 0

    def owed(self, opener: AnyOpener) -> bool:
        """True (and the count starts again) when the reader should yield before going on."""
        if (
            opener.records_opened - self.records >= FAIR_RECORDS
            or opener.bytes_opened - self.bytes >= FAIR_BYTES
        ):
            self.waited(opener)
            return True
        return False

    def waited(self, opener: AnyOpener) -> None:
        """The reader just waited for input (the loop ran others meanwhile)."""
        self.records, self.bytes = opener.records_opened, opener.bytes_opened


Send = Callable[[bytes], Awaitable[None]]
ReceiveMore = Callable[[], Awaitable[object]]
Abort = Callable[[], Awaitable[None]]


async def handshake(
    channel: Channel,
    send: Send,
    receive_more: ReceiveMore,
    *,
    time_limit: float | None = None,
    abort: Abort,
    on_handshake_input: Callable[[Opener], object] | None = None,
    deadlines: ConnectionDeadlines | None = None,
    scope: anyio.CancelScope | None = None,
) -> None:
    """Run the channel handshake before its deadline: ``deadlines``' (the server core's rule,
    ``ConnectionDeadlines.handshake_started``), or ``time_limit`` seconds from now (None: no
    limit) when none is given. On any failure (the peer's header, a timeout, a lost
    connection, a cancellation) the connection is closed at once with ``abort`` and the error
    re-raised, a TimeoutError if the handshake's deadline expired (here, or in the adapter's
    timer, which then cut the transport): a half-made connection is never handed on. On
    success ``deadlines`` learns it (the idle deadline starts). ``on_handshake_input`` is called
    with the channel's opener after each read (the end of the input included: the handshake
    then ends at once), before any answer is computed: a server's admission learns there what
    the peer sent (``Admission.observe``). ``scope``: the cancel scope to run in, not yet
    entered, and its deadline is set here: an anyio server's pending entry, which its admission
    cancels to evict the connection, so that a pending connection enters one scope, not two
    (less memory per pending handshake: tests/test_pending.py); an eviction then ends the handshake as its
    deadline does, and the server core says nothing of it (``ServerCore.handshake_failed``).

    What the channel has to send (``data_to_send()``) is sent before the next read: the
    handshake's messages alternate, so this completes over a transport without buffering
    (``trio.testing.lockstep_stream_pair``) too. A handshake whose two sides could both send
    at once would need a sender task beside the reads (as issue 11 had)."""
    if deadlines is None:
        deadlines = ConnectionDeadlines(handshake_timeout=time_limit)
    deadlines.handshake_started(anyio.current_time())
    # The handshake's deadline is armed here, once, as a scope around the whole exchange (the
    # sends too: a peer that does not read); the adapter's read timer arms the record's
    # (ConnectionDeadlines.read_timer), and the one expiry is whichever handle_timer named.
    # anyio.fail_after is avoided: its generator-based context manager costs ~0.7 KB more for
    # as long as an unauthenticated peer keeps its handshake pending (issue 21)
    deadline = deadlines.handshake_deadline
    if scope is None:
        scope = anyio.CancelScope()
    scope.deadline = math.inf if deadline is None else deadline
    try:
        with scope:
            await _exchange(channel, send, receive_more, on_handshake_input)
        if scope.cancelled_caught:  # its deadline (or a server's eviction: see above)
            deadlines.handle_timer(max(anyio.current_time(), scope.deadline))
            raise TimeoutError
    except BaseException as exc:
        channel.end_handshake()  # a timeout or a cancellation ends it too: drop its secrets
        with anyio.CancelScope(shield=True):
            await abort()
        if deadlines.expired is Deadline.HANDSHAKE and not isinstance(exc, TimeoutError):
            raise TimeoutError from exc  # the adapter's timer cut the transport: a timeout
        raise
    deadlines.handshake_complete(anyio.current_time())


async def _exchange(
    channel: Channel,
    send: Send,
    receive_more: ReceiveMore,
    on_handshake_input: Callable[[Opener], object] | None,
) -> None:
    # One task sends, then reads: the channel's messages alternate (docs/FORMAT.md 5.2). The
    # responder sends nothing before the initiator's header is whole and nothing after its
    # Finished; the initiator sends its Finished only once the responder's arrived. So neither
    # side ever waits to send while its peer waits to send, even over a transport that does not
    # buffer (trio's lockstep pair), and a server waiting for a Finished holds no second task
    # (the bound on an unconfirmed connection, tests/test_pending.py).
    #
    # What is queued is sent before the peer's error is raised, so a responder answers a
    # verified header however the peer's bytes were split (a replayed header and Finished that
    # arrive together get the fresh answer too: gcmstream.testing.check_replay_rejected). A
    # send that fails once the opener found an error raises that error, the send's failure as
    # its context (review 10b LOW-7.3): it names what the peer did, the failed send is its effect.
    while True:
        while data := channel.data_to_send():
            try:
                await send(data)
            except Exception:
                if channel.opener.failed:
                    channel.handshake_complete()  # raises the peer's error
                raise
        if channel.handshake_complete():  # (raises the peer's error)
            return
        await receive_more()
        if on_handshake_input is not None:  # at once: computing the answer takes a while
            on_handshake_input(channel.opener)
        # an admission that evicted this connection cancelled it: do not compute an answer
        # (0.83 ms of CPU, issue 24) that nobody will read; under a flood that waste grows
        await anyio.lowlevel.checkpoint_if_cancelled()


async def run_handler(
    call: Callable[[], Awaitable[object] | None],
    peer: object,
    *,
    abort: Abort,
    what: str = "handler",
    report: Callable[[Exception], None] | None = None,
    failed: Callable[[Exception, object, str], None] = log_handler_failure,
) -> None:
    """Run one connection's handler so that its failure ends that connection only, never the
    server (every server path calls this, the rule is here once). An Exception is passed to
    ``failed`` (the server core's ``ServerCore.handler_failed``: one log line with the peer),
    then to ``report`` (asyncio: the loop's exception handler), and the connection is closed at
    once with ``abort``, without FINAL, so the client cannot take what it got for a complete
    stream. Cancellations (BaseException) propagate."""
    try:
        result = call()
        if result is not None:
            await result
    except Exception as exc:
        failed(exc, peer, what)
        if report is not None:
            report(exc)
        await abort()


def receive_size(opener: AnyOpener) -> int:
    """How many bytes to ask a byte stream for, so that reads end on record boundaries: before
    confirmation what the handshake needs (an unconfirmed peer makes us hold nothing more);
    then the rest of a record part-way in, and as many whole records of the peer's record
    size as fit in ``RECEIVE_SIZE``. A record split between two reads is copied into the ring;
    one that arrives whole in a read is opened where it lies (benchmarks/README.md, issue 23)."""
    if opener.header_missing:
        return opener.header_missing
    header = opener.header
    if header is None:
        return RECEIVE_SIZE
    wire = RECORD_HEADER_SIZE + header.record_size + TAG_SIZE
    missing = opener.record_missing
    if missing >= RECEIVE_SIZE:  # a large record: its rest in reads of the usual size
        return RECEIVE_SIZE
    return missing + (RECEIVE_SIZE - missing) // wire * wire or RECEIVE_SIZE


def check_can_take_input(opener: AnyOpener) -> None:
    """Called before waiting for input: an opener that needs input but refuses it would make
    the reader spin forever."""
    if not opener.wants_data:
        raise RuntimeError("gcmstream bug: the opener needs input but cannot take any")


def blame_connection(exc: TruncatedStreamError, connection_error: BaseException | None) -> None:
    """A truncation caused by a lost connection says so: the transport's error is its cause."""
    if exc.__cause__ is None and connection_error is not None:
        exc.__cause__ = connection_error


ACCEPT_RETRY_DELAY = 0.1
"""Seconds an accept loop waits after the process or the system ran out of descriptors or
memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) before it accepts again. asyncio's own server waits
1 s (``asyncio.constants.ACCEPT_RETRY_DELAY``); anyio's ``serve()`` ends instead."""

_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_exhausted_logged_at = -math.inf  # process-wide: the descriptor limit is the process's


def _out_of_resources(exc: BaseException) -> bool:
    # anyio on asyncio raises the OSError; on trio, BrokenResourceError from it; a MultiListener,
    # a group of them
    if isinstance(exc, BaseExceptionGroup):
        return all(_out_of_resources(each) for each in exc.exceptions)
    if isinstance(exc, anyio.BrokenResourceError):
        exc = exc.__cause__ or exc
    return isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES


def _say_exhausted(exc: BaseException) -> None:
    """A warning at most every ``REPORT_INTERVAL`` seconds (process-wide, as the limit is)."""
    global _exhausted_logged_at
    now = time.monotonic()  # (not the loop's clock: trio's has a random offset, this is global)
    if now - _exhausted_logged_at >= REPORT_INTERVAL:
        _exhausted_logged_at = now
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        cause = exc.__cause__ if isinstance(exc, anyio.BrokenResourceError) else exc
        logger.warning("accept() failed (%s); retrying every %g s", cause, ACCEPT_RETRY_DELAY)


async def serve_retrying(
    listener: Any, handler: Callable[[Any], Awaitable[object]], task_group: Any | None
) -> None:
    """``listener.serve(handler, task_group)``, served again after ``ACCEPT_RETRY_DELAY`` when
    it ended for want of descriptors or memory (anyio's ``serve()`` ends there when its accept
    fails), with a warning at most every ``REPORT_INTERVAL`` seconds (review 2026-12-04
    finding 2): the server goes on once connections close. Any other failure propagates. The
    handlers run in ``task_group`` or in one of this call's, which outlives the restarts: a
    connection being served is not waited for before accepting again."""
    async with anyio.create_task_group() as own:
        handlers = own if task_group is None else task_group
        while True:
            try:
                await listener.serve(handler, handlers)
                return
            except BaseException as exc:  # (a MultiListener's is a group)
                if not _out_of_resources(exc):
                    raise
                _say_exhausted(exc)
            await anyio.sleep(ACCEPT_RETRY_DELAY)


UNKNOWN_PEER = "an unknown peer"
"""How a log line names a peer whose address could not be asked (it was gone already)."""


def remote_address(transport: Any) -> Any:
    """An anyio stream's peer address, or None where there is none to ask."""
    return _socket_extra(transport, SocketAttribute.remote_address)


def _socket_extra(transport: Any, attribute: Any) -> Any:
    """``transport``'s anyio socket ``attribute``, or None where there is none to ask: on uvloop
    a connection reset before its handler ran has no socket left, and asking raised
    AttributeError, or ValueError ("negative file descriptor", from uvloop's PseudoSocket), out
    of the handler, which ended ``serve()`` for every client (the new user's ``make check``,
    2026-12-05, 3 runs of 4 of a test under load)."""
    try:
        return transport.extra(attribute, None)
    except (AttributeError, OSError, ValueError):
        return None


class _Pending:
    """One handshake in progress on an anyio server: cancelling its scope drops it."""

    __slots__ = ("scope",)

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()

    def drop(self) -> None:
        self.scope.cancel()


S = TypeVar("S", bound=AsyncResource)

Responder = Callable[
    [Any, ConnectionDeadlines, Callable[[Opener], object], anyio.CancelScope], Awaitable[S | None]
]
"""``(transport, deadlines, observe, scope)``: run the responder's handshake over an accepted
transport under the core's deadlines, calling ``observe`` with the opener after each read, in
``scope`` (``handshake(scope=...)``: the admission cancels it to evict the connection); the
stream, or None if ``scope`` was cancelled."""

HandshakeFailed = Callable[[Exception, Any, object, int], Awaitable[None]]
"""``(error, transport, peer, log level)``: a server's word on a client whose handshake failed."""


HUNG_UP = "the connection ended before the peer sent anything"
"""Why a connection whose peer closed before sending a byte failed (``ended_before_sending``)."""

# Linux's struct tcp_info (4.1+): tcpi_bytes_received, a u64 at this offset; it counts the
# sequence space the peer used, so a FIN alone is 1 (checked on 127.0.0.1: 0 after a reset)
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
_BYTES_RECEIVED = slice(128, 136)


# include/net/tcp_states.h: TCP_CLOSE (reset), TCP_CLOSE_WAIT (the peer sent its FIN); tcp_info's
# first byte is the state
_PEER_ENDED_STATES = (7, 8)


def peer_ended_input(sock: Any) -> bool:
    """True if the kernel says the peer of ``sock`` (an accepted TCP socket) ended its input or
    reset: Linux's TCP_INFO state, one getsockopt. False where it cannot be asked (None, not
    Linux, not TCP)."""
    if _TCP_INFO is None or sock is None:
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)
    except (AttributeError, OSError, ValueError):
        return False
    return bool(info) and info[0] in _PEER_ENDED_STATES


class _PeerInputEnded:
    """``peer_ended_input`` of one socket, as a callable: a slotted object, not a closure nor a
    partial, as every pending handshake holds it (tests/test_pending.py's bound)."""

    __slots__ = ("sock",)

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def __call__(self) -> bool:
        return peer_ended_input(self.sock)


def answer_only_a_connected_peer(channel: Channel, sock: Any) -> None:
    """The rule every server path calls (asyncio's ``start_server`` on asyncio and uvloop, the
    anyio listener on asyncio and trio, ``gcmstream listen``, and a responder over streams the
    caller has: ``aio.wrap_streams``, ``SecureStream.wrap``) on the responder's channel with
    the accepted socket: a peer whose input ended (a FIN, or a reset) by the time its header
    verified is not answered (``Channel.ask_before_answering``). It can never send its
    Finished, which needs the answer; a recorded header replayed and hung up on at once cost a
    responder half each (0.3-0.8 ms of CPU), and a flood of them kept the anyio listener to
    0-30 of 50 clients (docs/review-2026-12-04-admission.md, stop 33). Nothing changes where
    the kernel cannot be asked (no socket, not Linux)."""
    if _TCP_INFO is not None and sock is not None:
        channel.ask_before_answering(_PeerInputEnded(sock))


class _SocketEndpoints:
    """A socket's (local, peer) addresses when asked, (None, None) once it cannot say (closed,
    reset): a slotted object, asked only at a refusal, so a pending handshake holds one
    reference, not two addresses (tests/test_pending.py's bound)."""

    __slots__ = ("sock",)

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def __call__(self) -> tuple[object, object]:
        try:
            return self.sock.getsockname(), self.sock.getpeername()
        except (AttributeError, OSError, ValueError):
            return None, None


def tell_endpoints(channel: Channel, sock: Any) -> None:
    """What every adapter calls (asyncio's protocol and ``wrap_streams``, uvloop, anyio's
    ``SecureStream`` on asyncio and trio) with the connection's socket, client and server
    alike, before the handshake's first byte: the channel may ask its addresses
    (``Channel.ask_endpoints``), which decide whether a refusal by this process's own server
    is this client's to raise. Nothing where there is no socket (a memory stream)."""
    if sock is not None:
        channel.ask_endpoints(_SocketEndpoints(sock))


def raw_socket(transport: Any) -> Any:
    """An anyio stream's socket, or None where there is none to ask."""
    return _socket_extra(transport, SocketAttribute.raw_socket)


def anyio_asyncio_protocol(transport: Any) -> Any | None:
    """The protocol under one of anyio's TCP socket streams on asyncio (or uvloop), which reads
    the socket from the moment it is accepted into its ``read_queue``; None for any other
    stream. These are anyio's private fields: if a later anyio changes them, None, and the
    callers do without (the anyio adapter's direct feed, the admission's look)."""
    kind = type(transport)
    if kind.__module__ != "anyio._backends._asyncio" or kind.__name__ != "SocketStream":
        return None
    inner = getattr(transport, "_protocol", None)
    if (
        isinstance(inner, asyncio.Protocol)
        and isinstance(getattr(inner, "read_queue", None), collections.deque)  # (never a guess:
        and all(hasattr(inner, name) for name in ("is_at_eof", "exception"))  # it credits input)
    ):
        return inner
    return None


def read_already(transport: Any) -> bool:
    """True when ``transport`` took bytes from the kernel before anything read it: anyio on
    asyncio reads an accepted socket at once, so a first flight that arrived before the accept
    is in its queue, no longer in the kernel (review 2026-12-05, LOW-1)."""
    inner = anyio_asyncio_protocol(transport)
    return inner is not None and bool(inner.read_queue)


class KernelInput(enum.Enum):
    """What the kernel holds of an accepted connection's input before the server read any
    (:func:`kernel_input`)."""

    UNKNOWN = enum.auto()  # it cannot be asked (no socket, not Linux), or its bytes were read
    NOTHING_YET = enum.auto()  # connected, no byte arrived
    WAITING = enum.auto()  # bytes arrived and wait to be read
    HUNG_UP = enum.auto()  # its input ended (or it reset) and no byte was ever received


def _second_object(sock: Any) -> socket.socket | None:
    """A second socket object on ``sock``'s descriptor, not owning it (``detach()`` it); None
    if there is no descriptor to ask."""
    try:
        fd = -1 if sock is None else sock.fileno()
        return None if fd < 0 else socket.socket(fileno=fd)
    except (AttributeError, OSError, ValueError):
        return None


def kernel_input(sock: Any) -> KernelInput:
    """The one look at an accepted socket's input (a socket, asyncio's TransportSocket, an anyio
    raw socket: anything with ``fileno()``; None: UNKNOWN): a non-blocking ``MSG_PEEK`` of one
    byte, and for an ended input what the kernel counted received (Linux's TCP_INFO: on asyncio
    the transport may have read the bytes already). UNKNOWN where either cannot be asked."""
    look = None if _TCP_INFO is None else _second_object(sock)
    if look is None:
        return KernelInput.UNKNOWN
    try:
        try:
            if look.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b"":
                return KernelInput.WAITING
        except BlockingIOError:
            return KernelInput.NOTHING_YET
        except OSError:
            pass  # reset
        info = look.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _BYTES_RECEIVED.stop)  # type: ignore[arg-type]
        if len(info) < _BYTES_RECEIVED.stop:
            return KernelInput.UNKNOWN  # a kernel before 4.1
        if int.from_bytes(info[_BYTES_RECEIVED], sys.byteorder) <= 1:  # a FIN at most
            return KernelInput.HUNG_UP
        return KernelInput.UNKNOWN  # it sent bytes, read already, then ended
    except OSError:
        return KernelInput.UNKNOWN
    finally:
        look.detach()


def ended_before_sending(transport: Any) -> bool:
    """True if ``transport``'s peer (an anyio stream) ended its input (or reset) and sent no
    byte before (:func:`kernel_input`): it can never send a header, so a server closes it before
    building anything for a handshake (review 2026-12-04 finding 3: a flood of connections that
    connect and hang up cost the anyio listener a channel, a cancel scope and two forced closes
    each). False where the kernel cannot be asked: the handshake then runs as always. A genuine
    client has sent at most its header before it is accepted, and never ends its input before
    its Finished, which needs the server's answer."""
    return kernel_input(raw_socket(transport)) is KernelInput.HUNG_UP


T = TypeVar("T")


def admit(core: ServerCore[T], connection: T, address: object, sock: Any, *, read: bool = False) -> bool:
    """The admission every server path calls (asyncio's ``start_server`` on asyncio and uvloop,
    the anyio listener, ``gcmstream listen``) on a connection it accepted, with its socket,
    before reading any of it: ``ServerCore.admit``, then a connection whose first bytes are
    already in the kernel (:func:`kernel_input`) counts as having received part of a header
    (``Admission.received``), not as silent. The servers read a connection only after
    admitting it (asyncio on a later loop pass), so without this a client whose header had
    arrived while it queued was admitted as silent, and under a flood of connections trickling
    a header a byte at a time the newcomers evicted it first: asyncio's server kept 0 of 50
    clients (docs/review-2026-12-04-admission.md, "Stop 33: the review of the pacing").
    ``read``: the connection's stream took bytes from the kernel already (:func:`read_already`),
    which count the same."""
    if not core.admit(connection, address):
        return False
    if read or kernel_input(sock) is KernelInput.WAITING:
        core.admission.received(connection)
    return True


async def serve_listener(
    listener: Any,
    config: Configuration,
    responder: Responder[S],
    handler: Callable[[S], Any],
    handshake_failed: HandshakeFailed,
    task_group: Any | None = None,
    log: logging.Logger = logger,
    truncation: Callable[[str], Exception] = TruncatedStreamError,
) -> None:
    """The anyio server loop, for ``SecureListener.serve`` and ``gcmstream listen``: every
    connection ``listener`` accepts goes through one :class:`~gcmstream._server.ServerCore`
    (admission, deadlines, handler isolation); ``handler`` runs with each stream whose handshake
    completed (``run_handler``: its failure ends that connection only). A failed handshake is
    passed to ``handshake_failed`` with the level the core chose; none for one the admission
    refused or evicted (its report counts those); ``log`` takes the core's count of keyless
    failures (``FailureReport``). Survives EMFILE (``serve_retrying``). A connection whose peer
    hung up before sending anything (:func:`ended_before_sending`) is closed at once, passed to
    ``handshake_failed`` as ``truncation(HUNG_UP)`` at the core's level, and never admitted."""
    # an evicted handshake is cancelled: its transport is closed, nothing logged per connection
    core: ServerCore[_Pending] = ServerCore(config, _Pending.drop, log=log)

    async def handle(transport: Any) -> None:
        # Nothing out of here reaches the listener's task group, where it would end serve() for
        # every client: the handshake and the handler isolate their own failures, and what comes
        # before them is logged (one error line, its traceback) and its connection closed (a
        # socket uvloop closed under the server's looks raised ValueError: the new user's make
        # check, 2026-12-05). In this one frame: a wrapper's was 435 B more per pending
        # connection (tests/test_pending.py's listen case run alone, a new user's clean clone).
        try:
            # the address, while it can still be asked: a closed socket no longer knows it
            address = remote_address(transport)
            peer = UNKNOWN_PEER if address is None else address
            if ended_before_sending(transport):  # no channel, scope or task for it: it sent nothing
                await anyio.aclose_forcefully(transport)
                exc = truncation(HUNG_UP)
                await handshake_failed(exc, transport, peer, core.ended_before_sending(exc))
                return
            entry = _Pending()
            # Let the reads that became ready with this arrival run first: a client whose first
            # flight is in must be seen as such (Admission.observe) before a newcomer that came
            # with it is admitted, or a silent newcomer evicts it (review 2026-12-04 finding 1;
            # on trio, which runs ready tasks in random order, it did in about half the runs).
            # asyncio's server gets this order from its loop: reads run before connection_made.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            if not admit(core, entry, address, raw_socket(transport), read=read_already(transport)):
                await anyio.aclose_forcefully(transport)  # refused: its source is at its cap
                return
            try:  # (the responder's handshake runs in entry.scope: one scope per pending connection)
                stream: S | None = await responder(
                    transport, core.deadlines(), lambda opener: core.observe(entry, opener), entry.scope
                )
            except Exception as exc:  # (a cancellation is a BaseException on every backend)
                level = core.handshake_failed(entry, exc)
                if level is not None:
                    await handshake_failed(exc, transport, peer, level)
                return
            except BaseException:
                core.handshake_cancelled(entry)
                raise
            if stream is None or entry.scope.cancel_called or not core.handshake_completed(entry):
                core.handshake_cancelled(entry)  # evicted (counted by the admission's report)
                await anyio.aclose_forcefully(transport)
                return
            served = stream

            async def abort() -> None:
                await anyio.aclose_forcefully(served)  # aclose never seals FINAL

            await run_handler(lambda: handler(served), peer, abort=abort, failed=core.handler_failed)
        except Exception as exc:
            log_handler_failure(exc, remote_address(transport) or UNKNOWN_PEER, "admitting a connection")
            await anyio.aclose_forcefully(transport)

    try:
        await serve_retrying(listener, handle, task_group)  # survives EMFILE
    finally:  # (listen ends here once it has its peer: the failures before it are said)
        core.failures.report_due(final=True)
