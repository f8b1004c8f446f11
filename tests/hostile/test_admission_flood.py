"""Issue 24.3: a keyless flood does not keep legitimate clients out, on every server path.

One attacker process (tests/hostile/flood.py) holds 1,000 TCP connections to a server on
127.0.0.1 and reconnects each as soon as the server drops it, silent or replaying a recorded
initiator header, from one address or from 250; meanwhile 50 legitimate clients (this process)
connect, one every 0.05 s, and each must complete its handshake and an echo within 5 s: at least
45 of 50 on asyncio, uvloop, the anyio listener on asyncio and trio, and ``gcmstream listen``.
The server runs with every default (gcmstream.admission.DEFAULT_ADMISSION) in its own process.
Run ``pytest -s`` to see each run's figures (served, slowest, what the attacker did).
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import gcmstream
from gcmstream import Role
from gcmstream.admission import REPORT_INTERVAL
from gcmstream.keyfile import write_key_file

from ..helpers import KEY
from .flood import (
    BACKENDS,
    MANY_SOURCES,
    ONE_SOURCE,
    ROOT,
    keyless_flood,
    one_per_connection,
    raise_fd_limit,
    server_process,
)

LEGIT = 50
WITHIN = 5.0  # seconds each legitimate client has for its handshake and echo
# one legitimate client every SPACING s: 50 arrive over 2.5 s of steady flood. Every 0.1 s
# served as many and cost more: the attacker runs at full speed throughout (make test's five
# cells, /usr/bin/time pytest -k keyless_flood_keeps: 30.9 s of CPU at 0.1 s, 20.2 s at 0.05 s)
SPACING = 0.05
SERVED = 45  # of LEGIT, at least
SOURCES = {"one-address": ONE_SOURCE, "250-addresses": MANY_SOURCES}


def recorded_header() -> bytes:
    """A genuine client's first flight, recorded (its header verifies at the server)."""
    return gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data()


def first_flight(attack: str) -> bytes:
    """What each attacker connection sends: nothing, a recorded genuine header, or a header
    under a key the server does not hold (refused at once: a failure of its own, logged at
    debug level and counted in one warning per 10 s)."""
    if attack in ("replay", "trickle"):  # (a trickle sends it a byte at a time: TRICKLE)
        return recorded_header()
    if attack == "other-key":
        return gcmstream.Channel(bytes(range(100, 116)), role=Role.INITIATOR).initial_data()
    return b""


async def one_client(port: int, delay: float, source: str | None = None) -> float | None:
    """Connect after ``delay`` s (from ``source``, a loopback address; None: 127.0.0.1),
    handshake, echo b"ping"; the seconds it took, None if it failed or took more than WITHIN."""
    await asyncio.sleep(delay)
    start = time.monotonic()
    bind: dict[str, Any] = {} if source is None else {"local_addr": (source, 0)}
    try:
        async with asyncio.timeout(WITHIN):
            reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY, **bind)
            try:
                writer.write(b"ping")
                writer.write_eof()
                echoed = await reader.read()
            finally:
                writer.close()
    except (gcmstream.GcmStreamError, OSError, TimeoutError):
        return None
    return time.monotonic() - start if echoed == b"ping" else None


# where the legitimate clients come from: all from 127.0.0.1 (one address, as behind a NAT; no
# attacker's), each from its own address (none an attacker's), or all from the attacker's first
# address (a NAT that the attacker is behind too)
CLIENTS = ("nat", "own", "attacker's")
OWN_ADDRESSES = tuple(f"127.0.2.{n}" for n in range(1, 251))


def client_sources(clients: str, count: int, attacker_sources: Sequence[str]) -> list[str | None]:
    if clients == "own":
        return list(OWN_ADDRESSES[:count])
    if clients == "attacker's":
        return [attacker_sources[0]] * count
    return [None] * count


async def legit_clients(port: int, count: int, sources: Sequence[str | None] = ()) -> list[float | None]:
    """``count`` clients, one every SPACING s, client n from ``sources[n]`` (none: 127.0.0.1)."""
    sources = sources or [None] * count
    return await asyncio.gather(*(one_client(port, SPACING * n, sources[n]) for n in range(count)))


def attacker_counts(process: subprocess.Popen[str]) -> dict[str, int]:
    assert process.stdout is not None
    process.terminate()
    process.wait(10)
    lines = process.stdout.read().splitlines()
    return ast.literal_eval(lines[-1]) if lines else {}


def report(name: str, times: Sequence[float | None], counts: dict[str, int], warnings: int) -> int:
    served = [t for t in times if t is not None]
    slowest = max(served, default=0.0)
    print(f"\n{name}: served {len(served)}/{len(times)} within {WITHIN} s, slowest {slowest:.2f} s;")
    print(f"  attacker {counts}; server warnings {warnings}")
    return len(served)


def flood_run(
    backend: str,
    attack: str,
    sources: Sequence[str],
    attackers: int,
    legit: int,
    log: Path,
    *,
    leave: str = "dropped",
    clients: str = "nat",
    nofile: int = 0,
    trickle: float = 0.0,
) -> int:
    """``attackers`` connections sending ``first_flight(attack)`` from ``sources`` (each
    leaving when dropped, or once answered: ``leave``), ``legit`` clients from ``clients``
    (CLIENTS), one every SPACING s, against a server whose soft RLIMIT_NOFILE is ``nofile``
    (0: raised); at least 90 % of them must be served within WITHIN. ``trickle`` > 0: each
    attacker connection sends one byte of its first flight every ``trickle`` seconds (never its
    last). Returns how many were."""
    raise_fd_limit(4096)
    payload = first_flight(attack)
    started = time.monotonic()  # (before the server: its warnings count from its start)
    with (
        server_process(backend, log, nofile) as port,
        keyless_flood(
            port, count=attackers, payload=payload, sources=sources, leave=leave, trickle=trickle
        ) as attacker,
    ):
        # the flood reaches its steady state first: every slot connected (on a loaded machine
        # the attacker took more than 1 s for it: 459 of 600 established in a whole run), then 1 s
        assert attacker.stdout is not None
        assert attacker.stdout.readline() == "FULL\n"  # (or the attack's counts, at its end)
        time.sleep(1.0)
        times = asyncio.run(legit_clients(port, legit, client_sources(clients, legit, sources)))
        # during the flood (its end closes every pending connection at once, each logged)
        warnings = log.read_text().count("WARNING")
        intervals = 1 + int((time.monotonic() - started) // REPORT_INTERVAL)
        counts = attacker_counts(attacker)
    name = f"{backend}, {attack}, {len(sources)} source(s), {attackers} attackers"
    if (leave, clients, nofile) != ("dropped", "nat", 0):
        name += f" leaving when {leave}, clients {clients}, RLIMIT_NOFILE {nofile or 'raised'}"
    if trickle:
        name += f", a byte every {trickle} s"
    served = report(name, times, counts, warnings)
    assert counts["established"] >= attackers  # the flood was real: every slot connected
    assert "Too many open files" not in log.read_text(errors="replace")
    assert served >= legit * SERVED // LEGIT, name
    # never a line per connection: what the admission shed is one count per 10 s, and so are
    # the failures (headers under another key: _server.FailureReport); an EMFILE line besides
    assert warnings <= intervals * 3, log.read_text()[-2000:]
    return served


# The whole matrix (4 servers x 3 attacks x 2 source sets: 24 runs, about 4 min, most of two
# cores) runs with GCMSTREAM_FLOOD_MATRIX=full, the command of SECURITY.md's table; make test
# runs a sample that attacks each server path once and uses every attack and source set, with
# the cases that failed before the admission (drop-oldest: asyncio replay 2/50, trio replay 12/50).
FLOOD_MATRIX = [
    (backend, attack, sources)
    for backend in BACKENDS
    for attack in ("silent", "replay", "other-key")
    for sources in SOURCES
]
FLOOD_SAMPLE = [
    ("asyncio", "replay", "250-addresses"),
    ("uvloop", "silent", "250-addresses"),
    ("anyio-asyncio", "other-key", "one-address"),
    ("anyio-trio", "replay", "one-address"),
]
FULL_MATRIX = os.environ.get("GCMSTREAM_FLOOD_MATRIX") == "full"


@pytest.mark.slow  # 6-12 s each on two shared cores (pytest --durations)
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("backend", "attack", "sources"),
    FLOOD_MATRIX if FULL_MATRIX else FLOOD_SAMPLE,
    ids=lambda value: str(value),
)
def test_a_keyless_flood_keeps_at_most_5_of_50_clients_out(
    backend: str, attack: str, sources: str, tmp_path: Path
) -> None:
    if backend == "uvloop":
        pytest.importorskip("uvloop")
    flood_run(backend, attack, SOURCES[sources], 1000, LEGIT, tmp_path / "server.log")


# -- the third change's review (docs/review-2026-12-04-admission.md, "Third change, reviewed and
# not merged"): attackers one per address, legitimate clients behind one address or the
# attacker's, the usual descriptor limit. Each cell: (server, attack, attacker addresses,
# attackers, leave, clients, server's soft RLIMIT_NOFILE); a design that serves these worse than
# main's admission does not land.
PER_CONNECTION = "one-per-connection"
REVIEW3_CELLS = {
    # F1: 1,500 replaying holders one per address, clients each at their own address
    "F1-asyncio-1500-holders-own": ("asyncio", "replay", PER_CONNECTION, 1500, "dropped", "own", 0),
    # F1 at the usual descriptor limit: 1,000 such holders (the attacker fills the server's table)
    "F1-asyncio-1024-1000-holders-own": ("asyncio", "replay", PER_CONNECTION, 1000, "dropped", "own", 1024),
    "F1-anyio-asyncio-1024-1000-holders-own": (
        "anyio-asyncio",
        "replay",
        PER_CONNECTION,
        1000,
        "dropped",
        "own",
        1024,
    ),
    # F3: the same holders, clients behind one address (a NAT: 127.0.0.1)
    "F3-asyncio-1500-holders-nat": ("asyncio", "replay", PER_CONNECTION, 1500, "dropped", "nat", 0),
    "F3-trio-1500-holders-nat": ("anyio-trio", "replay", PER_CONNECTION, 1500, "dropped", "nat", 0),
    # F2: replays from 250 addresses that leave once answered, clients behind one address
    "F2-asyncio-answered-250-nat": ("asyncio", "replay", "250-addresses", 1000, "answered", "nat", 0),
    # clients behind the attacker's own (first) address, which holds its per_source share
    "asyncio-250-holders-attackers": ("asyncio", "replay", "250-addresses", 1000, "dropped", "attacker's", 0),
    "asyncio-answered-250-attackers": (
        "asyncio",
        "replay",
        "250-addresses",
        1000,
        "answered",
        "attacker's",
        0,
    ),
}
REVIEW3_SAMPLE = ["F3-trio-1500-holders-nat", "F2-asyncio-answered-250-nat"]
# cells main's admission does not pass every time (non-strict: load-dependent), measured on main
# (GCMSTREAM_FLOOD_MATRIX=full pytest -s -k many_addresses, load 2.7-3.4): what a design owes
REVIEW3_XFAIL: dict[str, list[str]] = {
    # stop 33: asyncio's server accepts 4 a loop pass (aio.ACCEPTS_PER_PASS), the rest waiting in
    # the kernel's queue; the two cells of replays that leave once answered passed 7 of 7 since
    "F1-asyncio-1024-1000-holders-own": [
        "first review's finding 1 at the fitted budget (256 waiting, 512 verified): 4 of 8 runs on "
        "main (39-49 of 50); 7 of 8 with accepts paced at stop 33 (50 seven times, 43 once, load 1-3), "
        "11 of 11 at stop 34 (50 each, beside up to two busy cores), 10 of 10 at stop 35 (50 each, "
        "slowest 0.40-0.60 s, load 3.8-5.7): 28 of 29, the one failure not reproduced"
    ],
}


def review3_params() -> list[Any]:
    names = list(REVIEW3_CELLS) if FULL_MATRIX else REVIEW3_SAMPLE
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=False, reason=reason) for reason in REVIEW3_XFAIL.get(name, ())],
        )
        for name in names
    ]


@pytest.mark.slow  # 8-15 s each on two shared cores
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cell", review3_params())
def test_a_flood_from_many_addresses_keeps_clients_behind_one_or_their_own_in(
    cell: str, tmp_path: Path
) -> None:
    backend, attack, sources, attackers, leave, clients, nofile = REVIEW3_CELLS[cell]
    addresses = one_per_connection(attackers) if sources == PER_CONNECTION else SOURCES[sources]
    log = tmp_path / "server.log"
    flood_run(backend, attack, addresses, attackers, LEGIT, log, leave=leave, clients=clients, nofile=nofile)


# -- stop 33's review: a slow-header flood (each attacker connection sends one byte of a recorded
# header every TRICKLE s, never the last, and reconnects when dropped), one address per
# connection. Every connection the server accepts has bytes on the way; asyncio's server admitted
# each before reading it, as having received nothing, so its newcomers evicted the clients whose
# headers sat unread in the kernel: 0 of 50 (this cell on main, 1,000 connections,
# 0.5 s), until the admission asked the kernel (_adapter.admit). The whole table runs every server
# path; make test the cell that failed (about 5 s).
TRICKLE = 0.5
TRICKLE_ATTACKERS = 1000
TRICKLE_BACKENDS = list(BACKENDS) if FULL_MATRIX else ["asyncio"]


@pytest.mark.slow  # 10-20 s each on two shared cores
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", TRICKLE_BACKENDS)
def test_a_slow_header_flood_keeps_at_most_5_of_50_clients_out(backend: str, tmp_path: Path) -> None:
    if backend == "uvloop":
        pytest.importorskip("uvloop")
    addresses = one_per_connection(TRICKLE_ATTACKERS)
    log = tmp_path / "server.log"
    flood_run(backend, "trickle", addresses, TRICKLE_ATTACKERS, LEGIT, log, trickle=TRICKLE)


@pytest.mark.timeout(60)
def test_a_small_replay_flood_keeps_clients_in(tmp_path: Path) -> None:
    """make check's version (4-6 s): 600 connections replaying a recorded header from 250
    addresses, 20 clients, asyncio. Drop-oldest served 17 of 20 here, with 5,440 warnings."""
    flood_run("asyncio", "replay", MANY_SOURCES, 600, 20, tmp_path / "server.log")


# -- gcmstream listen: one peer per run, so one run per legitimate client ----------------------

# listen processes in turn under one flood, each with one peer; make test runs 6 (at least 5 must
# get through), the whole table 10 (at least 9): each run is a process start under the flood
LISTEN_RUNS, LISTEN_SERVED = (10, 9) if FULL_MATRIX else (6, 5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(process: subprocess.Popen[bytes]) -> bytes:
    """Read the listener's stderr up to its 'listening on' line (bounded: WITHIN seconds)."""
    assert process.stderr is not None
    fd, seen = process.stderr.fileno(), b""
    deadline = time.monotonic() + 2 * WITHIN
    while b"listening on" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            seen += chunk
    assert b"listening on" in seen, seen
    return seen


def listen_once(port: int, keyfile: Path) -> tuple[bool, bytes]:
    """One ``gcmstream listen`` process, one legitimate peer: True if the peer's handshake
    and transfer completed within WITHIN and the listener printed what it sent."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "listen", f"127.0.0.1:{port}", "-k", str(keyfile)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(process)
        time.sleep(1.0)  # the flood, reconnecting since the port opened, fills the listener first
        took = asyncio.run(one_listen_peer(port))
        if took is None:  # the peer did not get through: listen is still listening
            return False, b""
        out, err = process.communicate(timeout=2 * WITHIN)
    except subprocess.TimeoutExpired:
        return False, b""
    finally:
        process.kill()
        process.wait()
    return out == b"ping" and process.returncode == 0, err


async def one_listen_peer(port: int) -> float | None:
    start = time.monotonic()
    try:
        async with asyncio.timeout(WITHIN):
            reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
            try:
                writer.write(b"ping")
                writer.write_eof()
                await reader.read()  # the listener's stdin is empty: just its FINAL
            finally:
                writer.close()
    except (gcmstream.GcmStreamError, OSError, TimeoutError):
        return None
    return time.monotonic() - start


@pytest.mark.slow  # 25-40 s each on two shared cores
@pytest.mark.timeout(180)
@pytest.mark.parametrize("attack", ["silent", "replay"] if FULL_MATRIX else ["replay"])
def test_listen_under_a_keyless_flood_still_takes_its_peer(attack: str, tmp_path: Path) -> None:
    """LISTEN_RUNS listen processes in turn on one port, the flood running throughout (from
    250 addresses); each run's one peer must get through within WITHIN: at least
    LISTEN_SERVED of them."""
    raise_fd_limit(4096)
    keyfile = tmp_path / "key"
    write_key_file(keyfile, KEY)
    port = free_port()
    payload = first_flight(attack)
    results = []
    warnings = 0
    with keyless_flood(port, count=1000, payload=payload, sources=MANY_SOURCES) as attacker:
        time.sleep(0.5)
        for _ in range(LISTEN_RUNS):
            ok, err = listen_once(port, keyfile)
            results.append(ok)
            warnings += len(re.findall(rb"still listening", err))
        counts = attacker_counts(attacker)
    print(
        f"\nlisten, {attack}: served {sum(results)}/{LISTEN_RUNS}; attacker {counts};",
        f"per-peer warnings {warnings}",
    )
    assert counts["established"] >= 1000 * LISTEN_RUNS  # every run was flooded
    assert sum(results) >= LISTEN_SERVED
