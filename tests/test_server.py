"""The server core alone (src/gcmstream/_server.py), sans-IO, with a fake clock: deadlines fire
exactly once, move on progress and stop while reading is paused; admission decisions; handler
isolation's log line; statistics. Every server path runs on this core: tests/hostile/
(test_deadlines.py, test_handlers.py, test_admission_flood.py) drive them over real sockets."""

from __future__ import annotations

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


def test_a_record_deadline_starts_with_the_record_and_a_trickle_does_not_move_it() -> None:
    deadlines = ConnectionDeadlines(record_timeout=2.0)
    deadlines.handshake_complete(0.0)
    deadlines.received(1.0, receiving_record=True)  # a record began
    for now in (1.5, 2.0, 2.5):  # a byte at a time: the same record, the same deadline
        deadlines.received(now, receiving_record=True)
        assert deadlines.read_timer() == 3.0
    assert deadlines.handle_timer(2.99) is None
    assert deadlines.handle_timer(3.0) is Deadline.RECORD
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
    assert deadlines.read_timer() == 2.0
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
        "handshakes failed without proving the key in the last 10 s: 301 (201 hung up or cut during "
        "the handshake, 100 too slow (handshake timeout)); each is logged at debug level"
    ]
    assert server.handshake_failed("next", HUNG_UP) == logging.DEBUG  # the count was this interval's line
    now[0] += REPORT_INTERVAL
    assert fail("after", HUNG_UP) == logging.DEBUG  # its arrival said the count of one: debug
    assert len(caplog.messages) == 2
    assert caplog.messages[1].startswith("handshakes failed without proving the key in the last 10 s: 1 (")
    now[0] += REPORT_INTERVAL
    server.admit("served", ("10.0.0.3", 1))  # an arrival after the flood says its last count
    assert len(caplog.messages) == 3
    now[0] += REPORT_INTERVAL
    assert fail("quiet again", HUNG_UP) == logging.WARNING  # a quiet interval: its own line again
    assert len(caplog.messages) == 3
    assert server.statistics.handshakes_failed == 305


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


def test_connection_statistics_name_what_each_side_did() -> None:
    from gcmstream import Channel, Role

    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    figures = connection_statistics(initiator.sealer, None)
    assert figures["records_sealed"] == 0 and "records_opened" not in figures
    responder.opener.receive_data(initiator.initial_data())
    figures = connection_statistics(responder.sealer, responder.opener)
    assert figures["peer_key_id"] == responder.opener.header.key_id  # type: ignore[union-attr]
    assert figures["peer_id"] is None


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
        "handshakes failed without proving the key in the last 1 s: 2 (2 too slow (handshake "
        "timeout)); each is logged at debug level"
    ]
    report.report_due(final=True)  # nothing counted since: nothing more
    assert len(caplog.messages) == 1
