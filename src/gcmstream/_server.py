"""The server core (issue 24.2): every rule a gcmstream server follows, sans-IO (private).

One copy for every server path: the asyncio server (``aio.start_server``), the anyio listener
(``SecureListener.serve``) and ``gcmstream listen``. No awaits, no loop, no sockets: the adapter
reports what happened (a connection arrived, bytes were read, reading paused or resumed, the
input ended, the handshake ended, a handler failed) with the time it read from its own clock,
and the core decides. The adapters keep only what needs their I/O: accepting, closing,
awaiting the handshake and the handler, arming a timer.

- **Admission** of pending handshakes: :class:`ServerCore` holds the server's
  :class:`~gcmstream.admission.Admission` under the configured policy (fitted to the descriptor
  limit, :func:`server_admission`), and says once per connection what its handshake's end
  means: served, dropped quietly (evicted: the admission's report counts it) or logged
  (:class:`FailureReport`: a peer that proved the key at warning level; a keyless one at debug
  level, counted by reason in one warning per ``REPORT_INTERVAL`` at most).
- **Deadlines** (handshake, record, idle) are timers the core asks for and the adapter arms, as
  aioquic's ``QuicConnection.get_timer()``/``handle_timer(now)``: after each event the adapter
  asks :meth:`ConnectionDeadlines.read_timer` (the earliest record or idle deadline, or None)
  and arms a loop timer (asyncio: ``loop.call_at``; anyio: the receive's ``fail_after``), and
  the handshake driver arms the handshake's as a scope around the whole exchange; when one
  fires, :meth:`ConnectionDeadlines.handle_timer` names the deadline that expired, once, or
  None when progress moved it (re-arm at the new timer). Every deadline is
  computed here and nowhere else: the handshake must complete ``handshake_timeout`` seconds
  after it started; a record that has begun to arrive must be whole ``record_timeout`` seconds
  after it began (or after reading resumed: time while the server paused reading, for its own
  slow reader, is not the peer's); after the handshake, the peer must send something every
  ``idle_timeout`` seconds while the server reads. A peer that ended its input is not idle, and
  no record of it is arriving.
- **Handler isolation**: :meth:`ServerCore.handler_failed` is the one log line of a handler
  that raised; the adapter closes that connection (``_adapter.run_handler``) and, on asyncio,
  also reports the exception to the loop's exception handler. The server goes on, on every
  backend.
- **Statistics**: :func:`connection_statistics` (per connection: what ``get_extra_info`` and
  ``GcmStreamAttribute`` read) and :class:`ServerStatistics` (per server: connections
  admitted, refused, evicted, served, failed handshakes and handlers).
"""

from __future__ import annotations

import enum
import logging
import math
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Generic, TypeAlias, TypeVar

from .admission import (
    DEFAULT_ADMISSION,
    REPORT_INTERVAL,
    Admission,
    AdmissionPolicy,
    HandshakeInput,
    fit_to_descriptors,
)
from .codec import Opener, Sealer
from .config import Configuration
from .errors import (
    DowngradeError,
    HandshakeError,
    KeyCommitmentError,
    MalformedHeaderError,
    PeerIdentityError,
    ProtocolError,
    RecordTooLargeError,
    RoleMismatchError,
    SelfConnectionError,
    TruncatedStreamError,
    UnknownKeyError,
    UnsupportedFormatError,
)
from .format import FieldType
from .tinkstream import TinkOpener, TinkSealer

# What the adapters' one-way reader and writer drive: gcmstream's own coder, or Tink's
# streaming format's (docs/TINK.md), which has the same names for what they call.
AnyOpener: TypeAlias = Opener | TinkOpener
AnySealer: TypeAlias = Sealer | TinkSealer

__all__ = (
    "AnyOpener",
    "AnySealer",
    "ConnectionDeadlines",
    "Deadline",
    "FailureReport",
    "ServerCore",
    "ServerStatistics",
    "connection_statistics",
    "describe_handshake_failure",
    "descriptor_soft_limit",
    "log_handler_failure",
    "server_admission",
)

logger = logging.getLogger("gcmstream")

T = TypeVar("T")


class Deadline(enum.Enum):
    """Which deadline expired; the value is the option that set it."""

    HANDSHAKE = "handshake_timeout"
    RECORD = "record_timeout"
    IDLE = "idle_timeout"


class ConnectionDeadlines:
    """The three deadlines of one connection, as times on the adapter's clock (seconds; asyncio's
    ``loop.time()``, anyio's ``current_time()``). Sans-IO: every method takes ``now``.

    The adapter reports :meth:`handshake_started`, :meth:`received` (after the opener took the
    bytes), :meth:`paused`/:meth:`resumed` (reading stopped for backpressure, and started
    again), :meth:`ended` (the input ended) and :meth:`handshake_complete`; its reads arm
    :meth:`read_timer`, its handshake driver :attr:`handshake_deadline` (:meth:`get_timer` is
    the earlier of the two), and either calls :meth:`handle_timer` when it fires. A deadline
    fires once: after :meth:`handle_timer` named one, every timer is None and every later call
    None."""

    __slots__ = (
        "_expired",
        "_handshake_at",
        "_idle_at",
        "_record_at",
        "eof",
        "handshake_timeout",
        "handshaking",
        "idle_timeout",
        "reading",
        "record_timeout",
    )

    def __init__(
        self,
        *,
        handshake_timeout: float | None = None,
        record_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        self.handshake_timeout = handshake_timeout
        self.record_timeout = record_timeout
        self.idle_timeout = idle_timeout
        self.handshaking = True  # until handshake_complete
        self.reading = True
        self.eof = False
        self._handshake_at = math.inf
        self._record_at = math.inf
        self._idle_at = math.inf
        self._expired: Deadline | None = None

    @classmethod
    def from_config(cls, config: Configuration) -> ConnectionDeadlines:
        """A connection's deadlines under ``config``'s three timeouts."""
        return cls(
            handshake_timeout=config.handshake_timeout,
            record_timeout=config.record_timeout,
            idle_timeout=config.idle_timeout,
        )

    def __repr__(self) -> str:
        due = {d.value: at for d, at in self._due().items() if at != math.inf}
        return f"<ConnectionDeadlines due={due} expired={self._expired}>"

    @property
    def expired(self) -> Deadline | None:
        """The deadline that expired (:meth:`handle_timer` named it), or None."""
        return self._expired

    @property
    def handshake_deadline(self) -> float | None:
        """When the handshake must be complete (None: no limit, not started, or complete)."""
        return None if self._handshake_at == math.inf else self._handshake_at

    def handshake_started(self, now: float) -> None:
        """The handshake began: it must complete within ``handshake_timeout``."""
        if self.handshaking and self.handshake_timeout is not None and self._handshake_at == math.inf:
            self._handshake_at = now + self.handshake_timeout

    def handshake_complete(self, now: float) -> None:
        """The handshake completed: its deadline is off, the peer's silence counts from now."""
        self.handshaking = False
        self._handshake_at = math.inf
        self._idle_from(now)

    def received(self, now: float, receiving_record: bool) -> None:
        """Bytes arrived and the opener took them; ``receiving_record``: part of a record is in
        and the rest is not (``Opener.receiving_record``). A record's deadline is set when it
        begins and kept until it is whole, however the bytes trickle. (Once per read on every
        connection: the two rules are written out here, not called.)"""
        if self.eof or not self.reading:
            return
        if self.idle_timeout is not None and not self.handshaking:
            self._idle_at = now + self.idle_timeout
        if self.record_timeout is not None:
            if not receiving_record:
                self._record_at = math.inf
            elif self._record_at == math.inf:  # begun now: kept until the record is whole
                self._record_at = now + self.record_timeout

    def paused(self) -> None:
        """Reading stopped (the local reader is slow): neither the record's nor the silence's
        clock runs, as what does not arrive now is our delay, not the peer's."""
        self.reading = False
        self._record_at = self._idle_at = math.inf

    def resumed(self, now: float, receiving_record: bool) -> None:
        """Reading started again: a record part-way in and the silence count from now."""
        self.reading = True
        self._idle_from(now)
        self._time_record(now, receiving_record)

    def ended(self) -> None:
        """The input ended (EOF, or the connection was lost): no record is arriving any more,
        and a peer that ended its stream is not idle."""
        self.eof = True
        self._record_at = self._idle_at = math.inf

    def _idle_from(self, now: float) -> None:
        if self.idle_timeout is not None and not self.handshaking and self.reading and not self.eof:
            self._idle_at = now + self.idle_timeout

    def _time_record(self, now: float, receiving_record: bool) -> None:
        if self.record_timeout is None:
            return
        if receiving_record and self.reading and not self.eof:
            if self._record_at == math.inf:  # begun now: kept until the record is whole
                self._record_at = now + self.record_timeout
        else:
            self._record_at = math.inf

    def _due(self) -> dict[Deadline, float]:
        # the order breaks ties: the handshake's, then the record's, then the silence's
        return {
            Deadline.HANDSHAKE: self._handshake_at,
            Deadline.RECORD: self._record_at,
            Deadline.IDLE: self._idle_at,
        }

    def get_timer(self) -> float | None:
        """When the adapter must call :meth:`handle_timer` next (None: no deadline runs)."""
        if self._expired is not None:
            return None
        at = min(self._handshake_at, self._record_at, self._idle_at)
        return None if at == math.inf else at

    def read_timer(self) -> float | None:
        """:meth:`get_timer` without the handshake's deadline: what a transport's read or a
        protocol's loop timer arms. The handshake's is armed once, by the handshake driver
        (``_adapter.handshake``), around the whole exchange (its sends too): a second timer
        per pending connection would cost an unauthenticated peer's memory twice (on trio a
        cancel scope is ~2 KB, tests/test_pending.py)."""
        if self._expired is not None:
            return None
        at = min(self._record_at, self._idle_at)
        return None if at == math.inf else at

    def handle_timer(self, now: float) -> Deadline | None:
        """The deadline that expired by ``now`` (the earliest, once), or None: none is due (the
        peer made progress since the timer was armed; arm :meth:`get_timer` again)."""
        if self._expired is not None:
            return None
        due = self._due()
        deadline = min(due, key=due.__getitem__)  # the first of equal ones: dicts keep order
        if due[deadline] > now:
            return None
        self._expired = deadline
        return deadline

    def reason(self, deadline: Deadline) -> str:
        """What an expired deadline means, in the words the log and the error use."""
        if deadline is Deadline.HANDSHAKE:
            return f"not complete within {self.handshake_timeout} s"
        if deadline is Deadline.RECORD:
            return f"a record started more than {self.record_timeout:g} s ago has not finished arriving"
        return f"nothing received for {self.idle_timeout:g} s"

    def drop(self, deadline: Deadline, peer: object) -> TimeoutError:
        """The one log line of a connection dropped at its record or idle deadline (the
        handshake's is :func:`describe_handshake_failure`'s), and the error its reader raises
        as the cause of its truncation."""
        reason = self.reason(deadline)
        if deadline is not Deadline.HANDSHAKE:
            logger.warning("dropping %s: %s (%s)", peer, reason, deadline.value)
        return TimeoutError(reason)


def describe_handshake_failure(
    exc: BaseException, peer: object, time_limit: float | None = None, level: int = logging.WARNING
) -> None:
    """The one log line for a client that failed the handshake (never a key: errors hold none).
    A timeout says which limit ran out: the handshake did not complete in ``time_limit``. The
    record gets the message, not the error: a handler that keeps records (pytest's, a memory
    handler) would otherwise keep the failed connection alive through the error's traceback.
    ``level``: the one :class:`FailureReport` chose (most keyless failures go at debug level)."""
    reason = str(exc)
    if isinstance(exc, TimeoutError) and time_limit is not None:
        reason = f"not complete within {time_limit} s"
    logger.log(level, "handshake with %s failed: %s: %s", peer, type(exc).__name__, reason)


_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # compiled at import, not in a flood

# The count line's reasons in words a server's user understands, by the error's class: the one
# table (the first class of the error's MRO found in it). Lower case and short words, so that
# ``gcmstream listen``'s filter of key-like text (mixed case runs) lets them through (review
# 2026-12-04, second review, finding 5). The specific before the general.
_REASONS: dict[type[BaseException], str] = {
    TruncatedStreamError: "hung up or cut during the handshake",
    TimeoutError: "too slow (handshake timeout)",
    UnknownKeyError: "a key not held here",
    KeyCommitmentError: "wrong key or context",
    DowngradeError: "an older, weaker key exchange offered",
    SelfConnectionError: "a connection to itself",
    PeerIdentityError: "identity refused",
    HandshakeError: "failed key confirmation or a malformed share",
    RoleMismatchError: "wrong role (a reflected or one-way stream)",
    MalformedHeaderError: "a malformed header",
    UnsupportedFormatError: "not a gcmstream peer",
    RecordTooLargeError: "record size over the limit",
    ProtocolError: "a broken handshake",
    ConnectionError: "connection reset",
    OSError: "connection error",
}


def reason_words(kind: type[BaseException]) -> str:
    """An exception class as the count line's reason (``_REASONS``: "TruncatedStreamError" ->
    "hung up or cut during the handshake"); a class outside the table, its name in lower-case
    words ("ValueError" -> "value error")."""
    for cls in kind.__mro__:
        reason = _REASONS.get(cls)
        if reason is not None:
            return reason
    return _WORD_START.sub(" ", kind.__name__).lower()


class FailureReport:
    """The one rule for logging failed handshakes, on every server path (the asyncio server,
    the anyio listener, ``gcmstream listen``; review 2026-12-04 finding 4). Sans-IO: ``clock``
    is injected.

    A peer that proved the key (its Finished verified) and then failed is a key holder in
    trouble: its own line at warning level, always. Any other failure (a stranger that hangs
    up, resets, times out, replays a recorded header and leaves, or sends another key's
    header) costs an attacker one connection, so it must not cost the server a warning line
    each: its own line goes at debug level and it is counted by reason; at most one warning
    goes out per ``REPORT_INTERVAL``. That warning is the connection's own line when nothing
    was counted since the last one (a lone failure on a quiet server is said at once, with its
    peer and reason), else the count (``"handshakes failed without proving the key since the
    last warning (T s): N (...)"``, by exception type), logged at the next failure or arrival once the
    interval has passed."""

    __slots__ = ("_clock", "_counted", "_log", "_warned_at")

    def __init__(self, clock: Callable[[], float] = time.monotonic, log: logging.Logger = logger) -> None:
        self._clock = clock
        self._log = log
        self._warned_at = -math.inf  # the last warning line: a connection's own, or a count
        self._counted: Counter[str] = Counter()  # failures at debug level since then, by reason

    def failed(self, exc: BaseException, *, proved_key: bool) -> int:
        """A pending handshake failed with ``exc``: the level of its own line (the adapter
        logs it, with the peer); at most once per interval a count goes out first."""
        if proved_key:
            return logging.WARNING
        now = self._clock()
        self.report_due(now)
        if now - self._warned_at >= REPORT_INTERVAL:  # nothing counted: its own line is the one
            self._warned_at = now
            return logging.WARNING
        self._counted[reason_words(type(exc))] += 1
        return logging.DEBUG

    def report_due(self, now: float | None = None, *, final: bool = False) -> None:
        """Log the count of the failures logged at debug level, if there are any and the
        interval since the last warning has passed (servers also ask on each arrival, so the
        end of a flood is counted by the next connection). ``final``: the server is ending
        (``gcmstream listen`` after its peer): the count goes out whatever the interval, or
        the failures since the last line would never be said."""
        if not self._counted:
            return
        now = self._clock() if now is None else now
        if now - self._warned_at < REPORT_INTERVAL and not final:
            return
        reasons = ", ".join(f"{count:,} {reason}" for reason, count in self._counted.most_common())
        # the time since the last warning line, the span these failures fell in: from the first
        # one counted, a failure right after a line said "in the last 0 s" (a new user's finding)
        self._log.warning(
            "handshakes failed without proving the key since the last warning (%s): %s (%s); "
            "each is logged at debug level",
            _span(now - self._warned_at),
            f"{self._counted.total():,}",
            reasons,
        )
        self._warned_at = now
        self._counted.clear()


def _span(seconds: float) -> str:
    """A time between two log lines, as a reader takes it in: "10 s", "2.5 s", "under 0.1 s"."""
    if seconds >= 9.95:
        return f"{seconds:.0f} s"
    return f"{seconds:.1f} s" if seconds >= 0.05 else "under 0.1 s"


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


class ServerStatistics:
    """One server's counts since it started (the admission's own shedding counts are
    ``Admission.refused``, ``evicted_waiting``, ``evicted_verified``)."""

    __slots__ = ("admitted", "handler_failures", "handshakes_failed", "refused", "served")

    def __init__(self) -> None:
        self.admitted = 0  # connections whose handshake began
        self.refused = 0  # closed on arrival: their source was at its cap
        self.handshakes_failed = 0  # failed on their own (not evicted): a bad header, a timeout
        self.served = 0  # handshake completed: handed to the handler
        self.handler_failures = 0  # a handler raised (its connection was closed, not the server)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class ServerCore(Generic[T]):
    """The sans-IO core of one server: its configuration, its admission, its statistics, and
    the decisions each connection's life needs. ``T`` is whatever the adapter drops a pending
    connection by (an asyncio transport, a cancel scope); ``drop(connection)`` is called for
    each connection the admission evicts (see :class:`~gcmstream.admission.Admission`, which
    ``random`` and ``clock`` are passed to; tests decide them)."""

    def __init__(
        self,
        config: Configuration,
        drop: Callable[[T], object],
        *,
        random: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger = logger,
    ) -> None:
        self.config = config
        chance = {} if random is None else {"random": random}  # (tests decide them)
        policy = server_admission(config.admission)
        self.admission: Admission[T] = Admission(policy, drop, clock=clock, **chance)
        self.failures = FailureReport(clock, log)  # ``log``: where its counts go (listen's own)
        self.statistics = ServerStatistics()

    def admit(self, connection: T, address: object) -> bool:
        """A connection arrived from ``address``. False: refused, close it at once (no
        handshake, no further call); True: start its handshake (:meth:`deadlines`)."""
        self.failures.report_due()
        if not self.admission.admit(connection, address):
            self.statistics.refused += 1
            return False
        self.statistics.admitted += 1
        return True

    def deadlines(self) -> ConnectionDeadlines:
        """The deadlines of one admitted connection, from the configuration's timeouts."""
        return ConnectionDeadlines.from_config(self.config)

    def observe(self, connection: T, opener: HandshakeInput) -> None:
        """Bytes of ``connection``'s handshake were read (``Admission.observe``)."""
        self.admission.observe(connection, opener)

    def handshake_completed(self, connection: T) -> bool:
        """The handshake completed. True: hand the connection to the handler; False: the
        admission evicted it meanwhile, close it (nothing to log: the admission's report
        counts it)."""
        if self.admission.done(connection):
            self.statistics.served += 1
            return True
        return False

    def handshake_failed(self, connection: T, exc: BaseException) -> int | None:
        """The handshake failed with ``exc`` (its transport is closed). The level to log it at
        (:class:`FailureReport`: warning for a peer that proved the key, debug for most
        keyless ones), or None: the admission evicted it, say nothing."""
        proved_key = self.admission.proved_key(connection)
        if not self.admission.done(connection):
            return None
        self.statistics.handshakes_failed += 1
        return self.failures.failed(exc, proved_key=proved_key)

    def ended_before_sending(self, exc: BaseException) -> int:
        """A connection whose peer hung up before sending anything was closed on arrival, never
        admitted (its handshake could not begin): counted as a failed handshake, and the level
        of its line as for any keyless failure (:class:`FailureReport`)."""
        self.statistics.handshakes_failed += 1
        return self.failures.failed(exc, proved_key=False)

    def handshake_cancelled(self, connection: T) -> None:
        """The handshake was cancelled (the server stops, or the admission evicted it)."""
        self.admission.done(connection)

    def handler_failed(self, exc: Exception, peer: object, what: str = "handler") -> None:
        """A connection's handler raised ``exc``: one error line with the peer and the
        traceback (formatted: a handler that keeps records would otherwise keep the connection
        alive through the traceback's frames). The adapter closes the connection without FINAL
        and goes on serving."""
        self.statistics.handler_failures += 1
        log_handler_failure(exc, peer, what)


def log_handler_failure(exc: Exception, peer: object, what: str = "handler") -> None:
    """The one log line of a failed handler (:meth:`ServerCore.handler_failed`)."""
    details = "".join(traceback.format_exception(exc)).rstrip()
    logger.error("%s failed for %s; the server goes on: %s", what, peer, details)
