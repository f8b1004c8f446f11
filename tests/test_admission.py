"""The admission policy, sans IO: randomness and the clock are injected, so every draw is decided
here. The same policy against real sockets under a flood: tests/hostile/test_admission_flood.py."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gcmstream
from gcmstream.admission import (
    DEFAULT_ADMISSION,
    REPORT_INTERVAL,
    Admission,
    AdmissionPolicy,
    admission_policy,
    fit_to_descriptors,
    source_of,
)
from gcmstream.anyio_stream import SecureListener, connect_tcp, create_tcp_listener
from gcmstream.format import HEADER_FIXED_SIZE

from .helpers import KEY

A = ("198.51.100.1", 40000)  # peer addresses as sockets give them
B = ("198.51.100.2", 40000)


class Coin:
    """An injected ``random``: returns the queued draws, then ``then``."""

    def __init__(self, *draws: float, then: float = 0.999) -> None:
        self.draws, self.then = list(draws), then
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.draws.pop(0) if self.draws else self.then


def admission(
    policy: AdmissionPolicy, coin: Coin | None = None, clock: Any = None
) -> tuple[Admission[int], list[int]]:
    dropped: list[int] = []
    return (
        Admission(policy, dropped.append, random=coin or Coin(), clock=clock or (lambda: 0.0)),
        dropped,
    )


# -- the policy's values ------------------------------------------------------------------------


def test_the_defaults_are_the_documented_ones() -> None:
    assert AdmissionPolicy() == DEFAULT_ADMISSION
    assert (DEFAULT_ADMISSION.start, DEFAULT_ADMISSION.rate, DEFAULT_ADMISSION.full) == (256, 30, 512)
    assert (DEFAULT_ADMISSION.verified, DEFAULT_ADMISSION.per_source) == (1024, 64)
    assert gcmstream.AdmissionPolicy is AdmissionPolicy


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"start": 0}, "start must be an int >= 1"),
        ({"start": 2.0}, "start must be an int >= 1"),
        ({"start": True}, "start must be an int >= 1"),
        ({"full": 0, "start": 1}, "full must be an int >= 1"),
        ({"start": 11, "full": 10}, r"start \(11\) must not exceed full \(10\)"),
        ({"rate": -1}, "rate must be an int >= 0"),
        ({"rate": 101}, "rate is a percentage from 0 to 100"),
        ({"verified": 0}, "verified must be an int >= 1"),
        ({"per_source": 0}, "per_source must be an int >= 1"),
        ({"per_source": "3"}, "per_source must be an int >= 1"),
    ],
)
def test_a_bad_policy_raises_value_error_naming_the_value(values: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AdmissionPolicy(**values)


def test_a_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        DEFAULT_ADMISSION.full = 1  # type: ignore[misc]


@pytest.mark.parametrize("limit", [0, -1, 2.5, None, "2", True])
def test_max_pending_handshakes_must_be_an_int_of_at_least_1(limit: Any) -> None:
    with pytest.raises(ValueError, match="max_pending_handshakes must be an int >= 1"):
        AdmissionPolicy.from_max_pending_handshakes(limit)


def test_max_pending_handshakes_builds_a_policy_without_a_random_band() -> None:
    policy = admission_policy(None, 5)
    assert (policy.start, policy.full, policy.verified) == (5, 5, 5)
    assert [policy.drop_probability(n) for n in (4, 5, 6)] == [0.0, 1.0, 1.0]
    assert admission_policy(None, None) is DEFAULT_ADMISSION
    own = AdmissionPolicy(start=2, full=4)
    assert admission_policy(own, None) is own
    with pytest.raises(ValueError, match="not both"):
        admission_policy(own, 5)
    with pytest.raises(TypeError, match=r"^admission must be an AdmissionPolicy, got int$"):
        admission_policy(256, None)  # type: ignore[arg-type]


def test_an_admission_takes_only_a_policy() -> None:
    """A server's limit given where the policy goes (``Admission(256, ...)``) is refused at
    once, not an AttributeError at the first connection."""
    with pytest.raises(TypeError, match=r"^policy must be an AdmissionPolicy, got int$"):
        Admission(256, print)  # type: ignore[arg-type]


def test_the_drop_probability_is_openssh_maxstartups_line() -> None:
    """sshd_config(5) MaxStartups 10:30:100: 30 % at 10 unauthenticated, rising linearly,
    100 % at 100."""
    policy = AdmissionPolicy(start=10, rate=30, full=100)
    assert policy.drop_probability(0) == policy.drop_probability(9) == 0.0
    assert policy.drop_probability(10) == pytest.approx(0.30)
    assert policy.drop_probability(55) == pytest.approx(0.65)
    assert policy.drop_probability(99) == pytest.approx(0.30 + 0.70 * 89 / 90)
    assert policy.drop_probability(100) == policy.drop_probability(1000) == 1.0


# -- the rules ------------------------------------------------------------------------------------


def test_random_early_drop_evicts_the_longest_waiting_when_the_draw_falls_below() -> None:
    coin = Coin(0.29, 0.31)  # at start (30 %): the first draw drops, the second does not
    pending, dropped = admission(AdmissionPolicy(start=3, rate=30, full=10, per_source=None), coin)
    for connection in range(3):
        assert pending.admit(connection, A)
    assert coin.calls == 0  # below start: no draw, no drop
    assert pending.admit(3, A) and dropped == [0]  # 0.29 < 0.30: the longest waiting goes
    assert pending.admit(4, A) and dropped == [0]  # 0.31: nobody goes
    assert pending.waiting == 4 and pending.evicted_waiting == 1


def test_at_full_the_longest_waiting_goes_without_a_draw() -> None:
    coin = Coin()
    pending, dropped = admission(AdmissionPolicy(start=3, full=3, per_source=None), coin)
    for connection in range(6):
        assert pending.admit(connection, A)
    assert dropped == [0, 1, 2] and pending.waiting == 3 and coin.calls == 0


def test_a_newcomer_is_evicted_only_after_every_connection_waiting_before_it() -> None:
    """The lower bound on a newcomer's chance: admitted with W waiting ahead of it, it outlives
    the next W evictions (here at full, where every arrival evicts)."""
    pending, dropped = admission(AdmissionPolicy(start=16, full=16, per_source=None))
    for connection in range(16):
        pending.admit(connection, A)
    pending.admit(100, A)  # the newcomer: 15 waiting ahead of it after the drop it caused
    for attacker in range(200, 215):
        pending.admit(attacker, A)
    assert 100 not in dropped
    pending.admit(215, A)
    assert dropped[-1] == 100


def test_a_verified_handshake_is_never_evicted_for_one_that_sent_nothing() -> None:
    pending, dropped = admission(AdmissionPolicy(start=2, full=2, verified=3, per_source=None))
    for connection in range(3):
        pending.admit(connection, A)
        pending.verified(connection)
    for silent in range(10, 1010):  # a silent flood: only waiting ones are evicted
        assert pending.admit(silent, A)
    assert not set(dropped) & {0, 1, 2}
    assert pending.verified_count == 3 and pending.waiting == 2 and pending.evicted_verified == 0


def test_a_replayed_header_evicts_only_the_oldest_verified() -> None:
    """A replay verifies too; the verified class is bounded and sheds its own oldest (a genuine
    client's Finished follows its header within one round trip)."""
    pending, dropped = admission(AdmissionPolicy(start=2, full=2, verified=2, per_source=None))
    pending.admit(1, A)
    pending.admit(2, A)  # waiting, never verified
    for replay in (10, 11, 12, 13):
        pending.admit(replay, A)  # (evicts waiting ones while the class is full)
        pending.verified(replay)
    assert dropped == [1, 10, 11] and pending.evicted_verified == 2  # (1 made room for 10)
    assert pending.waiting == 1  # 2 still waits: no verified one evicted it
    pending.verified(10)  # already evicted: nothing
    assert pending.verified_count == 2


def test_one_that_sent_nothing_is_evicted_before_one_that_sent_part_of_its_header() -> None:
    """Review 2026-12-04 finding 1: the victim is the oldest silent connection, then (only if none
    is silent) the oldest that sent part of a header."""
    pending, dropped = admission(AdmissionPolicy(start=3, full=3, per_source=None))
    for connection in (1, 2, 3):
        pending.admit(connection, A)
    pending.received(1)  # the oldest has begun its header
    pending.admit(4, A)
    assert dropped == [2] and pending.silent == 2  # 3 and 4
    pending.received(3)
    pending.received(4)
    pending.admit(5, A)  # 5 silent, but no room: the oldest partial goes, never the newcomer
    assert dropped == [2, 1] and pending.waiting == 3


def test_a_finished_connection_is_never_evicted() -> None:
    """Review finding 7: once its Finished verified, a connection leaves the classes; a replay
    flood that keeps `verified` full evicts other ones."""
    pending, dropped = admission(AdmissionPolicy(start=1, full=1, verified=1, per_source=None))
    pending.admit(1, A)
    pending.verified(1)
    pending.finished(1)
    for replay in range(10, 20):
        pending.admit(replay, A)
        pending.verified(replay)
    assert 1 not in dropped and len(dropped) == 9
    assert pending.done(1) is True  # not evicted: the adapter runs its handler
    assert pending.done(1) is False  # forgotten: a server keeps no finished connection


def test_one_evicted_but_not_yet_closed_whose_finished_arrives_is_kept() -> None:
    """asyncio closes the evicted at the end of the loop pass, if ``evicted`` still says so: a
    Finished read in that same pass rescues it (review finding 7)."""
    pending, dropped = admission(AdmissionPolicy(start=1, full=1, verified=1, per_source=None))
    pending.admit(1, A)
    pending.verified(1)
    pending.admit(2, A)
    pending.verified(2)  # evicts 1
    assert dropped == [1] and pending.evicted(1)
    pending.finished(1)  # its Finished, read in the same pass
    assert not pending.evicted(1) and pending.done(1) is True
    pending.admit(3, A)
    pending.verified(3)  # evicts 2, which stays evicted
    assert pending.evicted(2) and pending.done(2) is False and not pending.evicted(2)


def test_observe_reads_what_the_responders_opener_took() -> None:
    """The one rule adapters call from their read path (asyncio's buffer_updated, anyio's
    receive): nothing yet: silent; part of a header: partial; the header: verified; the
    Finished: finished (never evicted)."""
    pending, dropped = admission(AdmissionPolicy(start=1, full=1, verified=1, per_source=None))
    client = gcmstream.Channel(KEY, role=gcmstream.Role.INITIATOR)
    server = gcmstream.Channel(KEY, role=gcmstream.Role.RESPONDER)
    first = client.initial_data()
    pending.admit(1, A)
    server.opener.receive_data(first[:HEADER_FIXED_SIZE])
    pending.observe(1, server.opener)
    assert pending.silent == 0 and pending.waiting == 1
    server.opener.receive_data(first[HEADER_FIXED_SIZE:])
    pending.observe(1, server.opener)
    assert pending.verified_count == 1 and pending.waiting == 0
    client.opener.receive_data(server.data_to_send())
    server.opener.receive_data(client.data_to_send())
    pending.observe(1, server.opener)
    assert len(pending) == 0 and server.handshake_complete()
    pending.admit(2, A)
    pending.verified(2)  # would evict 1 if it still counted as verified
    assert dropped == [] and pending.done(1) is True


def test_the_default_budget_leaves_a_quarter_of_the_descriptor_limit() -> None:
    """Review finding 2: at the usual soft RLIMIT_NOFILE of 1,024 the defaults' full + verified
    (1,536) would reach EMFILE; fitted, they leave a quarter free and keep their shape."""
    fitted = fit_to_descriptors(DEFAULT_ADMISSION, 1024)
    assert 760 <= fitted.full + fitted.verified <= 768
    assert fitted.start <= fitted.full and fitted.rate == DEFAULT_ADMISSION.rate
    assert abs(fitted.verified - 2 * fitted.full) <= 1  # the defaults' ratio (rounded down)
    assert fitted.per_source is not None and 1 <= fitted.per_source < DEFAULT_ADMISSION.per_source  # type: ignore[operator]
    assert fit_to_descriptors(DEFAULT_ADMISSION, 65536) is DEFAULT_ADMISSION  # it fits already
    assert fit_to_descriptors(DEFAULT_ADMISSION, None) is DEFAULT_ADMISSION  # unknown (Windows)
    small = fit_to_descriptors(DEFAULT_ADMISSION, 128)
    assert min(small.start, small.full, small.verified) >= 1 and small.full + small.verified <= 64
    assert fit_to_descriptors(DEFAULT_ADMISSION, 100) is DEFAULT_ADMISSION  # too few to share


def test_a_fitted_policy_is_scaled_by_one_factor_and_keeps_what_is_not_a_count() -> None:
    """At 256 descriptors, 64 are kept (a quarter, at least 64): full + verified get the other
    192, each count scaled by 192 / 1,536 (rounded down, at least 1); the rate and a missing
    per-source cap are kept; a policy that fits exactly is returned as it is."""
    assert fit_to_descriptors(DEFAULT_ADMISSION, 256) == AdmissionPolicy(
        start=32, rate=30, full=64, verified=128, per_source=8
    )
    uncapped = AdmissionPolicy(start=1, rate=50, full=1000, verified=1000, per_source=None)
    assert fit_to_descriptors(uncapped, 256) == AdmissionPolicy(
        start=1, rate=50, full=96, verified=96, per_source=None
    )
    tiny = AdmissionPolicy(start=1, full=1000, verified=1000, per_source=1)
    assert (fit_to_descriptors(tiny, 256).start, fit_to_descriptors(tiny, 256).per_source) == (1, 1)
    exact = AdmissionPolicy(start=100, full=256, verified=512)  # 768 = 1,024 - 1,024 / 4
    assert fit_to_descriptors(exact, 1024) is exact


def test_done_says_whether_the_admission_had_evicted_it() -> None:
    pending, dropped = admission(AdmissionPolicy(start=1, full=1, per_source=None))
    pending.admit(1, A)
    pending.admit(2, A)
    assert dropped == [1]
    assert pending.done(1) is False  # evicted: the adapter does not log it
    assert pending.done(2) is True and len(pending) == 0
    assert pending.done(2) is False


def test_a_source_at_its_cap_is_refused_once_start_are_pending() -> None:
    pending, dropped = admission(AdmissionPolicy(start=4, rate=0, full=100, per_source=2))
    for connection in range(4):  # below start: one source may hold more than its cap
        assert pending.admit(connection, A)
    assert pending.pending_from(A) == 4
    assert not pending.admit(4, A)  # under pressure, A is past its cap: refused
    assert pending.admit(5, B) and pending.admit(6, B)
    assert not pending.admit(7, B)
    assert pending.refused == 2 and dropped == []
    for connection in range(3):
        pending.done(connection)  # A back to 1 pending
    assert pending.admit(8, A)
    assert pending.pending_from(A) == 2 and pending.pending_from(B) == 2


def test_one_address_alone_holds_start_slots_then_per_source() -> None:
    """What SECURITY.md states (review 2026-12-04 finding 6): the cap binds once ``start`` are
    pending, so one address alone holds ``start`` slots; once others fill the rest, a newcomer
    of a source at ``per_source`` is refused."""
    policy = AdmissionPolicy(start=8, rate=0, full=32, per_source=2)
    pending, dropped = admission(policy)
    for connection in range(100):  # bounded: one address, connections that never finish
        pending.admit(connection, A)
    assert pending.pending_from(A) == policy.start and pending.refused == 100 - policy.start
    assert pending.admit(1000, B) and pending.admit(1001, B)
    assert not pending.admit(1002, B)  # 10 pending >= start: B is at its cap of 2
    assert dropped == []


def test_an_evicted_or_finished_connection_gives_its_sources_slot_back() -> None:
    pending, dropped = admission(AdmissionPolicy(start=1, full=2, verified=1, per_source=None))
    pending.admit(1, A)
    pending.verified(1)
    pending.admit(2, A)
    pending.verified(2)  # evicts 1
    assert dropped == [1] and pending.pending_from(A) == 1
    pending.done(2)
    assert pending.pending_from(A) == 0 and len(pending) == 0


def test_a_connection_that_sent_part_of_its_header_counts_once_with_its_source() -> None:
    pending, dropped = admission(AdmissionPolicy(start=4, full=4, verified=4, per_source=None))
    pending.admit(1, A)
    pending.admit(2, A)
    pending.received(1)
    pending.received(2)
    pending.received(2)  # more of its header: still one partial connection
    assert (len(pending), pending.waiting, pending.silent) == (2, 2, 0)
    pending.verified(1)
    pending.received(1)  # bytes after its header verified: it stays verified
    pending.received(99)  # never admitted: nothing
    assert (len(pending), pending.waiting, pending.verified_count) == (2, 1, 1)
    assert pending.pending_from(A) == 2
    assert pending.done(2) and pending.done(1)
    assert pending.pending_from(A) == 0 and len(pending) == 0 and dropped == []


def test_a_connection_whose_finished_verified_gives_its_sources_slot_back_at_once() -> None:
    """A completed handshake no longer counts against its source's cap (it is not pending):
    a source whose clients all complete is never refused for them."""
    pending, dropped = admission(AdmissionPolicy(start=1, rate=0, full=100, per_source=1))
    for connection in range(10):  # bounded: each completes before the next arrives
        assert pending.admit(connection, A)
        pending.verified(connection)
        pending.finished(connection)
        assert pending.pending_from(A) == 0 and len(pending) == 0
    assert pending.refused == 0 and dropped == []
    assert all(pending.done(connection) for connection in range(10))


def test_an_address_without_a_source_has_nothing_pending_from_it() -> None:
    pending, _ = admission(AdmissionPolicy(start=1, full=100, per_source=1))
    pending.admit(1, "/run/server.sock")
    pending.admit(2, A)
    assert pending.pending_from("/run/server.sock") == 0 and pending.pending_from(None) == 0
    assert pending.pending_from(A) == 1


@pytest.mark.parametrize(
    ("address", "source"),
    [
        (("192.0.2.7", 1), "192.0.2.7"),
        (("::ffff:192.0.2.7", 1, 0, 0), "192.0.2.7"),
        (("2001:db8:1:2:3:4:5:6", 1, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:ffff::1", 1, 0, 0), "2001:db8:1:2::/64"),
        (("fe80::1%eth0", 1, 0, 2), "fe80::/64"),
        ("/run/server.sock", None),
        (("not an address", 1), None),
        (None, None),
        ((), None),
    ],
)
def test_a_source_is_the_ipv4_address_or_the_ipv6_64(address: object, source: str | None) -> None:
    assert source_of(address) == source


def test_sources_without_an_address_have_no_cap() -> None:
    pending, _ = admission(AdmissionPolicy(start=1, full=100, per_source=1))
    assert all(pending.admit(n, "/run/server.sock") for n in range(10))


# -- logging: counts, never a line per connection ---------------------------------------------------


def test_a_flood_is_reported_once_per_interval_with_counts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gcmstream")
    now = [100.0]
    pending, dropped = admission(AdmissionPolicy(start=1, full=1, per_source=1), clock=lambda: now[0])
    for connection in range(1000):
        pending.admit(connection, A if connection % 2 else ("192.0.2.9", connection))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "dropped 1 waiting" in warnings[0]
    now[0] += REPORT_INTERVAL
    pending.admit(5000, ("192.0.2.10", 1))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[1].startswith(f"admission under load in the last {REPORT_INTERVAL:.0f} s: refused ")
    assert f"refused {pending.refused} " in warnings[1]  # every refusal was from A, after the first report
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == pending.refused + pending.evicted_waiting  # the detail, at debug only


# -- invariants under any sequence ------------------------------------------------------------------

OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "verified", "done"]),
        st.integers(0, 15),  # the connection: few, so verified and done find admitted ones
        st.integers(0, 3),  # its source
        st.floats(0, 0.999),  # the draw
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(
    operations=OPERATIONS,
    start=st.integers(1, 6),
    extra=st.integers(0, 6),
    verified=st.integers(1, 4),
    rate=st.integers(0, 100),
    per_source=st.one_of(st.none(), st.integers(1, 4)),
)
def test_invariants_hold_under_any_sequence(
    operations: list[tuple[str, int, int, float]],
    start: int,
    extra: int,
    verified: int,
    rate: int,
    per_source: int | None,
) -> None:
    policy = AdmissionPolicy(
        start=start, rate=rate, full=start + extra, verified=verified, per_source=per_source
    )
    draws: list[float] = []
    dropped: list[int] = []
    pending: Admission[int] = Admission(policy, dropped.append, random=lambda: draws.pop(), clock=lambda: 0.0)
    state: dict[int, str] = {}  # what the model says: "waiting" or "verified"
    seen: set[int] = set()  # a connection arrives once (a socket is not reused)
    for operation, connection, source, draw in operations:
        draws[:] = [draw]
        before = set(dropped)
        if operation == "admit" and connection not in seen:
            seen.add(connection)
            if pending.admit(connection, (f"192.0.2.{source}", 1)):
                state[connection] = "waiting"
        elif operation == "verified":
            pending.verified(connection)
            if state.get(connection) == "waiting":
                state[connection] = "verified"
        elif operation == "done":
            assert pending.done(connection) is (connection in state)
            state.pop(connection, None)
        for victim in set(dropped) - before:
            kind = state.pop(victim)
            # an admission evicts a waiting one only; a verification, a verified one only
            assert kind == ("waiting" if operation == "admit" else "verified")
        assert pending.waiting == sum(kind == "waiting" for kind in state.values()) <= policy.full
        assert pending.verified_count == sum(kind == "verified" for kind in state.values()) <= verified
    assert len(pending) == len(state)


# -- the servers take the policy --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_start_server_refuses_both_spellings_and_a_bad_policy() -> None:
    with pytest.raises(ValueError, match="not both"):
        await gcmstream.start_server(
            lambda r, w: None, "127.0.0.1", 0, key=KEY, max_pending_handshakes=4, admission=AdmissionPolicy()
        )
    with pytest.raises(ValueError, match="max_pending_handshakes must be an int >= 1"):
        await gcmstream.start_server(lambda r, w: None, "127.0.0.1", 0, key=KEY, max_pending_handshakes=0)


@pytest.mark.anyio
async def test_the_anyio_listener_takes_either_spelling_and_checks_it() -> None:
    with pytest.raises(ValueError, match="not both"):
        await create_tcp_listener(
            key=KEY, local_host="127.0.0.1", max_pending_handshakes=4, admission=AdmissionPolicy()
        )
    listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1", max_pending_handshakes=4)
    try:
        assert listener.config.admission == AdmissionPolicy.from_max_pending_handshakes(4)
        assert isinstance(listener, SecureListener)
    finally:
        await listener.aclose()
    listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1")
    try:
        assert listener.config.admission is DEFAULT_ADMISSION
    finally:
        await listener.aclose()


# -- which failures are a key holder's (review 2026-12-04 finding 4) ---------------------------------


def test_proved_key_is_true_only_between_a_verified_finished_and_done() -> None:
    pending, _ = admission(AdmissionPolicy(start=4, full=4, verified=4, per_source=None))
    for connection in range(3):
        pending.admit(connection, A)
    pending.verified(1)  # a header verifies: a replay can do that much
    pending.finished(2)  # its Finished verified: only a key holder can
    assert [pending.proved_key(c) for c in range(3)] == [False, False, True]
    assert pending.done(2)
    assert not pending.proved_key(2)  # ended: forgotten


def test_each_report_counts_exactly_what_was_shed_since_the_one_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first warning counts from zero, each later one only what happened since the one
    before (not since the start), and every detail line at debug level names what it did.
    (Mutation run mrest: cumulative counts, a first count off by one and emptied debug lines
    went unnoticed.)"""
    caplog.set_level(logging.DEBUG, logger="gcmstream")
    now = [100.0]
    policy = AdmissionPolicy(start=1, full=1, per_source=1)
    pending, _ = admission(policy, clock=lambda: now[0])
    pending.admit(0, ("192.0.2.1", 1))
    assert not pending.admit(1, ("192.0.2.1", 2))  # its source at per_source: refused, reported
    for connection in range(2, 7):  # five newcomers, each evicting the one waiting (full=1)
        assert pending.admit(connection, (f"198.51.100.{connection}", 1))
    now[0] += REPORT_INTERVAL
    assert pending.admit(7, ("198.51.100.7", 1))  # a sixth eviction, and the second report
    tail = "dropped {} waiting and 0 verified handshakes; {} pending ({!r})"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "admission under load: refused 1 (source at per_source), " + tail.format(0, 1, policy),
        f"admission under load in the last {REPORT_INTERVAL:.0f} s: refused 0 (source at per_source), "
        + tail.format(6, 0, policy),  # (reported as the sixth was evicted, before the newcomer)
    ]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug == ["refused a connection from 192.0.2.1: 1 handshakes pending from it"] + 6 * [
        "dropped a pending handshake (0 waiting, 0 verified)"
    ]


# -- what a client refused unanswered is told (second review 2026-12-04, finding 7) -----------

UNDER_LOAD = "or it refused the connection under load"


async def refused_on_start_server(policy: AdmissionPolicy) -> str:
    """The message of a key holder's connect to ``start_server`` while one silent connection
    from the same address (127.0.0.1) holds that address's one slot."""

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        writer.close()

    async with await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, admission=policy) as server:
        port = server.sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):  # holds 127.0.0.1's one slot
            await asyncio.sleep(0.2)
            with pytest.raises(gcmstream.TruncatedStreamError) as refused:
                await asyncio.wait_for(gcmstream.open_connection("127.0.0.1", port, key=KEY), 10)
    return str(refused.value)


async def refused_on_the_anyio_listener(policy: AdmissionPolicy) -> str:
    """The same against the anyio listener."""
    listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1", admission=policy)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, lambda stream: stream.aclose())
        with socket.create_connection(("127.0.0.1", port)):  # holds 127.0.0.1's one slot
            await anyio.sleep(0.2)
            with anyio.fail_after(10), pytest.raises(gcmstream.TruncatedStreamError) as refused:
                await connect_tcp("127.0.0.1", port, key=KEY)
        tg.cancel_scope.cancel()
    return str(refused.value)


@pytest.mark.parametrize("server", ["start_server", "anyio-asyncio", "anyio-trio"])
def test_a_key_holder_refused_at_its_sources_cap_is_told_it_may_be_load(server: str) -> None:
    """A client with the right key, refused unanswered because its address was at its cap
    (real sockets), was told "a peer with another key or context hangs up here": the server's
    refusal passed for a key mismatch. The client cannot tell the two apart (either server hangs
    up before answering a byte), so the message names both."""
    policy = AdmissionPolicy(start=1, full=4, per_source=1)
    if server == "start_server":
        message = asyncio.run(refused_on_start_server(policy))
    else:
        message = anyio.run(refused_on_the_anyio_listener, policy, backend=server.removeprefix("anyio-"))
    assert UNDER_LOAD in message and "another key or context" in message, message
    assert "0 bytes received" in message and "hangs up here" not in message, message
