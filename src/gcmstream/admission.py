"""Admission of pending handshakes: which connections a server keeps while their handshake runs.

Sans-IO (no awaits, no loop; randomness and the clock are injected), one copy for every server
path: the asyncio server (``start_server``), the anyio listener (``SecureListener.serve``) and
``gcmstream listen``. The adapter tells :class:`Admission` when a connection arrives
(:meth:`~Admission.admit`), what its handshake's bytes gave each time they were read
(:meth:`~Admission.observe`: part of a header, a verified header, a verified Finished) and when
its handshake ended (:meth:`~Admission.done`); the admission drops a connection through the
callback the adapter gives (abort a transport and cancel its task, cancel a scope).

An unauthenticated peer costs a server a socket and a few KiB until its handshake completes or
times out, and a keyless flood can send as many such peers as the server accepts. The rule,
:class:`AdmissionPolicy`, keeps a newcomer's chance bounded below whatever the flood does:

- **Two classes.** A connection is *waiting* until the initiator's header verified (it sent
  nothing, or part of a header), then *verified* until its Finished verifies (one round trip);
  then it is no longer pending and is never evicted. Each class has its own budget (``full``,
  ``verified``), and a connection is only ever evicted by one of its own class: one that sent
  nothing never evicts one whose header verified. The class follows what was read, at once
  (asyncio's ``buffer_updated``, anyio's receive), not how far the server has got: a header
  that waits for the CPU to be answered is verified already. Among the waiting, one that has
  received nothing is evicted before one that has received part of a header. A replayed
  recorded header verifies too (docs/FORMAT.md 5.2: only the Finished proves the key), so
  the verified class is bounded and evicts its own oldest: a genuine client answers within
  one round trip, so the oldest verified one is the likeliest replay.
- **Random early drop, as OpenSSH's ``MaxStartups start:rate:full``.** With ``start`` or more
  waiting, a newcomer causes a drop with probability ``rate`` percent, rising linearly to 100 %
  at ``full`` (sshd_config(5)). What is dropped differs from OpenSSH on purpose: not the
  newcomer but the connection that has waited longest without a verified header. OpenSSH
  refuses the newcomer, so a silent flood that filled ``full`` slots holds them for the whole
  grace time and every legitimate client is refused (the weakness its ``PerSourcePenalties``
  later addressed). Dropping the longest waiting instead means a newcomer is evicted only after
  every connection that was waiting before it: it has about ``full`` arrivals' time to deliver
  its header, which a genuine client sends with its first packet.
- **A per-source cap.** Once ``start`` handshakes are pending, a source address (IPv4 address;
  IPv6 /64, the block one host is usually given) with ``per_source`` pending gets no more: its
  newcomers are refused (closed at once), as OpenSSH's ``PerSourceMaxStartups``. Below
  ``start`` nothing is refused, so a burst from one host (a test, a benchmark, a proxy) is
  served while the server is not under pressure; an attacker alone with one address therefore
  holds up to ``start`` slots, and ``per_source`` once other sources fill the rest: random
  early drop evicts its oldest, the cap refuses its reconnections (review 2026-12-04 finding
  6, decided so). Not at all times, on purpose: a proxy, a NAT or a load test from one
  address opens more than ``per_source`` handshakes at once on an idle server, and below
  ``start`` no slot is scarce; OpenSSH's ``PerSourceMaxStartups`` is off by default for the
  same reason. A client that shares its address (NAT, the same IPv6 /64) with an attacker
  shares its cap while the server is under pressure, and an attacker with many addresses (an
  IPv6 /48 has 65,536 /64s) is not bounded by it. Not done: OpenSSH's ``PerSourcePenalties``
  (refusing for a while a source whose connections fail before authenticating).

Defaults (``AdmissionPolicy()``): ``start=256, rate=30, full=512, verified=1024,
per_source=64``, shrunk when a server starts to fit its descriptor limit
(:func:`fit_to_descriptors`: pending sockets leave a quarter of the soft ``RLIMIT_NOFILE``, at
least 64, to everything else; at the usual 1,024: ``start=128, full=256, verified=512,
per_source=32``), each measured with tests/hostile/test_admission_flood.py (1,000 keyless
connections reconnecting as fast as one attacker process can, silent or replaying a recorded
header, from one address or from 250; 50 clients, each within 5 s; the figures and the command
are in SECURITY.md "Denial of service"):

- ``start=256`` is the former ``max_pending_handshakes`` default: a server that is not under
  a flood drops and refuses nothing up to 256 handshakes at once (a burst of 200 clients from
  one host, tests/hostile/test_sockets.py, is served whole).
- ``full=512``: a newcomer outlives about 256 to 512 later arrivals before it can be the
  longest waiting; asyncio accepts at most 100 per pass of its loop, and a genuine header is
  read one pass after its connection is accepted.
- ``rate=30`` is OpenSSH's default.
- ``verified=1024``: a genuine client's Finished must come before 1,024 later headers verify,
  and a replay flood verifies headers as fast as a core allows (0.83 ms each, issue 24).
  Against the replay flood from 250 addresses the asyncio server served 42 of 50 with 256,
  47 and 49 with 512 (two runs), 50 with 1,024 (slowest 1.1 s), on a shared two-core machine.
- ``per_source=64``: once 256 are pending, one address (or IPv6 /64) cannot add more; its own
  arrivals are refused rather than admitted at the others' expense (an arrival it makes below
  ``start`` evicts nobody: random early drop starts at ``start``).

Memory under a flood: at most 512 waiting and 1,024 verified handshakes, at most about 17 MiB
of gcmstream's own allocations at the bounds of tests/test_pending.py (12.5 KiB a waiting one,
10.5 KiB a verified one; the event loop's socket state comes on top); drop-oldest's 256 held
3.5 MiB but kept clients out.

Logging: a shed connection (refused or evicted) is logged at debug level; a warning with the
counts goes out at most once per ``REPORT_INTERVAL`` seconds, never one per connection. A
handshake that failed on its own (a bad header, a hang-up, a timeout) is the server core's to
log, by the same measure (``gcmstream._server.FailureReport``; :meth:`Admission.proved_key`
tells it which peers proved the key).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = (
    "DEFAULT_ADMISSION",
    "REPORT_INTERVAL",
    "Admission",
    "AdmissionPolicy",
    "HandshakeInput",
    "admission_policy",
    "check_pending_limit",
    "fit_to_descriptors",
    "source_of",
)

logger = logging.getLogger("gcmstream")

REPORT_INTERVAL = 10.0
"""Seconds between two warnings that count the handshakes an :class:`Admission` shed (and
between two that count the handshakes a server saw fail without proving the key)."""

T = TypeVar("T")


class HandshakeInput(Protocol):
    """What :meth:`Admission.observe` reads of a responder's opener (``gcmstream.Opener``;
    a protocol here, so that this module imports nothing of gcmstream)."""

    @property
    def failed(self) -> bool: ...  # the handshake failed: its end follows
    @property
    def header(self) -> object | None: ...  # the initiator's header verified
    @property
    def record_layer(self) -> object | None: ...  # its Finished verified too


_ABSENT = object()


def _check_count(name: str, value: object, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return value


def check_pending_limit(limit: int) -> int:
    """``max_pending_handshakes``: an int of at least 1 (ValueError otherwise)."""
    return _check_count("max_pending_handshakes", limit, 1)


@dataclass(frozen=True)
class AdmissionPolicy:
    """How many handshakes a server keeps pending, and which it drops (module docstring).

    ``start``, ``rate``, ``full``: with ``start`` or more connections waiting for their header
    to verify, each newcomer makes the longest-waiting one drop with probability ``rate``
    percent, rising linearly to 100 % at ``full`` (at most ``full`` wait at once).
    ``verified``: at most this many whose header verified wait for their Finished; a newly
    verified one beyond that drops the oldest of them. ``per_source``: once ``start``
    handshakes are pending, a source address (IPv6: its /64) with this many pending has its
    newcomers refused; None: no cap. Every value is checked here (ValueError)."""

    start: int = 256
    rate: int = 30
    full: int = 512
    verified: int = 1024
    per_source: int | None = 64

    def __post_init__(self) -> None:
        _check_count("start", self.start, 1)
        _check_count("full", self.full, 1)
        if self.start > self.full:
            raise ValueError(f"start ({self.start}) must not exceed full ({self.full})")
        _check_count("rate", self.rate, 0)
        if self.rate > 100:
            raise ValueError(f"rate is a percentage from 0 to 100, got {self.rate!r}")
        _check_count("verified", self.verified, 1)
        if self.per_source is not None:
            _check_count("per_source", self.per_source, 1)

    @classmethod
    def from_max_pending_handshakes(cls, limit: int) -> AdmissionPolicy:
        """The policy ``max_pending_handshakes=limit`` stands for: at most ``limit`` waiting
        and ``limit`` verified, no random band (``start == full``), the default per-source cap."""
        check_pending_limit(limit)
        return cls(start=limit, full=limit, verified=limit)

    def drop_probability(self, waiting: int) -> float:
        """The chance that a newcomer makes the longest-waiting connection drop, with
        ``waiting`` connections waiting for their header (OpenSSH's MaxStartups line)."""
        if waiting < self.start:
            return 0.0
        if waiting >= self.full:
            return 1.0
        span = self.full - self.start  # > 0 here: start <= waiting < full
        return (self.rate + (100 - self.rate) * (waiting - self.start) / span) / 100


DEFAULT_ADMISSION = AdmissionPolicy()
"""The servers' default policy (module docstring: why these values)."""

DESCRIPTOR_RESERVE = 4
"""A server's pending handshakes leave 1/DESCRIPTOR_RESERVE of its descriptor limit (at least
64) to the connections it serves, its listening sockets and the process's own files."""


def fit_to_descriptors(policy: AdmissionPolicy, soft_limit: int | None) -> AdmissionPolicy:
    """``policy`` shrunk so that its pending sockets (``full + verified``) leave a quarter of
    ``soft_limit`` descriptors (the soft ``RLIMIT_NOFILE``), at least 64, to everything else;
    ``policy`` as is if it fits, or if ``soft_limit`` is None (unknown) or below 128 (too few
    to share). ``start``, ``full``, ``verified`` and ``per_source`` are scaled by the same
    factor (at least 1 each), so the policy keeps its shape. Past the descriptor limit accept()
    fails with EMFILE for every later client, genuine or not (review 2026-12-04 finding 2: the
    defaults' 1,536 pending sockets against the usual limit of 1,024); the servers call this
    on their default policy when they start, and their accept loops survive EMFILE when the
    served connections take the rest."""
    if soft_limit is None or soft_limit < 128:
        return policy
    budget = soft_limit - max(64, soft_limit // DESCRIPTOR_RESERVE)
    if policy.full + policy.verified <= budget:
        return policy

    def scaled(value: int) -> int:
        return max(1, value * budget // (policy.full + policy.verified))

    per_source = None if policy.per_source is None else scaled(policy.per_source)
    full = scaled(policy.full)
    return AdmissionPolicy(
        start=min(full, scaled(policy.start)),
        rate=policy.rate,
        full=full,
        verified=scaled(policy.verified),
        per_source=per_source,
    )


def admission_policy(
    admission: AdmissionPolicy | None, max_pending_handshakes: int | None
) -> AdmissionPolicy:
    """The policy a server's keywords ask for: ``admission``, or the one
    ``max_pending_handshakes`` stands for, or :data:`DEFAULT_ADMISSION`; not both."""
    if admission is not None and max_pending_handshakes is not None:
        raise ValueError("give admission or max_pending_handshakes, not both")
    if max_pending_handshakes is not None:
        return AdmissionPolicy.from_max_pending_handshakes(max_pending_handshakes)
    if admission is None:
        return DEFAULT_ADMISSION
    if not isinstance(admission, AdmissionPolicy):
        raise TypeError(f"admission must be an AdmissionPolicy, got {type(admission).__name__}")
    return admission


def source_of(address: object) -> str | None:
    """The per-source key of a peer address as sockets report it: the IPv4 address (an
    IPv4-mapped IPv6 one too), the /64 of an IPv6 address; None (no cap) for anything else
    (a Unix socket, an unknown peer)."""
    if not isinstance(address, tuple) or not address or not isinstance(address[0], str):
        return None
    try:
        ip = ipaddress.ip_address(address[0].partition("%")[0])  # without an IPv6 zone
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Admission(Generic[T]):
    """The pending handshakes of one server under an :class:`AdmissionPolicy`.

    ``drop(connection)`` is called for each connection evicted (the adapter closes it; its
    handshake then fails, and :meth:`done` says it was evicted). An adapter whose reads are
    callbacks (asyncio) may close it later, at the end of the loop pass, and only if
    :meth:`evicted` still says so: a connection whose Finished is read in that same pass is
    kept (:meth:`finished`), never cut after its handshake completed (review 2026-12-04
    finding 7). ``random`` returns a float in
    [0, 1) and ``clock`` seconds; both are injected so that tests decide them."""

    def __init__(
        self,
        policy: AdmissionPolicy,
        drop: Callable[[T], object],
        *,
        random: Callable[[], float] = random.random,  # load shedding, not a secret
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(policy, AdmissionPolicy):
            raise TypeError(f"policy must be an AdmissionPolicy, got {type(policy).__name__}")
        self.policy = policy
        self._drop = drop
        self._random = random
        self._clock = clock
        # insertion order is age: the oldest first. Waiting is two tables: ``_silent`` (nothing
        # received yet, since arrival) is evicted before ``_partial`` (part of a header, since
        # its first bytes); verified: since its header verified. ``_finished``: its Finished
        # verified, never evicted, until ``done``.
        self._silent: dict[T, str | None] = {}
        self._partial: dict[T, str | None] = {}
        self._verified: dict[T, str | None] = {}
        self._finished: set[T] = set()
        self._evicted: set[T] = set()  # dropped, until ``done`` (or rescued by ``finished``)
        self._per_source: dict[str, int] = {}
        self.refused = 0  # newcomers refused: their source was at its cap
        self.evicted_waiting = 0
        self.evicted_verified = 0
        self._reported_at = -math.inf
        self._reported = (0, 0, 0)  # the counters at the last warning

    def __len__(self) -> int:
        """Pending handshakes: waiting or verified (not those whose Finished arrived)."""
        return len(self._silent) + len(self._partial) + len(self._verified)

    @property
    def waiting(self) -> int:
        """Connections whose header has not verified yet."""
        return len(self._silent) + len(self._partial)

    @property
    def silent(self) -> int:
        """Waiting connections that have received nothing yet (the first evicted)."""
        return len(self._silent)

    @property
    def verified_count(self) -> int:
        """Connections whose header verified, waiting for their Finished."""
        return len(self._verified)

    def pending_from(self, address: object) -> int:
        """Pending handshakes from ``address``'s source (:func:`source_of`)."""
        source = source_of(address)
        return 0 if source is None else self._per_source.get(source, 0)

    def admit(self, connection: T, address: object) -> bool:
        """A connection arrived from ``address`` (a socket's peer name). False: refused, the
        adapter closes it at once and does not call :meth:`done`. True: it is pending, and the
        longest-waiting one may have been dropped to make room."""
        policy = self.policy
        source = source_of(address)
        if (
            source is not None
            and policy.per_source is not None
            and len(self) >= policy.start
            and self._per_source.get(source, 0) >= policy.per_source
        ):
            self.refused += 1
            logger.debug(
                "refused a connection from %s: %d handshakes pending from it", source, policy.per_source
            )
            self._report()
            return False
        chance = policy.drop_probability(self.waiting)
        if chance >= 1.0 or (chance > 0.0 and self._random() < chance):
            self._evict(self._silent or self._partial)  # one that sent nothing first
            self.evicted_waiting += 1
            self._report()
        self._silent[connection] = source
        if source is not None:
            self._per_source[source] = self._per_source.get(source, 0) + 1
        return True

    def observe(self, connection: T, opener: HandshakeInput) -> None:
        """The adapter's one report from the read path: bytes of the connection's handshake
        arrived, and ``opener`` (the responder's) took them. Called where the bytes are read
        (asyncio's ``buffer_updated``, anyio's receive), not once the answer is computed: under
        a flood a verified header can wait a long time for the CPU, and must not count as
        waiting meanwhile (review 2026-12-04 finding 1). A failed opener changes nothing (its
        handshake ends, :meth:`done` follows)."""
        if opener.failed:
            return
        if opener.record_layer is not None:  # its Finished verified: never evicted from now on
            self.finished(connection)
        elif opener.header is not None:
            self.verified(connection)
        else:
            self.received(connection)

    def received(self, connection: T) -> None:
        """Part of the connection's header arrived (read, or waiting in the kernel when the
        connection was admitted: the adapters' ``admit``): from now on it is evicted only after
        every waiting connection that sent nothing. Nothing if it is not silent and pending."""
        source = self._silent.pop(connection, _ABSENT)
        if source is not _ABSENT:
            self._partial[connection] = source  # type: ignore[assignment]  # not _ABSENT here

    def finished(self, connection: T) -> None:
        """The connection's Finished verified: its handshake completed, the admission never
        evicts it (review 2026-12-04 finding 7); :meth:`done` still follows."""
        if connection in self._evicted:  # evicted in this loop pass, not closed yet: kept
            self._evicted.discard(connection)
            self._finished.add(connection)
            return
        source = self._pop_pending(connection)
        if source is _ABSENT:
            return
        self._release(source)  # type: ignore[arg-type]  # not _ABSENT here
        self._finished.add(connection)

    def evicted(self, connection: T) -> bool:
        """True if the admission dropped the connection (and its Finished has not verified
        since): an adapter that closes evicted connections late closes it now."""
        return connection in self._evicted

    def _pop_pending(self, connection: T) -> object:  # a source (str or None), or _ABSENT
        for table in (self._silent, self._partial, self._verified):
            source = table.pop(connection, _ABSENT)
            if source is not _ABSENT:
                return source
        return _ABSENT

    def verified(self, connection: T) -> None:
        """The connection's header verified: from now on only another verified one can evict
        it (the oldest first, beyond ``policy.verified``). Nothing if it is no longer waiting."""
        source = self._silent.pop(connection, _ABSENT)
        if source is _ABSENT:
            source = self._partial.pop(connection, _ABSENT)
        if source is _ABSENT:
            return
        if len(self._verified) >= self.policy.verified:
            self._evict(self._verified)
            self.evicted_verified += 1
            self._report()
        self._verified[connection] = source  # type: ignore[assignment]  # not _ABSENT here

    def done(self, connection: T) -> bool:
        """The connection's handshake ended (completed or failed). True if it was pending;
        False if the admission had evicted it (or never admitted it): the adapter need not log
        its failure, the admission's report counts it."""
        if connection in self._finished:
            self._finished.discard(connection)
            return True
        if connection in self._evicted:
            self._evicted.discard(connection)
            return False
        source = self._pop_pending(connection)
        if source is _ABSENT:
            return False
        self._release(source)  # type: ignore[arg-type]  # not _ABSENT here
        return True

    def proved_key(self, connection: T) -> bool:
        """True if the connection's Finished verified (its peer proved the key) and its
        :meth:`done` has not come yet: a failure now is a key holder's, not a stranger's."""
        return connection in self._finished

    def _release(self, source: str | None) -> None:
        if source is None:
            return
        left = self._per_source[source] - 1
        if left:
            self._per_source[source] = left
        else:
            del self._per_source[source]

    def _evict(self, table: dict[T, str | None]) -> None:
        victim = next(iter(table))
        self._release(table.pop(victim))
        logger.debug(
            "dropped a pending handshake (%d waiting, %d verified)", self.waiting, len(self._verified)
        )
        self._evicted.add(victim)
        self._drop(victim)

    def _counts(self) -> tuple[int, int]:
        return self.waiting, len(self._verified)

    def _report(self) -> None:
        """One warning per REPORT_INTERVAL at most, with what was shed since the last one."""
        now = self._clock()
        if now - self._reported_at < REPORT_INTERVAL:
            return
        counts = (self.refused, self.evicted_waiting, self.evicted_verified)
        refused, waiting, verified = (now_ - then for now_, then in zip(counts, self._reported, strict=True))
        since = "" if self._reported_at == -math.inf else f" in the last {now - self._reported_at:.0f} s"
        logger.warning(
            "admission under load%s: refused %d (source at per_source), dropped %d waiting and "
            "%d verified handshakes; %d pending (%r)",
            since,
            refused,
            waiting,
            verified,
            len(self),
            self.policy,
        )
        self._reported_at, self._reported = now, counts
