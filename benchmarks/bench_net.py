"""Shared plumbing for the socket parts: TLS material (trustme), TLS 1.3 pinned to
AES-128-GCM, worker processes pinned to cores, event loop selection.

Python's ``ssl`` cannot choose TLS 1.3 cipher suites, so workers run with an OpenSSL config
(``OPENSSL_CONF``) whose system default is ``Ciphersuites = TLS_AES_128_GCM_SHA256``; every TLS
row reports the suite it actually negotiated.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEY = bytes(range(16))
CONTEXT = b"gcmstream benchmarks"

_OPENSSL_CONF = """openssl_conf = default_conf
[default_conf]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
Ciphersuites = TLS_AES_128_GCM_SHA256
"""


class Workdir:
    """A temp dir with the TLS material and the OpenSSL config the workers use."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gcmstream-bench-")
        self.path = Path(self._tmp.name)
        (self.path / "openssl.cnf").write_text(_OPENSSL_CONF)
        self.tls = False
        try:
            import trustme
        except ImportError:
            return
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        cert.private_key_and_cert_chain_pem.write_to_path(str(self.path / "server.pem"))
        ca.cert_pem.write_to_path(str(self.path / "ca.pem"))
        self.tls = True

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["OPENSSL_CONF"] = str(self.path / "openssl.cnf")
        env["GCMSTREAM_BENCH_DIR"] = str(self.path)
        return env

    def close(self) -> None:
        self._tmp.cleanup()


def server_ssl_context() -> ssl.SSLContext:
    base = Path(os.environ["GCMSTREAM_BENCH_DIR"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(base / "server.pem"))
    return ctx


def client_ssl_context() -> ssl.SSLContext:
    base = Path(os.environ["GCMSTREAM_BENCH_DIR"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(str(base / "ca.pem"))
    return ctx


def pin(core: int) -> bool:
    """Pin this process to one core (of those allowed) if there are at least two."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return False
    if len(allowed) < 2:
        return False
    os.sched_setaffinity(0, {allowed[core % len(allowed)]})
    return True


def raise_fd_limit(want: int) -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_loop(loop_name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main()`` on asyncio, uvloop (asyncio API), or through anyio on asyncio/trio."""
    if loop_name == "uvloop":
        import uvloop

        uvloop.run(main())
    elif loop_name in ("anyio-asyncio", "anyio-trio"):
        import anyio

        anyio.run(main, backend=loop_name.split("-", 1)[1])
    else:
        asyncio.run(main())


def spawn(script: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_line(proc: subprocess.Popen[str], prefix: str) -> str:
    """The next stdout line of ``proc`` starting with ``prefix`` (its rest), or raise."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"worker ended before {prefix!r}: {err.strip()[-2000:]}")
        if line.startswith(prefix):
            return line[len(prefix) :].strip()


def emit(prefix: str, value: Any) -> None:
    print(prefix + (json.dumps(value) if not isinstance(value, str) else value), flush=True)


def finish(proc: subprocess.Popen[str], timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


async def stdin_lines() -> asyncio.Queue[str]:
    """A worker's commands: the lines of its stdin, as a queue on the running loop ("exit" at
    its end)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str] = asyncio.Queue()

    def pump() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line.strip())
        loop.call_soon_threadsafe(queue.put_nowait, "exit")

    threading.Thread(target=pump, daemon=True).start()  # a daemon: exit never waits for stdin
    return queue


def send_line(proc: subprocess.Popen[str], line: str) -> None:
    """One command line to a worker (``stdin_lines`` on its side)."""
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


class Watchdog:
    """Kills the workers of a run that takes longer than ``timeout`` seconds, and says so: the
    run then raises TimeoutError (``check``), not the "worker ended before ..." that the
    killed worker's closed stdout would otherwise show."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout = timeout
        self.what = what
        self.fired = False
        self._timers: list[threading.Timer] = []

    def watch(self, proc: subprocess.Popen[str]) -> None:
        timer = threading.Timer(self.timeout, self._fire, (proc,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _fire(self, proc: subprocess.Popen[str]) -> None:
        self.fired = True
        proc.kill()

    def cancel(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def check(self, exc: BaseException) -> None:
        """Raise TimeoutError (from ``exc``) if the watchdog killed a worker of this run."""
        if self.fired:
            raise TimeoutError(f"{self.what} timed out: not done within {self.timeout:g} s") from exc


AsyncMain = Callable[[], Awaitable[None]]
