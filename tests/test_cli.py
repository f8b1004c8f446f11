"""The gcmstream command line, run as real subprocesses (sys.executable -m gcmstream)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import resource
import select
import signal
import stat
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import gcmstream
from gcmstream.cli import (
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_TAMPERED,
    EXIT_TERMINATED,
    EXIT_TRUNCATED,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
    EXIT_WRONG_KEY,
    KEY_ENV,
)
from gcmstream.format import HEADER_SIZE, RECORD_HEADER_SIZE, TAG_SIZE
from gcmstream.keyfile import KEY_PREFIX, parse_key

RECORD = gcmstream.DEFAULT_RECORD_SIZE
SIZES = [0, 1, RECORD - 1, RECORD, RECORD + 1, 3 * 1024 * 1024 + 7]
TIMEOUT = 120  # generous: only there to turn a hang into a failure (fsync can stall on a busy disk)
COMMANDS = ("keygen", "encrypt", "decrypt", "listen", "connect")


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, "GCMSTREAM_DEBUG")}
    return {**base, **extra}


def gcm(
    *args: str | Path,
    input: bytes | None = None,
    stdin: int | None = None,
    environ: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        input=input,
        stdin=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        env=environ or env(),
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    text = result.stderr.decode()
    assert result.returncode == code, text
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "Traceback" not in text
    return text


def data(size: int) -> bytes:
    return os.urandom(size)


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "key"
    result = gcm("keygen", "-o", path)
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory, keyfile: Path) -> tuple[bytes, bytes]:
    """(plaintext, ciphertext) of 4 full records and a short one, made by the CLI."""
    plain = data(4 * RECORD + 100)
    result = gcm("encrypt", "-k", keyfile, "--context", "ctx", input=plain)
    assert result.returncode == 0, result.stderr
    return plain, result.stdout


def record_offset(index: int) -> int:
    return HEADER_SIZE + index * (RECORD_HEADER_SIZE + RECORD + TAG_SIZE)


# -- help, keys, usage -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [(), *((c,) for c in COMMANDS)], ids=["main", *COMMANDS])
def test_help(command: tuple[str, ...]) -> None:
    result = gcm(*command, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert text.startswith("usage: gcmstream")
    assert "exit status" in text and "wrong key" in text
    if command and command[0] in ("encrypt", "decrypt", "listen", "connect"):
        assert KEY_ENV in text
    if command == ("decrypt",):
        assert "last good record" in " ".join(text.split())


def test_keygen(tmp_path: Path) -> None:
    path = tmp_path / "k"
    assert gcm("keygen", "-o", path).returncode == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith(f"{KEY_PREFIX}:aes128:") and text.endswith("\n")
    assert len(parse_key(text)) == 16
    refused = gcm("keygen", "-o", path, "--suite", "aes256")
    assert "--force" in one_line_error(refused, EXIT_USAGE)
    assert path.read_text() == text
    assert gcm("keygen", "-o", path, "--suite", "aes256", "--force").returncode == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(parse_key(path.read_text())) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]
    printed = gcm("keygen", "-o", "-", "--suite", "aes256")
    assert printed.returncode == 0 and len(parse_key(printed.stdout.decode())) == 32


def test_usage_errors(tmp_path: Path, keyfile: Path) -> None:
    one_line_error(gcm("encrypt", input=b"x"), EXIT_USAGE)  # no key at all
    bad = tmp_path / "bad"
    bad.write_text("gcmstream-key-v9:aes128:AAAA\n")
    assert "not supported" in one_line_error(gcm("encrypt", "-k", bad, input=b"x"), EXIT_USAGE)
    one_line_error(gcm("encrypt", "-k", tmp_path / "missing", input=b"x"), EXIT_USAGE)
    one_line_error(gcm("encrypt", "-k", keyfile, "--record-size", "0", input=b"x"), EXIT_USAGE)
    one_line_error(gcm("encrypt", "-k", keyfile, "--bogus"), EXIT_USAGE)
    one_line_error(gcm("connect", "no-port", "-k", keyfile), EXIT_USAGE)
    one_line_error(gcm("frobnicate"), EXIT_USAGE)
    missing = gcm("encrypt", "-k", keyfile, "-i", tmp_path / "nope", "-o", tmp_path / "out")
    assert "No such file" in one_line_error(missing, EXIT_IO)
    assert not (tmp_path / "out").exists()


def test_key_from_environment(keyfile: Path) -> None:
    key_env = env(**{KEY_ENV: keyfile.read_text()})
    encrypted = gcm("encrypt", input=b"from env", environ=key_env)
    assert encrypted.returncode == 0, encrypted.stderr
    decrypted = gcm("decrypt", "-k", keyfile, input=encrypted.stdout)
    assert decrypted.stdout == b"from env"
    one_line_error(gcm("decrypt", input=encrypted.stdout, environ=env(**{KEY_ENV: "nonsense"})), EXIT_USAGE)


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_files(tmp_path: Path, keyfile: Path, size: int) -> None:
    plain = data(size)
    (tmp_path / "in").write_bytes(plain)
    args = ("-k", keyfile, "--context", "backup v1")
    assert gcm("encrypt", *args, "-i", tmp_path / "in", "-o", tmp_path / "enc").returncode == 0
    assert gcm("decrypt", *args, "-i", tmp_path / "enc", "-o", tmp_path / "out").returncode == 0
    assert (tmp_path / "out").read_bytes() == plain
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc", "in", "out"]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_pipes(keyfile: Path, size: int) -> None:
    plain = data(size)
    encrypted = gcm("encrypt", "-k", keyfile, "-i", "-", "-o", "-", "--record-size", "16K", input=plain)
    assert encrypted.returncode == 0, encrypted.stderr
    assert encrypted.stderr == b""
    decrypted = gcm("decrypt", "-k", keyfile, input=encrypted.stdout)
    assert decrypted.returncode == 0, decrypted.stderr
    assert decrypted.stdout == plain


def test_console_script_matches_module(tmp_path: Path, keyfile: Path) -> None:
    script = Path(sys.executable).parent / "gcmstream"
    if not script.exists():
        pytest.skip("console script not installed next to this interpreter")
    encrypted = subprocess.run(
        [script, "encrypt", "-k", keyfile], input=b"hi", capture_output=True, timeout=TIMEOUT, check=True
    )
    assert gcm("decrypt", "-k", keyfile, input=encrypted.stdout).stdout == b"hi"


# -- failures ------------------------------------------------------------------------------------


def _tamper(wire: bytes) -> bytes:
    out = bytearray(wire)
    out[record_offset(2) + 50] ^= 1
    return bytes(out)


# (mangle, context, exit status, plaintext released to stdout before the error)
FAILURES = [
    pytest.param(_tamper, "ctx", EXIT_TAMPERED, {2 * RECORD}, id="tampered"),
    pytest.param(lambda w: w[: record_offset(3) + 10], "ctx", EXIT_TRUNCATED, {3 * RECORD}, id="truncated"),
    pytest.param(lambda w: w[: record_offset(4)], "ctx", EXIT_TRUNCATED, {4 * RECORD}, id="cut-at-boundary"),
    # the FINAL record authenticates; whether its 100 bytes went out depends on when the extra
    # bytes arrived (with it: refused with it; after it: found when checking for the end)
    pytest.param(lambda w: w + b"more", "ctx", EXIT_TAMPERED, {4 * RECORD, 4 * RECORD + 100}, id="trailing"),
    pytest.param(lambda w: w, "other context", EXIT_WRONG_KEY, {0}, id="wrong-context"),
    pytest.param(lambda w: b"not gcmstream at all" * 10, "ctx", EXIT_UNSUPPORTED, {0}, id="not-gcmstream"),
]


@pytest.mark.parametrize(("mangle", "context", "code", "released"), FAILURES)
def test_failures_leave_no_output_file(
    tmp_path: Path,
    keyfile: Path,
    sealed: tuple[bytes, bytes],
    mangle: object,
    context: str,
    code: int,
    released: set[int],
) -> None:
    _, wire = sealed
    (tmp_path / "enc").write_bytes(mangle(wire))  # type: ignore[operator]
    args = ("decrypt", "-k", keyfile, "--context", context, "-i", tmp_path / "enc", "-o", tmp_path / "out")
    one_line_error(gcm(*args), code)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc"]
    (tmp_path / "out").write_bytes(b"keep me")
    one_line_error(gcm(*args), code)
    assert (tmp_path / "out").read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc", "out"]


@pytest.mark.parametrize(("mangle", "context", "code", "released"), FAILURES)
def test_stdout_gets_the_authenticated_prefix(
    keyfile: Path,
    sealed: tuple[bytes, bytes],
    mangle: object,
    context: str,
    code: int,
    released: set[int],
) -> None:
    plain, wire = sealed
    result = gcm("decrypt", "-k", keyfile, "--context", context, input=mangle(wire))  # type: ignore[operator]
    message = one_line_error(result, code)
    assert len(result.stdout) in released
    assert result.stdout == plain[: len(result.stdout)]
    if code in (EXIT_TAMPERED, EXIT_TRUNCATED):
        assert "last authenticated record" in message


def test_wrong_key_exit_code(tmp_path: Path, sealed: tuple[bytes, bytes]) -> None:
    other = tmp_path / "other"
    assert gcm("keygen", "-o", other).returncode == 0
    result = gcm("decrypt", "-k", other, "--context", "ctx", "-o", tmp_path / "out", input=sealed[1])
    assert "wrong key" in one_line_error(result, EXIT_WRONG_KEY)
    assert not (tmp_path / "out").exists()


def test_refuses_ciphertext_to_a_terminal(keyfile: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gcmstream", "encrypt", "-k", str(keyfile)],
            input=b"secret",
            stdout=terminal,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT,
            env=env(),
            check=False,
        )
        assert result.returncode == EXIT_USAGE
        assert b"terminal" in result.stderr
        refused = gcm("encrypt", "-k", keyfile, "-o", os.ttyname(terminal), input=b"secret")
        assert refused.returncode == EXIT_USAGE
    finally:
        os.close(controller)
        os.close(terminal)


def _stderr_on_terminal(args: Sequence[str | Path]) -> tuple[int, bytes]:
    """Run with stderr on a pseudo-terminal; return (exit status, what the terminal got)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new pty is 0x0
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env=env(),
    )
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + TIMEOUT
    try:
        exited = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the child closed the terminal and all was read
                    break
                if not chunk:
                    break
                shown += chunk
            elif exited:  # exited before the last select, which found nothing more
                break
            else:
                exited = process.poll() is not None
        return process.wait(timeout=TIMEOUT), bytes(shown)
    finally:
        process.kill()
        process.wait()
        os.close(controller)


def test_progress_bar_on_a_terminal_only(tmp_path: Path, keyfile: Path) -> None:
    (tmp_path / "in").write_bytes(data(4 * 1024 * 1024))
    args: list[str | Path] = ["encrypt", "-k", keyfile, "-i", tmp_path / "in", "-o", tmp_path / "enc"]
    code, shown = _stderr_on_terminal(args)
    assert code == 0
    assert b"encrypt:" in shown and b"%|" in shown
    code, shown = _stderr_on_terminal([*args, "--quiet"])
    assert code == 0 and shown == b""
    code, shown = _stderr_on_terminal(["decrypt", "-k", keyfile, "-i", tmp_path / "enc", "-o", os.devnull])
    assert code == 0 and b"decrypt" in shown
    piped = gcm("encrypt", "-k", keyfile, "-i", tmp_path / "in", "-o", tmp_path / "enc")
    assert piped.returncode == 0 and piped.stderr == b""  # stderr is no terminal: no bar


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [(signal.SIGINT, EXIT_INTERRUPTED, "interrupted"), (signal.SIGTERM, EXIT_TERMINATED, "SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_signal_removes_the_temporary_file(
    signum: int, code: int, said: str, tmp_path: Path, keyfile: Path, sealed: tuple[bytes, bytes]
) -> None:
    _, wire = sealed
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gcmstream",
            "decrypt",
            "-k",
            keyfile,
            "--context",
            "ctx",
            "-o",
            tmp_path / "out",
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    assert process.stdin is not None and process.stderr is not None
    try:
        process.stdin.write(wire[: record_offset(2)])
        process.stdin.flush()
        deadline = time.monotonic() + TIMEOUT
        while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.02)
        process.send_signal(signum)
        assert process.wait(timeout=TIMEOUT) == code
        one_line = process.stderr.read().decode()
        assert one_line.count("\n") == 1 and said in one_line
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stderr.close()
    assert list(tmp_path.iterdir()) == []


# -- constant memory -----------------------------------------------------------------------------

_PEAK_RSS = textwrap.dedent(
    """
    import resource, subprocess, sys
    subprocess.run(sys.argv[1:], check=True, timeout=120)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    """
)


def _peak_rss_kib(args: Sequence[str | Path]) -> int:
    command = [sys.executable, "-c", _PEAK_RSS, sys.executable, "-m", "gcmstream", *map(str, args)]
    result = subprocess.run(command, capture_output=True, timeout=150, env=env(), check=True)
    return int(result.stdout)


def test_decrypt_memory_does_not_grow_with_input(tmp_path: Path, keyfile: Path) -> None:
    size = 128 * 1024 * 1024
    with open(tmp_path / "big", "wb") as file:  # sparse: cheap to make, same work to encrypt
        file.truncate(size)
    assert gcm("encrypt", "-k", keyfile, "-i", tmp_path / "big", "-o", tmp_path / "big.enc").returncode == 0
    (tmp_path / "big").unlink()
    (tmp_path / "small").write_bytes(b"x" * 1000)
    assert (
        gcm("encrypt", "-k", keyfile, "-i", tmp_path / "small", "-o", tmp_path / "small.enc").returncode == 0
    )
    baseline = _peak_rss_kib(["decrypt", "-k", keyfile, "-i", tmp_path / "small.enc", "-o", tmp_path / "s"])
    big = _peak_rss_kib(["decrypt", "-k", keyfile, "-i", tmp_path / "big.enc", "-o", tmp_path / "b"])
    assert (tmp_path / "b").stat().st_size == size
    # The ring (256 KiB), one read and one write buffer (1 MiB each) and thread stacks: a few MiB
    # over the interpreter's own baseline, whatever the size; 128 MiB of input would show.
    assert big - baseline < 16 * 1024, (baseline, big)


# -- network pipes -------------------------------------------------------------------------------


class Listener:
    """``gcmstream listen 127.0.0.1:0`` in the background; ``port`` from its stderr line."""

    def __init__(self, args: Sequence[str | Path], stdin: Path | None = None) -> None:
        self._stdin_file = open(stdin, "rb") if isinstance(stdin, Path) else None  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gcmstream", "listen", "127.0.0.1:0", *map(str, args)],
            stdin=self._stdin_file if self._stdin_file is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env(),
        )
        self.stdout = b""
        self.stderr = b""
        assert self.process.stderr is not None
        line = self._first_line()
        match = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        self.port = int(match.group(1))

    def _first_line(self) -> bytes:
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        line = b""
        deadline = time.monotonic() + TIMEOUT
        while not line.endswith(b"\n"):
            assert time.monotonic() < deadline, "listen printed no address"
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 1)
                assert chunk, "listen exited early"
                line += chunk
        return line

    def finish(self) -> int:
        try:
            self.stdout, self.stderr = self.process.communicate(timeout=TIMEOUT)
        finally:
            self.process.kill()
            self.process.wait()
            if self._stdin_file:
                self._stdin_file.close()
        return self.process.returncode


def test_listen_connect_moves_data_both_ways(tmp_path: Path, keyfile: Path) -> None:
    up, down = data(3 * 1024 * 1024 + 1), data(2 * 1024 * 1024 + 3)
    (tmp_path / "down").write_bytes(down)
    listener = Listener(["-k", keyfile, "--context", "net"], tmp_path / "down")
    connected = gcm("connect", f"127.0.0.1:{listener.port}", "-k", keyfile, "--context", "net", input=up)
    assert listener.finish() == 0, listener.stderr
    assert connected.returncode == 0, connected.stderr
    assert connected.stdout == down
    assert listener.stdout == up


def test_half_close_each_direction_ends_on_its_own(keyfile: Path) -> None:
    """The listener's input is empty: the connecting side's output ends at once, while its own
    input is still open; the listener's output ends when that input ends."""
    listener = Listener(["-k", keyfile])
    client = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "connect", f"127.0.0.1:{listener.port}", "-k", str(keyfile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(client.stdout.read()))  # type: ignore[union-attr]
        reader.start()
        reader.join(TIMEOUT)
        assert not reader.is_alive(), "connect's stdout did not end at the peer's FINAL"
        assert got == [b""]
        assert client.poll() is None  # still sending: its stdin is open
        client.stdin.write(b"late data\n")
        client.stdin.close()
        assert client.wait(timeout=TIMEOUT) == 0
    finally:
        client.kill()
        client.wait()
        client.stdout.close()
        assert client.stderr is not None
        client.stderr.close()
    assert listener.finish() == 0, listener.stderr
    assert listener.stdout == b"late data\n"


def test_listen_connect_wrong_key(tmp_path: Path, keyfile: Path) -> None:
    other = tmp_path / "other"
    assert gcm("keygen", "-o", other).returncode == 0
    listener = Listener(["-k", keyfile])
    connected = gcm("connect", f"127.0.0.1:{listener.port}", "-k", other, input=b"hello")
    # the listener refuses the unknown key ID and hangs up before answering: the connecting
    # side can only see its handshake cut short (it learns nothing about the listener's key)
    assert "during the handshake" in one_line_error(connected, EXIT_TRUNCATED)
    assert listener.finish() == EXIT_WRONG_KEY
    assert listener.stdout == b""


def test_connect_refused_is_an_io_error(keyfile: Path) -> None:
    listener = Listener(["-k", keyfile])
    port = listener.port
    listener.process.kill()
    listener.finish()
    one_line_error(gcm("connect", f"127.0.0.1:{port}", "-k", keyfile, input=b""), EXIT_IO)


def test_peak_rss_helper_measures_children() -> None:
    # guards the measurement above: a child that allocates 64 MiB must show it
    code = "b = bytearray(64 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"
    helper = [sys.executable, "-c", _PEAK_RSS, sys.executable, "-c", code]
    rss = int(subprocess.run(helper, capture_output=True, timeout=TIMEOUT, check=True).stdout)
    assert rss > 60 * 1024
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0


def test_interrupted_sender_is_seen_as_truncated(keyfile: Path) -> None:
    """A connect killed (SIGTERM) mid-transfer must not look complete: the peer exits 5."""
    listener = Listener(["-k", keyfile])
    client = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "connect", f"127.0.0.1:{listener.port}", "-k", str(keyfile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env(),
    )
    assert client.stdin is not None and listener.process.stdout is not None
    try:
        client.stdin.write(b"partial")
        client.stdin.flush()
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(listener.process.stdout.read(7)))  # type: ignore[union-attr]
        reader.start()
        reader.join(TIMEOUT)
        assert got == [b"partial"]  # the peer has the first record: the connection is up
        client.send_signal(signal.SIGTERM)
        assert client.wait(timeout=TIMEOUT) == EXIT_TERMINATED
    finally:
        client.kill()
        client.wait()
        client.stdin.close()
        assert client.stderr is not None
        client.stderr.close()
    assert listener.finish() == EXIT_TRUNCATED, listener.stderr
    assert b"truncated" in listener.stderr
