"""Findings of the hostile review of the admission policy (docs/review-2026-12-04-admission.md).

Each test states what issue 24 item 3 (or admission.py's own docstring) promises and fails on
the branch as reviewed: they are marked ``xfail(strict=True)`` so that the branch stays green
and a fix shows up as an XPASS (then drop the mark). Real sockets on 127.0.0.1; the floods run
the attacker and the server in their own processes, as tests/hostile/test_admission_flood.py
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import gcmstream
import gcmstream._server
from gcmstream import AdmissionPolicy, Role
from gcmstream.admission import DEFAULT_ADMISSION, Admission
from gcmstream.anyio_stream import SecureStream, connect_tcp, create_tcp_listener
from gcmstream.format import HEADER_FIXED_SIZE
from gcmstream.keyfile import write_key_file

from ..helpers import KEY, SERVER_PATHS, closing_server
from .flood import MANY_SOURCES, ROOT, keyless_flood, raise_fd_limit, server_process
from .test_admission_flood import (
    LEGIT,
    LISTEN_RUNS,
    LISTEN_SERVED,
    SERVED,
    attacker_counts,
    free_port,
    legit_clients,
    listen_once,
    one_listen_peer,
    recorded_header,
    report,
    wait_listening,
)

HOST = "127.0.0.1"

# The floods that measure the review's figures (10-20 s of two processes' CPU each) run only on
# request: `GCMSTREAM_REVIEW_FLOODS=1 pytest -s tests/hostile/test_admission_review.py`. What
# they found is guarded in every run by the deterministic tests here and in
# tests/test_admission.py (docs/review-2026-12-04-admission.md, "Status after fixes").
review_flood = pytest.mark.skipif(
    not os.environ.get("GCMSTREAM_REVIEW_FLOODS"), reason="a review flood: GCMSTREAM_REVIEW_FLOODS=1 runs it"
)

# -- finding 1: a header that arrived (and verified) is evicted by a connection that sent nothing


@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_a_client_whose_first_flight_arrived_is_not_evicted_by_a_silent_newcomer(
    path: str, backend: str, options: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every server path (the one server core's admission; ``gcmstream listen`` runs the
    listener's loop with the default policy)."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    victims_with_a_verified_header: list[bool] = []
    spies: list[Admission[Any]] = []

    class Spy(Admission[Any]):  # records, for each eviction, whether the victim's header verified
        def __init__(self, policy: AdmissionPolicy, drop: Callable[[Any], object], **kwargs: Any) -> None:
            spies.append(self)
            openers: dict[Any, Any] = {}  # what each connection's opener has taken, as it was read

            def spying(connection: Any) -> object:
                opener = openers.get(connection)
                victims_with_a_verified_header.append(opener is not None and opener.header is not None)
                return drop(connection)

            super().__init__(policy, spying, **kwargs)
            self.openers = openers

        def observe(self, connection: Any, opener: Any) -> None:
            self.openers[connection] = opener
            super().observe(connection, opener)

    monkeypatch.setattr(gcmstream._server, "Admission", Spy)  # the one every server path makes
    # one slot for a connection that has not verified: the smallest case of the flood's
    # steady state (tests/hostile/test_admission_flood.py, replaying, asyncio)
    policy = AdmissionPolicy(start=1, full=1, verified=4, per_source=None)

    async def asyncio_handler(
        reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
    ) -> None:
        writer.close()

    async def anyio_handler(stream: SecureStream) -> None:
        await stream.aclose()

    async def scenario() -> bytes:
        async with contextlib.AsyncExitStack() as stack:
            if path == "start_server":
                server = await gcmstream.start_server(asyncio_handler, HOST, 0, key=KEY, admission=policy)
                await stack.enter_async_context(server)
                port = server.sockets[0].getsockname()[1]
            else:
                listener = await create_tcp_listener(key=KEY, local_host=HOST, admission=policy)
                await stack.enter_async_context(listener)
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(listener.serve, anyio_handler)
                port = listener.extra(anyio.abc.SocketAttribute.local_port)
            genuine = stack.enter_context(socket.create_connection((HOST, port)))
            genuine.settimeout(2.0)
            await anyio.sleep(0.05)  # accepted: it is waiting
            # its whole first flight, then (before the server's loop runs again) a newcomer
            # that will never send anything
            genuine.sendall(gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data())
            stack.enter_context(socket.create_connection((HOST, port)))
            await anyio.sleep(0.3)
            try:
                return genuine.recv(65536)
            except OSError:
                return b""

    answer = anyio.run(scenario, backend=backend, backend_options=options)
    assert len(spies) == 1  # the server's admission was the spy
    assert True not in victims_with_a_verified_header  # 10 of 10 runs before: one such victim
    assert answer, "the server dropped a client whose header it had verified, for a silent one"


# -- finding 1 at scale: an attacker that leaves once answered, and comes back -------------------

ANSWERED_ATTACK = r"""
import contextlib, errno, selectors, signal, socket, sys, time
from tests.hostile.flood import raise_fd_limit
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[4])
payload, leave, sources = bytes.fromhex(sys.argv[3]), sys.argv[5], sys.argv[6:]
raise_fd_limit(count + 256)
selector = selectors.DefaultSelector()
stats = {"connects": 0, "answered": 0, "dropped": 0}
connected = set()
def open_one(slot):
    sock = socket.socket()
    sock.setblocking(False)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT
    sock.bind((sources[slot % len(sources)], 0))
    sock.connect_ex(("127.0.0.1", port))
    stats["connects"] += 1
    selector.register(sock, selectors.EVENT_WRITE, slot)
def reopen(sock, slot):
    selector.unregister(sock)
    connected.discard(sock)
    sock.close()
    open_one(slot)
for slot in range(count):
    open_one(slot)
stopped = []
signal.signal(signal.SIGTERM, lambda *args: stopped.append(1))
print("READY", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline and not stopped:
    for key, _ in selector.select(0.05):
        sock, slot = key.fileobj, key.data
        if sock not in connected:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                reopen(sock, slot)
                continue
            connected.add(sock)
            with contextlib.suppress(OSError):
                sock.send(payload)
            if leave == "at-once":  # a stranger that connects and hangs up, again and again
                stats["dropped"] += 1
                reopen(sock, slot)
                continue
            selector.modify(sock, selectors.EVENT_READ, slot)
            continue
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        stats["answered" if data else "dropped"] += 1
        reopen(sock, slot)  # answered (the server paid for a responder half) or dropped: again
print(stats, flush=True)
"""


@contextlib.contextmanager
def answered_flood(
    port: int,
    count: int,
    sources: Sequence[str],
    *,
    payload: bytes | None = None,
    leave: str = "answered",
    seconds: float = 60,
) -> Iterator[Any]:
    """1 process, ``count`` connections sending ``payload`` (default: a recorded header); each
    leaves as soon as the server answers or drops it (``leave="answered"``), or right after
    sending (``"at-once"``), and comes back at once."""
    payload = recorded_header() if payload is None else payload
    argv = [str(port), str(count), payload.hex(), str(seconds), leave, *sources]
    process = subprocess.Popen(
        [sys.executable, "-c", ANSWERED_ATTACK, *argv], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "READY\n"
        yield process
    finally:
        process.terminate()
        process.wait(10)


@review_flood
@pytest.mark.slow  # about 10 s
@pytest.mark.timeout(120)
@pytest.mark.xfail(
    strict=False,  # load-dependent: 40, 48, 42 of 50 after the fixes, 46 on main (status section)
    reason="review finding 1 (remains in part): 1,000 replaying connections that leave once "
    "answered kept asyncio's start_server to 0-15 of 50, 40-48 after the fixes (issue 24.3 asks >= 45): "
    "each replay costs a responder half, which the admission does not bound per source",
)
def test_a_replay_flood_that_leaves_once_answered_keeps_at_most_5_of_50_out(tmp_path: Path) -> None:
    raise_fd_limit(4096)
    with (
        server_process("asyncio", tmp_path / "server.log") as port,
        answered_flood(port, 1000, MANY_SOURCES) as attacker,
    ):
        time.sleep(1.0)
        times = asyncio.run(legit_clients(port, LEGIT))
        counts = attacker_counts(attacker)
    served = report("asyncio, replay and leave once answered, 250 sources, 1000 attackers", times, counts, 0)
    assert served >= SERVED


# -- finding 3: a silent flood that hangs up at once ---------------------------------------------


def _served_under_hang_ups(backend: str, tmp_path: Path, what: str, **flood: Any) -> int:
    """Legitimate clients served by ``backend``'s server while 1,000 connections from 250
    addresses connect, send ``flood``'s payload (a recorded header by default) and hang up at once."""
    raise_fd_limit(4096)
    with (
        server_process(backend, tmp_path / "server.log") as port,
        answered_flood(port, 1000, MANY_SOURCES, leave="at-once", **flood) as attacker,
    ):
        time.sleep(1.0)
        times = asyncio.run(legit_clients(port, LEGIT))
        counts = attacker_counts(attacker)
    return report(f"{backend}, {what}, 250 sources, 1000 attackers", times, counts, 0)


@review_flood
@pytest.mark.slow  # about 10 s each
@pytest.mark.timeout(120)
@pytest.mark.xfail(
    strict=False,  # load-dependent: 50 of 50 at a load average of 3-4, on main's code too
    reason="review finding 3 (remains, load-dependent): 1,000 keyless connections that connect "
    "and hang up at once (silent) keep the anyio listener to 0 of 50 on asyncio and trio: each "
    "costs an accept and a WARNING line, the accept queue holds the legitimate client behind "
    "thousands of them",
)
@pytest.mark.parametrize("backend", ["anyio-asyncio", "anyio-trio"])
def test_a_connect_and_hang_up_flood_keeps_at_most_5_of_50_out(backend: str, tmp_path: Path) -> None:
    assert _served_under_hang_ups(backend, tmp_path, "silent, connect and hang up", payload=b"") >= SERVED


# -- stop 33: replay a recorded header, then hang up at once ----------------------------------------


@review_flood
@pytest.mark.slow  # about 10 s each
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "anyio-asyncio", "anyio-trio"])
def test_a_replay_and_hang_up_flood_keeps_at_most_5_of_50_out(backend: str, tmp_path: Path) -> None:
    """1,000 connections from 250 addresses, each sending a recorded header and closing at once:
    such a peer can never send its Finished, and no server computes an answer for it
    (``_adapter.answer_only_a_connected_peer``). Before, each cost a responder half: branch
    ``adm2``'s author measured main's anyio listener at 0-30 of 50 on asyncio, 0-19 on trio."""
    if backend == "uvloop":
        pytest.importorskip("uvloop")
    assert _served_under_hang_ups(backend, tmp_path, "replay and hang up") >= SERVED


@review_flood
@pytest.mark.slow  # about 30 s
@pytest.mark.timeout(180)
def test_listen_under_a_replay_and_hang_up_flood_takes_its_peer(tmp_path: Path) -> None:
    """The same flood against `gcmstream listen`, LISTEN_RUNS processes in turn on one port (as
    the flood test runs them): each run's one peer must get through within WITHIN."""
    raise_fd_limit(4096)
    keyfile = tmp_path / "key"
    write_key_file(keyfile, KEY)
    port = free_port()
    with answered_flood(port, 1000, MANY_SOURCES, leave="at-once"):
        results = [listen_once(port, keyfile)[0] for _ in range(LISTEN_RUNS)]  # bounded
    print(f"\nlisten, replay and hang up, 250 sources: {sum(results)}/{LISTEN_RUNS} runs took their peer")
    assert sum(results) >= LISTEN_SERVED


# -- finding 2: the default budget exceeds the usual descriptor limit ----------------------------

SERVE_AT_1024 = (
    "import resource, sys; from tests.hostile import flood; "
    "flood.raise_fd_limit = lambda wanted: None; "
    "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)); "
    "flood.serve(sys.argv[1])"
)


@review_flood
@pytest.mark.slow  # about 10 s each
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "asyncio",
            marks=pytest.mark.xfail(
                strict=False,  # 38, 41 and 44 of 50 after the fixes (no EMFILE): load-dependent
                reason="review finding 1 at the fitted budget (256 waiting, 512 verified): 1,200 "
                "replays held keep the verified class churning faster than asyncio answers",
            ),
        ),
        "anyio-asyncio",
        "anyio-trio",
    ],
)
def test_a_replay_flood_at_the_usual_descriptor_limit_keeps_the_server_serving(
    backend: str, tmp_path: Path
) -> None:
    raise_fd_limit(4096)
    log = tmp_path / "server.log"
    with open(log, "wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVE_AT_1024, backend],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with keyless_flood(port, count=1200, payload=recorded_header(), sources=MANY_SOURCES) as attacker:
            time.sleep(1.0)
            times = asyncio.run(legit_clients(port, LEGIT))
            counts = attacker_counts(attacker)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    served = report(f"{backend} at RLIMIT_NOFILE 1024, replay, 1200 attackers", times, counts, 0)
    assert "Too many open files" not in log.read_text(errors="replace")
    assert served >= SERVED


@review_flood
@pytest.mark.slow  # about 10 s
@pytest.mark.timeout(120)
def test_listen_at_the_usual_descriptor_limit_survives_a_replay_flood(tmp_path: Path) -> None:
    raise_fd_limit(4096)
    keyfile = tmp_path / "key"
    write_key_file(keyfile, KEY)
    port = free_port()

    def at_1024() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    with keyless_flood(port, count=1200, payload=recorded_header(), sources=MANY_SOURCES):
        process = subprocess.Popen(
            [sys.executable, "-m", "gcmstream", "listen", f"{HOST}:{port}", "-k", str(keyfile)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=at_1024,  # (a fork-safe setrlimit: no thread runs in this test)
        )
        try:
            wait_listening(process)
            time.sleep(1.0)  # the flood reaches the listener
            took = asyncio.run(one_listen_peer(port))
            out, err = process.communicate(timeout=10)
        finally:
            process.kill()
            process.wait()
    assert b"Too many open files" not in err, err[-500:]
    assert took is not None and out == b"ping" and process.returncode == 0


# The same finding, cheap and deterministic (the regression guards that run in `make test`): a
# descriptor limit so low that 150 silent connections exhaust it, then they leave and a genuine
# client must be served. Before the fix the anyio listener's serve() ended at the first EMFILE
# (trio: BrokenResourceError from it; asyncio: the OSError) and `listen` exited 6.

LOW_LIMIT_LISTENER = r"""
import logging, resource, sys
import anyio
from anyio.abc import SocketAttribute
import gcmstream
from gcmstream import AdmissionPolicy
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

async def echo(stream):
    async with stream:
        await stream.send(await stream.receive())

async def main():
    # a policy larger than the limit, given explicitly: kept (with a warning), so EMFILE comes
    big = AdmissionPolicy(start=500, full=500, verified=500, per_source=None)
    listener = await gcmstream.create_tcp_listener(
        key=bytes(range(16)), local_host="127.0.0.1", admission=big
    )
    print(listener.extra(SocketAttribute.local_port), flush=True)
    await listener.serve(echo)

anyio.run(main, backend=sys.argv[1])
"""


def _silent_crowd(port: int, count: int) -> list[socket.socket]:
    crowd = []
    for _ in range(count):  # bounded
        sock = socket.socket()
        sock.settimeout(2.0)
        sock.connect((HOST, port))
        crowd.append(sock)
    return crowd


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_anyio_listener_serves_again_after_running_out_of_descriptors(backend: str) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", LOW_LIMIT_LISTENER, backend],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        crowd = _silent_crowd(port, 150)  # more than the 64 descriptors the server may open
        time.sleep(0.5)  # it accepts until EMFILE
        for sock in crowd:
            sock.close()
        took = asyncio.run(asyncio.wait_for(_echo_once(port), 10))
        assert server.poll() is None, "the listener ended"
    finally:
        server.kill()
        _, err = server.communicate(timeout=10)
    assert b"accept() failed" in err, err[-1000:]  # it did run out, and said so once
    assert err.count(b"accept() failed") == 1
    assert took is not None


async def _echo_once(port: int) -> float | None:
    start = time.monotonic()
    stream = await gcmstream.anyio_stream.connect_tcp("127.0.0.1", port, key=KEY)
    async with stream:
        await stream.send(b"ping")
        if await stream.receive() != b"ping":
            return None
    return time.monotonic() - start


@pytest.mark.timeout(60)
def test_listen_takes_its_peer_after_running_out_of_descriptors(tmp_path: Path) -> None:
    keyfile = tmp_path / "key"
    write_key_file(keyfile, KEY)
    port = free_port()

    def at_48() -> None:  # below 128 the policy is not fitted: 150 silent peers exhaust it
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "listen", f"{HOST}:{port}", "-k", str(keyfile)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=at_48,  # (a fork-safe setrlimit: no thread runs in this test)
    )
    try:
        wait_listening(process)
        crowd = _silent_crowd(port, 150)
        time.sleep(0.5)
        for sock in crowd:
            sock.close()
        took = asyncio.run(one_listen_peer(port))
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
        process.wait()
    assert b"accept() failed" in err, err[-1000:]
    assert took is not None and out == b"ping" and process.returncode == 0, err[-1000:]


# -- finding 4: one warning per keyless connection ----------------------------------------------


@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_a_keyless_connect_and_close_flood_is_not_logged_line_by_line(
    path: str, backend: str, options: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """Every server path logs a stranger's failed handshake at debug level once one was said
    in the last REPORT_INTERVAL, and counts the rest in one warning per interval
    (``_server.FailureReport``); before, 100 strangers that hang up were 100 warnings."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")

    async def scenario() -> None:
        async with contextlib.AsyncExitStack() as stack:
            port, start = await closing_server(stack, path)
            await start()
            for _ in range(100):  # bounded: 100 strangers that connect and hang up
                with socket.create_connection((HOST, port)):
                    pass
                await anyio.sleep(0.002)  # one at a time: none is shed, each fails on its own
            await anyio.sleep(0.5)

    with caplog.at_level(logging.DEBUG, logger="gcmstream"):
        anyio.run(scenario, backend=backend, backend_options=options)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    failures = [r for r in caplog.records if r.getMessage().startswith("handshake with ")]
    assert len(failures) == 100  # every connection has its line ...
    # ... at warning level one, the first (the run lasts less than REPORT_INTERVAL), and the
    # anyio listener's count of the other 99 as it ends (FailureReport.report_due(final=True))
    assert len(warnings) <= 2, f"{len(warnings)} warnings for 100 keyless connections"
    assert all(r.getMessage().startswith("handshakes failed without proving") for r in warnings[1:])


# -- stop 33: a peer whose input ended after its header is not answered --------------------------

REPLAYS_HUNG_UP = 10


def _replay_and_hang_up(port: int, count: int = REPLAYS_HUNG_UP) -> list[socket.socket]:
    """``count`` connections that each send a recorded header and end their output (a FIN; each
    can still read, so an answer would reach it): the connections, to be read and closed."""
    header = recorded_header()
    peers = []
    for _ in range(count):  # bounded
        sock = socket.create_connection((HOST, port))
        sock.sendall(header)
        sock.shutdown(socket.SHUT_WR)
        peers.append(sock)
    return peers


def _answer_counter() -> tuple[list[object], Callable[..., Any]]:
    """A stand-in for what the channel calls for its answer (``respond``, the responder half):
    it notes each answer computed, then computes it."""
    import gcmstream.handshake

    answered: list[object] = []
    respond = gcmstream.handshake.respond

    def counting(*args: Any) -> Any:
        answered.append(args)
        return respond(*args)

    return answered, counting


def _answers_read(peers: list[socket.socket]) -> list[int]:
    """Bytes each peer received before the server closed it (at most 2 s each; closes them)."""
    got = []
    for sock in peers:
        total = 0
        sock.settimeout(2.0)
        with sock:
            for _ in range(100):  # bounded: an answer is a few KiB
                try:
                    data = sock.recv(65536)
                except OSError:  # reset by the server's abort
                    break
                if not data:
                    break
                total += len(data)
        got.append(total)
    return got


@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_a_replayed_header_whose_sender_hung_up_is_not_answered(
    path: str, backend: str, options: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded header replayed and followed by a FIN can never be followed by its Finished
    (which needs the answer): no server path computes the responder half for it
    (``_adapter.answer_only_a_connected_peer``), and a genuine client after them is answered.
    The ten connect, send and end their output before the server accepts them, so their FIN
    is in when the header is read; on main each got its answer (1,254 bytes) computed and sent."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    import gcmstream.channel
    import gcmstream.handshake

    answered, counting = _answer_counter()

    async def asyncio_echo(
        reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
    ) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    async def anyio_echo(stream: SecureStream) -> None:
        async with stream:
            await stream.send(await stream.receive())

    async def scenario() -> tuple[list[int], bytes]:
        async with contextlib.AsyncExitStack() as stack:
            if path == "start_server":
                listening = socket.socket()  # listening before the server serves it: the queue fills
                listening.bind((HOST, 0))
                listening.listen(100)
                port = listening.getsockname()[1]
                peers = _replay_and_hang_up(port)
                await anyio.sleep(0.1)
                monkeypatch.setattr(gcmstream.channel, "respond", counting)
                server = await gcmstream.start_server(asyncio_echo, sock=listening, key=KEY)
                await stack.enter_async_context(server)
            else:
                listener = await create_tcp_listener(key=KEY, local_host=HOST)
                await stack.enter_async_context(listener)
                port = listener.extra(anyio.abc.SocketAttribute.local_port)
                peers = _replay_and_hang_up(port)
                await anyio.sleep(0.1)
                monkeypatch.setattr(gcmstream.channel, "respond", counting)
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(listener.serve, anyio_echo)
            await anyio.sleep(0.5)
            got = await anyio.to_thread.run_sync(_answers_read, peers)
            assert answered == []  # (before the genuine client)
            with anyio.fail_after(10):
                if path == "start_server":
                    reader, writer = await gcmstream.open_connection(HOST, port, key=KEY)
                    writer.write(b"genuine")
                    echoed = await reader.read(100)
                    writer.close()
                else:
                    async with await connect_tcp(HOST, port, key=KEY) as client:
                        await client.send(b"genuine")
                        echoed = await client.receive()
            return got, echoed

    got, echoed = anyio.run(scenario, backend=backend, backend_options=options)
    assert got == [0] * REPLAYS_HUNG_UP  # no answer bytes reached any of them
    assert echoed == b"genuine"
    assert len(answered) == 1  # the genuine client's only


def test_listen_does_not_answer_a_replayed_header_whose_sender_hung_up(tmp_path: Path) -> None:
    """The same on `gcmstream listen` (its own process: the ten queue while it is stopped, so
    their FIN is in when it reads their headers): none receives an answer, and the real peer
    after them is taken. On main each of the ten received the 1,254-byte answer."""
    keyfile = tmp_path / "key"
    write_key_file(keyfile, KEY)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "listen", f"{HOST}:{port}", "-k", str(keyfile)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(process)
        process.send_signal(signal.SIGSTOP)
        try:
            peers = _replay_and_hang_up(port)
            time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGCONT)
        got = _answers_read(peers)
        took = asyncio.run(one_listen_peer(port))
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
        process.wait()
    assert got == [0] * REPLAYS_HUNG_UP, err[-1000:]
    assert took is not None and out == b"ping" and process.returncode == 0, err[-1000:]


# -- finding 6: one address holds `start` slots, not `per_source` -------------------------------


def test_an_attacker_with_one_address_holds_start_slots_alone_and_per_source_once_others_come() -> None:
    """Review finding 6, decided (admission.py, SECURITY.md): the cap binds only under
    pressure, as a burst from one host (a proxy, a NAT, a load test from 127.0.0.1) must be
    served by an idle server; OpenSSH's PerSourceMaxStartups is off by default for the same
    reason. What one address gets under the default policy, as an attacker reconnecting
    without end: ``start`` slots while it is alone, and at most ``per_source`` once others
    arrive (random early drop evicts its oldest; the cap refuses its reconnections). The
    review's strict xfail asked for ``per_source`` at all times; the sans-IO pin of the exact
    boundary is tests/test_admission.py::test_one_address_alone_holds_start_slots_then_per_source."""
    policy = DEFAULT_ADMISSION
    assert policy.per_source is not None
    dropped: list[object] = []
    pending: Admission[object] = Admission(policy, dropped.append, random=random.Random(7).random)
    attacker = ("198.51.100.7", 40000)
    for connection in range(1000):  # bounded: the 1,000 connections, none finishing
        pending.admit(("attacker", connection), attacker)
    assert pending.pending_from(attacker) == policy.start  # alone: start slots, the rest refused
    for n in range(2000):  # bounded: others arrive, one address each, the attacker keeps trying
        pending.admit(("other", n), (f"10.0.{n // 250}.{n % 250}", 1))
        pending.admit(("attacker", 1000 + n), attacker)
        assert len(pending) <= policy.full  # (none of them verifies: all are waiting)
    assert pending.pending_from(attacker) <= policy.per_source
    assert ("attacker", 0) in dropped  # its oldest went first


# -- finding 7: a handshake that completed is aborted, and its handler runs on the dead transport


def _answer(sock: socket.socket, channel: gcmstream.Channel) -> bytes:
    """Read the responder's answer into ``channel`` (an initiator) until it has its Finished to
    send (blocking, bounded by the socket's timeout)."""
    sock.settimeout(2.0)
    for _ in range(100):  # bounded: the answer is a few KiB
        data = sock.recv(65536)
        if not data:
            raise EOFError("the server hung up before answering")
        channel.opener.receive_data(data)
        if finished := channel.data_to_send():
            return finished
    raise AssertionError("no Finished to send after 100 reads")


@pytest.mark.asyncio
async def test_a_completed_handshake_is_never_aborted_by_the_admission() -> None:
    transports_closing_at_the_handler: list[bool] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        transports_closing_at_the_handler.append(writer.transport.is_closing())
        writer.close()

    # one verified slot: the smallest case of a replay flood that keeps `verified` full
    policy = AdmissionPolicy(start=4, full=4, verified=1, per_source=None)
    server = await gcmstream.start_server(handler, HOST, 0, key=KEY, admission=policy)
    port = server.sockets[0].getsockname()[1]
    genuine = socket.create_connection((HOST, port))
    replayer = socket.create_connection((HOST, port))
    try:
        await asyncio.sleep(0.05)
        client = gcmstream.Channel(KEY, role=Role.INITIATOR)
        genuine.sendall(client.initial_data())
        finished = await asyncio.get_running_loop().run_in_executor(None, _answer, genuine, client)
        replay = gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data()
        replayer.sendall(replay[:HEADER_FIXED_SIZE])
        await asyncio.sleep(0.1)
        # the replay's header completes in the same loop pass as the genuine client's Finished
        replayer.sendall(replay[HEADER_FIXED_SIZE:])
        genuine.sendall(finished)
        await asyncio.sleep(0.3)
    finally:
        genuine.close()
        replayer.close()
        server.close()
        await server.wait_closed()
    # 10 of 10 runs: [True] (with verified=4, no eviction: [False] 10 of 10)
    assert transports_closing_at_the_handler == [False]


# -- stop 33's review: a first flight already in the kernel when the server admits its connection


@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS[:2])
def test_a_connection_whose_first_flight_is_in_the_kernel_is_admitted_as_having_received_it(
    path: str, backend: str, options: dict[str, object]
) -> None:
    """start_server admits a connection before it reads it (asyncio reads it a loop pass
    later), so the admission asks the kernel (``_adapter.admit``): a client whose header
    arrived while it queued is not "silent", and silent newcomers evict one another, not it.
    Three connections queue before the server serves: a genuine header, then two that send
    nothing; one waiting slot beyond ``start``: the third evicts the oldest silent one. On main, on
    asyncio, the header's connection was admitted as silent and evicted (it read no answer); the
    review's slow-header flood kept asyncio's server to 0 of 50 clients so (the trickle cells of
    tests/hostile/test_admission_flood.py). uvloop reads it first and passed on main too."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    policy = AdmissionPolicy(start=2, full=2, verified=4, per_source=None)

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        writer.close()

    async def scenario() -> bytes:
        with contextlib.ExitStack() as sockets:
            listening = socket.socket()  # listening before the server serves it: the queue fills
            listening.bind((HOST, 0))
            listening.listen(100)
            port = listening.getsockname()[1]
            genuine = sockets.enter_context(socket.create_connection((HOST, port)))
            genuine.sendall(gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data())
            for _ in range(2):  # bounded: two that send nothing
                sockets.enter_context(socket.create_connection((HOST, port)))
            await anyio.sleep(0.1)  # (every byte is in the kernel's queue)
            server = await gcmstream.start_server(handler, sock=listening, key=KEY, admission=policy)
            async with server:
                await anyio.sleep(0.5)
                genuine.setblocking(False)
                try:
                    return genuine.recv(65536)
                except OSError:  # reset by the eviction's abort, or nothing (BlockingIOError)
                    return b""

    answer = anyio.run(scenario, backend=backend, backend_options=options)
    assert answer, "a client whose header was in the kernel was evicted as silent"


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_wrap_streams_as_responder_does_not_answer_a_replayed_header_whose_sender_hung_up(
    use_uvloop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aio.wrap_streams(role=RESPONDER)`` over asyncio's own server's streams asks the same
    rule as every server path (``_adapter.answer_only_a_connected_peer``, on the writer's
    socket): ten replays, each hung up on before the server read it, get no answer computed or
    sent, and a genuine client after them is answered. On main each of the ten was answered
    (the review: 10 of 10)."""
    if use_uvloop:
        pytest.importorskip("uvloop")
    import gcmstream.aio
    import gcmstream.channel
    import gcmstream.handshake

    answered, counting = _answer_counter()

    async def responder(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            secure_reader, secure_writer = await gcmstream.aio.wrap_streams(
                reader, writer, role=Role.RESPONDER, key=KEY, handshake_timeout=2
            )
        except gcmstream.GcmStreamError:
            writer.close()
            return
        secure_writer.write(await secure_reader.read(100))
        await secure_writer.drain()
        secure_writer.close()

    async def scenario() -> tuple[list[int], bytes]:
        listening = socket.socket()  # listening before the server serves it: the queue fills
        listening.bind((HOST, 0))
        listening.listen(100)
        port = listening.getsockname()[1]
        peers = _replay_and_hang_up(port)
        await asyncio.sleep(0.1)
        monkeypatch.setattr(gcmstream.channel, "respond", counting)
        server = await asyncio.start_server(responder, sock=listening)
        async with server:
            await asyncio.sleep(0.5)
            got = await asyncio.to_thread(_answers_read, peers)
            assert answered == []  # (before the genuine client)
            async with asyncio.timeout(10):
                reader, writer = await gcmstream.open_connection(HOST, port, key=KEY)
                writer.write(b"genuine")
                echoed = await reader.read(100)
                writer.close()
        return got, echoed

    got, echoed = anyio.run(scenario, backend="asyncio", backend_options={"use_uvloop": use_uvloop})
    assert got == [0] * REPLAYS_HUNG_UP  # no answer bytes reached any of them
    assert echoed == b"genuine"
    assert len(answered) == 1  # the genuine client's only
