"""Glue the asyncio adapter, the anyio adapter and the CLI share (private).

One copy of each piece, so the adapters cannot drift apart: the handshake and its
timeout-and-close policy, the handshake-failure log line, a failing handler's fate (it ends its
connection, never the server: ``run_handler``), what the end made by leaving ``async with``
ignores (``PEER_GONE``), the guard against an opener that needs input but cannot take any,
cause chaining onto a truncation, the connection statistics behind ``get_extra_info`` and the
typed attributes, one receive size and one logger.
"""

from __future__ import annotations

import errno
import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import anyio
import anyio.lowlevel

from .admission import DEFAULT_ADMISSION, REPORT_INTERVAL, AdmissionPolicy, fit_to_descriptors
from .codec import Channel, Opener, Sealer
from .config import DEFAULT_HANDSHAKE_TIMEOUT as DEFAULT_HANDSHAKE_TIMEOUT  # the adapters' defaults
from .config import DEFAULT_IDLE_TIMEOUT as DEFAULT_IDLE_TIMEOUT
from .config import DEFAULT_RECORD_TIMEOUT as DEFAULT_RECORD_TIMEOUT
from .errors import TruncatedStreamError
from .format import FieldType
from .tinkstream import TinkOpener, TinkSealer

# What the adapters' one-way reader and writer drive: gcmstream's own coder, or Tink's
# streaming format's (docs/TINK.md), which has the same names for what they call.
AnyOpener: TypeAlias = Opener | TinkOpener
AnySealer: TypeAlias = Sealer | TinkSealer

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
ReceiveMore = Callable[[], Awaitable[None]]
Abort = Callable[[], Awaitable[None]]


async def handshake(
    channel: Channel,
    send: Send,
    receive_more: ReceiveMore,
    *,
    time_limit: float | None,
    abort: Abort,
    on_handshake_input: Callable[[Opener], object] | None = None,
) -> None:
    """Run the channel handshake within ``time_limit`` seconds (None: no limit). On any failure
    (the peer's header, a timeout, a lost connection, a cancellation) the connection is closed
    at once with ``abort`` and the error re-raised: a half-made connection is never handed on.
    ``on_handshake_input`` is called with the channel's opener after each read (the end of
    the input included: the handshake then ends at once), before any answer is computed: a
    server's admission learns there what the peer sent (``Admission.observe``).

    What the channel has to send (``data_to_send()``) is sent before the next read: the
    handshake's messages alternate, so this completes over a transport without buffering
    (``trio.testing.lockstep_stream_pair``) too. A handshake whose two sides could both send
    at once would need a sender task beside the reads (as issue 11 had)."""
    # anyio.fail_after, without its generator-based context manager: that costs ~0.7 KB more
    # for as long as an unauthenticated peer keeps its handshake pending (issue 21)
    deadline = math.inf if time_limit is None else anyio.current_time() + time_limit
    try:
        with anyio.CancelScope(deadline=deadline) as scope:
            await _exchange(channel, send, receive_more, on_handshake_input)
        if scope.cancelled_caught:  # only its deadline cancels this scope
            raise TimeoutError
    except BaseException:
        channel.end_handshake()  # a timeout or a cancellation ends it too: drop its secrets
        with anyio.CancelScope(shield=True):
            await abort()
        raise


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
    # (the 16 KiB bound on an unconfirmed connection).
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


def describe_handshake_failure(
    exc: BaseException, peer: object, time_limit: float | None = None, level: int = logging.WARNING
) -> None:
    """The one log line for a client that failed the handshake (never a key: errors hold none).
    A timeout says which limit ran out: the handshake did not complete in ``time_limit``. The
    record gets the message, not the error: a handler that keeps records (pytest's, a memory
    handler) would otherwise keep the failed connection alive through the error's traceback.
    ``level``: a server under a flood logs most failures at debug level
    (``Admission.failure_logged``)."""
    reason = str(exc)
    if isinstance(exc, TimeoutError) and time_limit is not None:
        reason = f"not complete within {time_limit} s"
    logger.log(level, "handshake with %s failed: %s: %s", peer, type(exc).__name__, reason)


async def run_handler(
    call: Callable[[], Awaitable[object] | None],
    peer: object,
    *,
    abort: Abort,
    what: str = "handler",
    report: Callable[[Exception], None] | None = None,
) -> None:
    """Run one connection's handler so that its failure ends that connection only, never the
    server (both adapters' servers call this, the rule is here once). An Exception is logged
    once with the peer, passed to ``report`` (asyncio: the loop's exception handler), and the
    connection is closed at once with ``abort``, without FINAL, so the client cannot take what
    it got for a complete stream. Cancellations (BaseException) propagate. The log record holds
    the formatted traceback, not the error: a handler that keeps records would otherwise keep
    the connection alive through the traceback's frames (as describe_handshake_failure)."""
    try:
        result = call()
        if result is not None:
            await result
    except Exception as exc:
        details = "".join(traceback.format_exception(exc)).rstrip()
        logger.error("%s failed for %s; the server goes on: %s", what, peer, details)
        if report is not None:
            report(exc)
        await abort()


def check_can_take_input(opener: AnyOpener) -> None:
    """Called before waiting for input: an opener that needs input but refuses it would make
    the reader spin forever."""
    if not opener.wants_data:
        raise RuntimeError("gcmstream bug: the opener needs input but cannot take any")


def blame_connection(exc: TruncatedStreamError, connection_error: BaseException | None) -> None:
    """A truncation caused by a lost connection says so: the transport's error is its cause."""
    if exc.__cause__ is None and connection_error is not None:
        exc.__cause__ = connection_error


def connection_statistics(sealer: AnySealer, opener: AnyOpener | None) -> dict[str, object]:
    """gcmstream's per-connection figures, by name; ``get_extra_info`` (prefixed with
    ``gcmstream_``) and ``GcmStreamAttribute`` both read these."""
    figures: dict[str, object] = {
        "suite": sealer.suite.name,
        "record_size": sealer.record_size,
        "records_sealed": sealer.records_sealed,
        "bytes_sealed": sealer.bytes_sealed,
    }
    if opener is not None:
        figures["records_opened"] = opener.records_opened
        figures["bytes_opened"] = opener.bytes_opened
        # the key the peer proved (its public key ID): what tells key-ring clients apart, where
        # an identity field is only a claim (SECURITY.md, "Identities")
        # (a Tink stream names no key and carries no identity)
        header = opener.header if isinstance(opener, Opener) else None
        figures["peer_key_id"] = header.key_id if header is not None else None
        # the identity the peer sent (its local_id): proved when the key it proved is named
        # in a KeyRing (the channel checked that name, K5), else only a claim
        figures["peer_id"] = header.field(FieldType.IDENTITY) if header is not None else None
    return figures


def descriptor_soft_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE`` now (None where unknown: no ``resource`` module,
    or no limit)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def server_admission(policy: AdmissionPolicy) -> AdmissionPolicy:
    """The policy a server starts with: the default one fitted to the descriptor limit
    (``fit_to_descriptors``), a policy the application chose as is (a warning if it does not
    fit: beyond the limit, accept() fails for everyone)."""
    soft = descriptor_soft_limit()
    if policy is DEFAULT_ADMISSION:
        return fit_to_descriptors(policy, soft)
    if fit_to_descriptors(policy, soft) is not policy:
        logger.warning(
            "the admission policy keeps up to %d pending handshakes, more than half of the "
            "descriptor limit (%s): a flood can make accept() fail with EMFILE",
            policy.full + policy.verified,
            soft,
        )
    return policy


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


async def accept_retrying(listener: Any) -> Any:
    """``listener.accept()``, retried after ``ACCEPT_RETRY_DELAY`` while it fails for want of
    descriptors or memory (a warning at most every ``REPORT_INTERVAL`` seconds): the server
    goes on once connections close, instead of ending (review 2026-12-04 finding 2). Any other
    failure propagates."""
    while True:
        try:
            return await listener.accept()
        except (OSError, anyio.BrokenResourceError) as exc:
            if not _out_of_resources(exc):
                raise
            _say_exhausted(exc)
        await anyio.sleep(ACCEPT_RETRY_DELAY)


async def serve_retrying(
    listener: Any, handler: Callable[[Any], Awaitable[object]], task_group: Any | None
) -> None:
    """``listener.serve(handler, task_group)``, served again after ``ACCEPT_RETRY_DELAY`` when
    it ended for want of descriptors or memory, as :func:`accept_retrying` (anyio's ``serve()``
    ends there). The handlers run in ``task_group`` or in one of this call's, which outlives
    the restarts: a connection being served is not waited for before accepting again."""
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
