"""The server core alone (src/gcmstream/_server.py), sans-IO, with a fake clock: deadlines fire
exactly once, move on progress and stop while reading is paused; admission decisions; handler
isolation's log line; statistics. Every server path runs on this core: tests/hostile/
(test_deadlines.py, test_handlers.py, test_admission_flood.py) drive them over real sockets."""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace

import pytest

from gcmstream import AdmissionPolicy
from gcmstream._server import (
    ConnectionDeadlines,
    Deadline,
    FailureReport,
    ServerCore,
    connection_statistics,
    describe_handshake_failure,
    descriptor_soft_limit,
    log_handler_failure,
    server_admission,
)
from gcmstream.admission import DEFAULT_ADMISSION, REPORT_INTERVAL
from gcmstream.config import Configuration
from gcmstream.errors import HandshakeError, TruncatedStreamError

from .helpers import KEY


def fired(deadlines: ConnectionDeadlines, until: float, step: float = 0.25) -> list[tuple[float, Deadline]]:
    """Every expiry an adapter would see, polling its timer from 0 to ``until`` (a fake clock:
    each tick arms get_timer() and calls handle_timer when it is due, as a loop timer would)."""
    seen = []
    now = 0.0
    while now <= until:
        at = deadlines.get_timer()
        if at is not None and at <= now:
            expired = deadlines.handle_timer(now)
            if expired is not None:
                seen.append((now, expired))
        now += step
    return seen


# -- deadlines ---------------------------------------------------------------------------------


def test_the_handshake_deadline_fires_once_at_its_time() -> None:
    deadlines = ConnectionDeadlines(handshake_timeout=5.0, record_timeout=30.0)
    assert deadlines.get_timer() is None  # not started
    deadlines.handshake_started(10.0)
    assert deadlines.get_timer() == deadlines.handshake_deadline == 15.0
    assert deadlines.read_timer() is None  # the handshake driver arms it, not the read
    assert deadlines.handle_timer(14.99) is None
    assert deadlines.handle_timer(15.0) is Deadline.HANDSHAKE
    assert deadlines.expired is Deadline.HANDSHAKE
    assert deadlines.handle_timer(16.0) is None  # once
    assert deadlines.get_timer() is None
    assert deadlines.read_timer() is None


def test_a_completed_handshake_has_no_handshake_deadline() -> None:
    deadlines = ConnectionDeadlines(handshake_timeout=5.0)
    deadlines.handshake_started(0.0)
    deadlines.handshake_started(3.0)  # again: the first start counts
    assert deadlines.handshake_deadline == 5.0
    deadlines.handshake_complete(4.0)
    assert deadlines.get_timer() is None
    assert deadlines.handle_timer(100.0) is None
    assert deadlines.expired is None


def test_the_repr_shows_only_the_deadlines_that_run() -> None:
    deadlines = ConnectionDeadlines(handshake_timeout=5.0, record_timeout=2.0)
    assert repr(deadlines) == "<ConnectionDeadlines due={} expired=None>"
    deadlines.handshake_started(10.0)
    assert repr(deadlines) == "<ConnectionDeadlines due={'handshake_timeout': 15.0} expired=None>"


def test_a_record_deadline_starts_with_the_record_and_a_trickle_does_not_move_it() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)  # a record began
    for now in (1.5, 2.0, 2.5):  # a byte at a time: the same record, the same deadline
        deadlines.received(now, receiving_record=True)
        assert deadlines.read_timer() == 3.0
    assert deadlines.handle_timer(2.99) is None
    assert deadlines.handle_timer(3.0) is Deadline.RECORD
    assert deadlines.read_timer() is None and deadlines.get_timer() is None  # fired: none re-armed
    assert deadlines.handle_timer(3.5) is None
    assert deadlines.reason(Deadline.RECORD) == (
        "a record started more than 2 s ago has not finished arriving"
    )


def test_a_whole_record_re_arms_the_record_deadline() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)
    deadlines.received(2.5, receiving_record=False)  # whole: progress
    assert deadlines.read_timer() is None
    deadlines.received(2.6, receiving_record=True)  # the next one began
    assert deadlines.read_timer() == pytest.approx(4.6)
    assert deadlines.handle_timer(3.0) is None  # the first record's time has passed: not due
    assert fired(deadlines, 6.0) == [(4.75, Deadline.RECORD)]


def test_the_idle_deadline_moves_with_each_read_and_fires_once() -> None:
    deadlines = ConnectionDeadlines(idle_timeout=1.0)
    deadlines.handshake_started(0.0)
    deadlines.received(0.5, receiving_record=False)
    assert deadlines.read_timer() is None  # no idle deadline during the handshake
    deadlines.handshake_complete(1.0)
    assert deadlines.read_timer() == deadlines.get_timer() == 2.0  # get_timer counts silence too
    deadlines.received(1.5, receiving_record=False)  # progress: a timer armed at 2.0 finds nothing
    assert deadlines.handle_timer(2.0) is None
    assert deadlines.read_timer() == 2.5  # re-armed there
    assert deadlines.handle_timer(2.5) is Deadline.IDLE
    assert deadlines.handle_timer(9.0) is None
    assert deadlines.reason(Deadline.IDLE) == "nothing received for 1 s"


def test_a_paused_reader_stops_both_clocks_and_resuming_starts_them_again() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0, idle_timeout=3.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)
    deadlines.paused()  # the local reader is slow: not the peer's delay
    assert deadlines.read_timer() is None
    deadlines.received(5.0, receiving_record=True)  # (bytes already in the kernel's buffer)
    assert deadlines.read_timer() is None
    deadlines.resumed(10.0, receiving_record=True)
    assert deadlines.read_timer() == 12.0  # the record's, from the resume
    assert fired(deadlines, 20.0) == [(12.0, Deadline.RECORD)]


def test_resuming_without_a_record_timeout_times_only_the_silence() -> None:
    deadlines = ConnectionDeadlines(idle_timeout=3.0)  # record_timeout None: no record deadline
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)
    deadlines.paused()
    deadlines.resumed(5.0, receiving_record=True)
    assert deadlines.read_timer() == 8.0
    assert fired(deadlines, 20.0) == [(8.0, Deadline.IDLE)]


def test_a_peer_that_ended_its_input_is_neither_idle_nor_sending_a_record() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0, idle_timeout=3.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)
    deadlines.ended()
    assert deadlines.get_timer() is None
    deadlines.resumed(2.0, receiving_record=True)
    deadlines.received(2.0, receiving_record=True)
    assert fired(deadlines, 10.0) == []


def test_the_earliest_deadline_wins_and_ties_go_to_the_record() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0, idle_timeout=2.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)  # record and silence both due at 3.0
    assert deadlines.handle_timer(3.0) is Deadline.RECORD
    assert deadlines.handle_timer(3.0) is None


def test_no_timeouts_no_timer() -> None:
    deadlines = ConnectionDeadlines()
    deadlines.handshake_started(0.0)
    deadlines.received(1.0, receiving_record=True)
    deadlines.handshake_complete(2.0)
    assert deadlines.get_timer() is None
    assert fired(deadlines, 100.0, step=10.0) == []


def test_deadlines_come_from_the_configuration() -> None:
    config = Configuration(key=KEY, handshake_timeout=4, record_timeout=5, idle_timeout=6)
    deadlines = ConnectionDeadlines.from_config(config)
    assert (deadlines.handshake_timeout, deadlines.record_timeout, deadlines.idle_timeout) == (4, 5, 6)


def test_a_dropped_connection_is_logged_once_with_its_peer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gcmstream")
    deadlines = ConnectionDeadlines(record_timeout=0.5, handshake_timeout=1.0)
    error = deadlines.drop(Deadline.RECORD, ("127.0.0.1", 9))
    assert isinstance(error, TimeoutError)
    assert caplog.messages == [
        "dropping ('127.0.0.1', 9): a record started more than 0.5 s ago has not finished arriving "
        "(record_timeout)"
    ]
    caplog.clear()
    assert str(deadlines.drop(Deadline.HANDSHAKE, "peer")) == "not complete within 1.0 s"
    assert caplog.messages == []  # the handshake's line is describe_handshake_failure's


# -- admission, handler isolation, statistics ----------------------------------------------------


def core(
    policy: AdmissionPolicy, dropped: list[str], chance: float = 0.0, clock: list[float] | None = None
) -> ServerCore[str]:
    config = Configuration(key=KEY, admission=policy)
    now = [0.0] if clock is None else clock
    return ServerCore(config, dropped.append, random=lambda: chance, clock=lambda: now[0])


HUNG_UP = TruncatedStreamError("the connection ended during the handshake")


def opener(*, header: object = None, finished: bool = False) -> SimpleNamespace:
    return SimpleNamespace(failed=False, header=header, record_layer=object() if finished else None)


def test_the_core_evicts_the_longest_waiting_for_a_newcomer_and_says_nothing_of_it() -> None:
    dropped: list[str] = []
    server = core(AdmissionPolicy.from_max_pending_handshakes(2), dropped)
    assert server.admit("a", ("10.0.0.1", 1))
    assert server.admit("b", ("10.0.0.2", 1))
    server.observe("b", opener())  # b sent part of its header: evicted after the silent ones
    assert server.admit("c", ("10.0.0.3", 1))
    assert dropped == ["a"]
    assert server.handshake_failed("a", HUNG_UP) is None  # evicted: no line of its own
    server.observe("c", opener(header=object(), finished=True))
    assert server.handshake_completed("c")  # its Finished verified: served
    assert server.handshake_failed("b", HUNG_UP) == logging.WARNING
    assert server.statistics.as_dict() == {
        "admitted": 3,
        "handler_failures": 0,
        "handshakes_failed": 1,
        "refused": 0,
        "served": 1,
    }


def test_an_evicted_handshake_that_completed_anyway_is_not_served() -> None:
    dropped: list[str] = []
    server = core(AdmissionPolicy.from_max_pending_handshakes(1), dropped)
    server.admit("a", ("10.0.0.1", 1))
    server.admit("b", ("10.0.0.2", 1))
    assert dropped == ["a"]
    assert not server.handshake_completed("a")
    assert server.statistics.served == 0


def test_the_core_refuses_a_source_at_its_cap() -> None:
    dropped: list[str] = []
    server = core(AdmissionPolicy(start=1, rate=100, full=4, verified=4, per_source=1), dropped)
    assert server.admit("a", ("10.0.0.1", 1))
    assert not server.admit("b", ("10.0.0.1", 2))  # the same source, at its cap past start
    assert server.admit("c", ("10.0.0.2", 1))
    assert server.statistics.refused == 1
    assert server.statistics.admitted == 2


def test_the_core_passes_its_random_clock_and_log_on(caplog: pytest.LogCaptureFixture) -> None:
    """What the tests decide reaches the admission and the report: ``random`` decides each
    eviction (0.0 always under the chance, 1.0 never), ``clock`` the admission's report
    interval, ``log`` where the failure count goes (listen's own logger). A mutation run found
    that dropping any of them passed every test."""
    caplog.set_level(logging.WARNING)
    policy = AdmissionPolicy(start=1, rate=50, full=100, verified=100, per_source=None)
    for chance, evicted in ((0.0, 29), (1.0, 0)):  # drop chance 0.5 to 0.65 here: never 0 or 1
        dropped: list[str] = []
        server: ServerCore[str] = ServerCore(
            Configuration(key=KEY, admission=policy), dropped.append, random=functools.partial(float, chance)
        )
        for n in range(30):
            server.admit(f"c{n}", ("10.0.0.1", n))
        assert len(dropped) == evicted, chance
    ignored: list[str] = []
    unseeded: ServerCore[str] = ServerCore(
        Configuration(key=KEY, admission=policy), ignored.append
    )  # random.random
    for n in range(30):
        assert unseeded.admit(f"c{n}", ("10.0.0.1", n))
    caplog.clear()
    now = [0.0]
    listen = logging.getLogger("gcmstream.cli")
    server = ServerCore(
        Configuration(key=KEY, admission=policy),
        ignored.append,
        random=lambda: 0.0,
        clock=lambda: now[0],
        log=listen,
    )
    server.admit("a", ("10.0.0.1", 1))
    server.admit("b", ("10.0.0.1", 2))  # evicts a: the admission's first report
    server.admit("c", ("10.0.0.1", 3))  # evicts b: within the interval, not said
    now[0] = REPORT_INTERVAL
    server.admit("d", ("10.0.0.1", 4))  # evicts c: the interval passed on the core's clock
    shed = [m for m in caplog.messages if m.startswith("admission under load")]
    assert len(shed) == 2 and shed[1].startswith("admission under load in the last 10 s: refused 0"), shed
    assert server.handshake_failed("d", HUNG_UP) == logging.WARNING  # its own line
    server.admit("e", ("10.0.0.1", 5))
    assert server.handshake_failed("e", HUNG_UP) == logging.DEBUG  # counted
    now[0] = 3 * REPORT_INTERVAL
    server.admit("f", ("10.0.0.1", 6))  # says the count, to the core's logger
    [count] = [r for r in caplog.records if r.getMessage().startswith("handshakes failed")]
    assert count.name == "gcmstream.cli"


def test_the_statistics_count_every_event(caplog: pytest.LogCaptureFixture) -> None:
    server = core(AdmissionPolicy(start=1, rate=0, full=4, verified=4, per_source=1), [])
    assert server.admit("a", ("10.0.0.1", 1))
    assert not server.admit("b", ("10.0.0.1", 2)) and not server.admit("c", ("10.0.0.1", 3))
    assert server.admit("d", ("10.0.0.2", 1))
    for name in ("a", "d"):
        server.observe(name, opener(header=object(), finished=True))
        assert server.handshake_completed(name)
    server.handler_failed(ValueError("one"), "p1")
    server.handler_failed(ValueError("two"), "p2")
    assert caplog.messages[-2].startswith("handler failed for p1; the server goes on:")
    assert server.statistics.as_dict() == {
        "admitted": 2,
        "handler_failures": 2,
        "handshakes_failed": 0,
        "refused": 2,
        "served": 2,
    }


def test_keyless_failures_are_one_warning_per_interval_counted_by_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review 2026-12-04 finding 4: a stranger's failed handshake costs the server a debug
    line; a warning goes out at most once per REPORT_INTERVAL, with the count by reason."""
    caplog.set_level(logging.WARNING, logger="gcmstream")
    now = [0.0]
    server = core(AdmissionPolicy(start=900, full=900, verified=900, per_source=None), [], clock=now)

    def fail(name: str, exc: Exception) -> int | None:
        server.admit(name, ("10.0.0.1", 1))
        return server.handshake_failed(name, exc)

    # a quiet server says the first at once, as its own line (the adapter logs it)
    assert fail("first", HUNG_UP) == logging.WARNING
    levels = [fail(f"c{n}", HUNG_UP if n % 3 else TimeoutError()) for n in range(300)]
    assert levels == [logging.DEBUG] * 300
    now[0] += REPORT_INTERVAL - 0.5
    assert fail("late", HUNG_UP) == logging.DEBUG
    assert caplog.messages == []  # the adapters log the connections' own lines; no count yet
    now[0] += 0.5  # the interval has passed: the next arrival says the count
    server.admit("next", ("10.0.0.2", 1))
    assert caplog.messages == [
        "handshakes failed without proving the key since the last warning (10 s): 301 (201 hung up or cut "
        "during the handshake, 100 too slow (handshake timeout)); each is logged at debug level"
    ]
    assert server.handshake_failed("next", HUNG_UP) == logging.DEBUG  # the count was this interval's line
    now[0] += REPORT_INTERVAL
    assert fail("after", HUNG_UP) == logging.DEBUG  # its arrival said the count of one: debug
    assert len(caplog.messages) == 2
    assert caplog.messages[1].startswith(
        "handshakes failed without proving the key since the last warning (10 s): 1 ("
    )
    now[0] += REPORT_INTERVAL
    server.admit("served", ("10.0.0.3", 1))  # an arrival after the flood says its last count
    assert len(caplog.messages) == 3
    now[0] += REPORT_INTERVAL
    assert fail("quiet again", HUNG_UP) == logging.WARNING  # a quiet interval: its own line again
    assert len(caplog.messages) == 3
    assert server.statistics.handshakes_failed == 305


def test_a_failure_after_the_interval_says_the_count_first_without_an_arrival(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The count goes out at the next failure too, not only at the next arrival: handshakes
    still pending when a flood stops end later, and no new client may come (a hand-made removal
    of that call went unnoticed: the other tests admit before each failure)."""
    caplog.set_level(logging.WARNING, logger="gcmstream")
    now = [1000.0]  # a clock far from 0, as time.monotonic's: the interval is a difference
    report = FailureReport(clock=lambda: now[0])
    assert report.failed(HUNG_UP, proved_key=False) == logging.WARNING  # its own line
    now[0] = 1001.0
    assert report.failed(HUNG_UP, proved_key=False) == logging.DEBUG  # counted
    now[0] = 1000.0 + REPORT_INTERVAL - 0.5
    report.report_due()
    assert caplog.messages == []  # not yet
    now[0] = 1001.0 + REPORT_INTERVAL
    assert report.failed(TimeoutError(), proved_key=False) == logging.DEBUG  # the count was the line
    assert caplog.messages == [
        "handshakes failed without proving the key since the last warning (11 s): 1 (1 hung up or cut during "
        "the handshake); each is logged at debug level"
    ]


def test_a_count_said_right_after_the_last_warning_says_the_real_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A new user's finding: `gcmstream listen` ending right after a second failure said "in
    the last 0 s" (the span was taken from the first failure counted). It is the time since the
    last warning line, said as a reader takes it in."""
    caplog.set_level(logging.WARNING, logger="gcmstream")
    now = [500.0]
    report = FailureReport(clock=lambda: now[0])
    assert report.failed(HUNG_UP, proved_key=False) == logging.WARNING  # its own line
    for at, said in ((500.02, "under 0.1 s"), (502.5, "2.5 s"), (509.0, "9.0 s")):
        now[0] = at
        report.failed(HUNG_UP, proved_key=False)
        report.report_due(final=True)
        assert caplog.messages[-1].startswith(
            f"handshakes failed without proving the key since the last warning ({said}): 1 ("
        ), caplog.messages
        now[0] = 500.0  # the next span again from the first line (the count's own line moved it)
        report = FailureReport(clock=lambda: now[0])
        report.failed(HUNG_UP, proved_key=False)


def test_a_failed_handshake_is_one_line_naming_the_peer_the_error_and_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gcmstream")
    describe_handshake_failure(HUNG_UP, "peer A")
    describe_handshake_failure(TimeoutError(), "peer B", 5.0, logging.DEBUG)
    describe_handshake_failure(TimeoutError("slow"), "peer C")  # no limit given: its own words
    assert caplog.messages == [
        "handshake with peer A failed: TruncatedStreamError: the connection ended during the handshake",
        "handshake with peer B failed: TimeoutError: not complete within 5.0 s",
        "handshake with peer C failed: TimeoutError: slow",
    ]
    assert [record.levelno for record in caplog.records] == [logging.WARNING, logging.DEBUG, logging.WARNING]


def test_a_peer_that_proved_the_key_keeps_its_own_warning_under_a_flood() -> None:
    server = core(AdmissionPolicy(start=900, full=900, verified=900, per_source=None), [])
    for n in range(50):  # a flood of strangers: their lines go at debug level
        server.admit(f"c{n}", ("10.0.0.1", n))
        server.handshake_failed(f"c{n}", HUNG_UP)
    server.admit("holder", ("10.0.0.2", 1))
    server.observe("holder", opener(header=object(), finished=True))  # its Finished verified
    assert server.handshake_failed("holder", HandshakeError("its stream failed")) == logging.WARNING
    server.admit("stranger", ("10.0.0.3", 1))
    server.observe("stranger", opener(header=object()))  # a verified header: a replay can do that
    assert server.handshake_failed("stranger", HUNG_UP) == logging.DEBUG


def test_the_failure_report_logs_to_the_logger_it_is_given(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    now = [0.0]
    report = FailureReport(lambda: now[0], logging.getLogger("gcmstream.cli"))  # as listen's
    assert report.failed(HUNG_UP, proved_key=False) == logging.WARNING
    assert report.failed(HUNG_UP, proved_key=False) == logging.DEBUG
    now[0] = REPORT_INTERVAL
    report.report_due()
    assert [(r.name, r.levelno) for r in caplog.records] == [("gcmstream.cli", logging.WARNING)]


def test_a_cancelled_handshake_leaves_the_admission() -> None:
    dropped: list[str] = []
    server = core(AdmissionPolicy.from_max_pending_handshakes(1), dropped)
    server.admit("a", ("10.0.0.1", 1))
    server.handshake_cancelled("a")
    assert len(server.admission) == 0
    server.admit("b", ("10.0.0.2", 1))
    assert dropped == []  # a's slot was free


def test_a_handler_failure_is_one_error_line_with_the_peer_and_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="gcmstream")
    server = core(DEFAULT_ADMISSION, [])
    try:
        raise ValueError("the handler has a bug")
    except ValueError as exc:
        server.handler_failed(exc, ("127.0.0.1", 7), "client_connected_cb")
    [line] = caplog.messages
    assert line.startswith("client_connected_cb failed for ('127.0.0.1', 7); the server goes on:")
    assert "Traceback" in line and "ValueError: the handler has a bug" in line
    assert caplog.records[0].exc_info is None  # the text, not the error (it would hold frames)
    assert server.statistics.handler_failures == 1


def test_the_default_policy_is_fitted_to_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import gcmstream._server

    monkeypatch.setattr(gcmstream._server, "descriptor_soft_limit", lambda: 1024)
    fitted = server_admission(DEFAULT_ADMISSION)
    assert (fitted.start, fitted.full, fitted.verified, fitted.per_source) == (128, 256, 512, 32)
    assert ServerCore(Configuration(key=KEY), [].append).admission.policy == fitted
    chosen = AdmissionPolicy.from_max_pending_handshakes(8)
    assert server_admission(chosen) is chosen


def test_a_chosen_policy_beyond_the_descriptor_limit_is_kept_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The application's own policy is not shrunk, but one whose pending sockets pass the
    budget is said once, with its figures (a mutation run found the warning untested)."""
    import gcmstream._server

    caplog.set_level(logging.WARNING, logger="gcmstream")
    monkeypatch.setattr(gcmstream._server, "descriptor_soft_limit", lambda: 1024)
    chosen = AdmissionPolicy(start=100, full=600, verified=300)
    assert server_admission(chosen) is chosen
    assert caplog.messages == [
        "the admission policy keeps up to 900 pending handshakes, more than half of the "
        "descriptor limit (1024): a flood can make accept() fail with EMFILE"
    ]
    caplog.clear()
    small = AdmissionPolicy(start=100, full=300, verified=400)  # 700: within 1024 - 256
    assert server_admission(small) is small and caplog.messages == []


def test_the_descriptor_limit_is_the_soft_rlimit_nofile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soft limit, not the hard one (here both are often equal: a fake getrlimit tells them
    apart); None when it is unlimited."""
    resource = pytest.importorskip("resource")
    limits = {resource.RLIMIT_NOFILE: (1000, 4096)}
    monkeypatch.setattr(resource, "getrlimit", limits.__getitem__)
    assert descriptor_soft_limit() == 1000
    limits[resource.RLIMIT_NOFILE] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert descriptor_soft_limit() is None


def test_a_peer_that_hung_up_before_sending_counts_as_a_keyless_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Closed on arrival, never admitted: counted in the statistics and in the report as any
    stranger's failure (its own line first, then at debug level, counted by reason)."""
    caplog.set_level(logging.WARNING, logger="gcmstream")
    now = [0.0]
    server = core(DEFAULT_ADMISSION, [], clock=now)
    assert server.ended_before_sending(HUNG_UP) == logging.WARNING
    assert server.ended_before_sending(HUNG_UP) == logging.DEBUG
    assert server.statistics.handshakes_failed == 2 and server.statistics.admitted == 0
    now[0] = REPORT_INTERVAL
    server.failures.report_due()
    assert caplog.messages == [
        "handshakes failed without proving the key since the last warning (10 s): 1 (1 hung up or cut during "
        "the handshake); each is logged at debug level"
    ]


def test_connection_statistics_name_what_each_side_did() -> None:
    from gcmstream import Channel, Role

    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    figures = connection_statistics(initiator.sealer, None)
    assert figures["records_sealed"] == 0 and "records_opened" not in figures
    responder.opener.receive_data(initiator.initial_data())
    figures = connection_statistics(responder.sealer, responder.opener)
    assert figures["peer_key_id"] == responder.opener.header.key_id  # type: ignore[union-attr]
    assert figures["peer_id"] is None


def test_connection_statistics_are_every_figure_by_name_before_and_after_a_record() -> None:
    """The whole dict: before any header (no key proved yet), after one record, and for a Tink
    stream, which names no key (a mutation run found the opened figures and the None branches
    untested)."""
    from gcmstream import Opener, Sealer, key_id
    from gcmstream.tinkstream import TinkOpener, TinkSealer, TinkStreamingKey

    sealer, opener = Sealer(KEY), Opener(KEY)
    before = {"suite": "AES_128_GCM", "record_size": 65536, "records_sealed": 0, "bytes_sealed": 0}
    unproved = {"records_opened": 0, "bytes_opened": 0, "peer_key_id": None, "peer_id": None}
    assert connection_statistics(sealer, opener) == before | unproved
    opener.receive_data(bytes(sealer.seal(b"hello", flush=True)))
    assert opener.read() == b"hello"
    assert connection_statistics(sealer, opener) == {
        **before,
        "records_sealed": 1,
        "bytes_sealed": 5,
        "records_opened": 1,
        "bytes_opened": 5,
        "peer_key_id": key_id(KEY),
        "peer_id": None,
    }
    tink = TinkStreamingKey(bytes(16), key_id=7)
    tink_sealer, tink_opener = TinkSealer(tink), TinkOpener(tink)
    tink_opener.receive_data(bytes(tink_sealer.seal(b"hello")) + bytes(tink_sealer.close()))
    tink_opener.receive_eof()
    assert tink_opener.read() == b"hello" and tink_opener.header is not None
    figures = connection_statistics(tink_sealer, tink_opener)  # a keyset's ID is not a key ID
    assert (figures["peer_key_id"], figures["peer_id"], figures["records_opened"]) == (None, None, 1)


def test_a_failed_handler_is_one_line_with_its_whole_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gcmstream")
    try:
        raise ValueError("the handler has a bug")
    except ValueError as exc:
        log_handler_failure(exc, "peer A")
    [line] = caplog.messages
    assert line.startswith(
        "handler failed for peer A; the server goes on: Traceback (most recent call last):\n  File "
    )
    assert line.endswith("\nValueError: the handler has a bug"), line[-60:]


def test_a_final_report_says_the_count_whatever_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    """A server that ends (``gcmstream listen`` once it has its peer) says the failures it
    counted since its last line, though the interval has not passed: else they would never be
    said (a new user's finding: three bad peers, one line, then nothing)."""
    caplog.set_level(logging.DEBUG, logger="gcmstream")
    now = [0.0]
    report = FailureReport(clock=lambda: now[0])
    assert report.failed(TimeoutError(), proved_key=False) == logging.WARNING  # its own line
    for _ in range(2):
        assert report.failed(TimeoutError(), proved_key=False) == logging.DEBUG
    now[0] += 1
    report.report_due()  # within the interval: nothing
    assert caplog.messages == []
    report.report_due(final=True)
    assert caplog.messages == [
        "handshakes failed without proving the key since the last warning (1.0 s): 2 (2 too slow (handshake "
        "timeout)); each is logged at debug level"
    ]
    report.report_due(final=True)  # nothing counted since: nothing more
    assert len(caplog.messages) == 1


def test_a_reason_outside_the_table_is_its_class_name_in_lower_case_words() -> None:
    """``_server.reason_words``: a class the table does not hold (nor any class of its MRO)
    reads as its name in lower-case words (mutation run of 2026-12-05, mop5)."""
    import gcmstream._server

    class SomeOddFailure(Exception):
        pass

    assert gcmstream._server.reason_words(ValueError) == "value error"
    assert gcmstream._server.reason_words(SomeOddFailure) == "some odd failure"
