"""Signals while the CLI waits for input that does not come or for a reader that does not read
(issue 21, section 5): SIGINT, SIGTERM and SIGHUP end ``encrypt`` and ``decrypt`` reading an
idle pipe, terminal or FIFO, or writing to a pipe nobody reads, within a fraction of a second,
with the documented exit status, one line on stderr and no temporary or output file left. Real
subprocesses (``python -m gcmstream``), the idle input or the stalled output held open by the
test."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gcmstream.cli import EXIT_INTERRUPTED, EXIT_TERMINATED, KEY_ENV

from .helpers import interruptible

# Seconds from the signal to the exit, measured by this file's tests (each case 2-5 times:
# `nice -n 10 .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/test_cli_signals.py`
# printing the figure, 2 shared cores at load 5-7). `python -m gcmstream encrypt|decrypt -k KEY
# -o DIR/file` reading an idle pipe or terminal on stdin or `-i FIFO`: 5.005-5.061 s before the
# engine polled its input (its worker, blocked in read(), was given up after 5 s,
# files.STOP_WAIT), 0.064-0.315 s after. `python -m gcmstream decrypt -k KEY FILE` blocked
# writing to a stdout pipe nobody reads: 5.007-5.017 s before (the same 5 s), 0.101-0.131 s
# after (given up after cli._PIPE_STOP_WAIT, 0.1 s). Much of it is Python's own exit: `python -c
# "import gcmstream.cli, sys; sys.stdin.buffer.read()"` on an idle pipe exited 0.110-0.124 s
# after SIGINT in the same sitting. The bound is the 1 s the issue asked for, about three times the worst.
EXIT_BOUND = 1.0
# Only turns a hang into a failure (start-up, fsync on a busy disk).
START_TIMEOUT = 60.0

SIGNALS = pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED), (signal.SIGHUP, EXIT_TERMINATED)],
    ids=["SIGINT", "SIGTERM", "SIGHUP"],
)


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (KEY_ENV, "GCMSTREAM_DEBUG")}


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "key"
    subprocess.run([sys.executable, "-m", "gcmstream", "keygen", "-o", str(path)], check=True, env=env())
    return path


@contextmanager
def gcmstream(*args: str | Path, stdin: int) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        stdin=stdin,
        stderr=subprocess.PIPE,
        env=env(),
        preexec_fn=interruptible,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()


def wait_for_the_temporary_file(folder: Path, process: subprocess.Popen[bytes]) -> None:
    """The output's temporary file appears just before the engine's first read of the input."""
    deadline = time.monotonic() + START_TIMEOUT
    while not any(p.name.endswith(".partial") for p in folder.iterdir()):
        assert process.poll() is None, process.stderr.read() if process.stderr else None
        assert time.monotonic() < deadline, "no temporary file appeared"
        time.sleep(0.01)
    time.sleep(0.3)  # and the read of the idle input has begun


def signal_and_time_the_exit(process: subprocess.Popen[bytes], signum: int) -> tuple[int, float]:
    """(exit status, seconds from the signal to the exit). A blocking wait (``wait(timeout)``
    polls every 50 ms, too coarse to measure by), with a timer that kills a hung process."""
    hang = threading.Timer(START_TIMEOUT, process.kill)
    hang.start()
    try:
        sent = time.monotonic()
        process.send_signal(signum)
        code = process.wait()
        return code, time.monotonic() - sent
    finally:
        hang.cancel()


def check_the_end(process: subprocess.Popen[bytes], code: int, expected: int, elapsed: float) -> None:
    assert process.stderr is not None
    said = process.stderr.read()
    assert code == expected, said
    assert said.count(b"\n") == 1 and b"Traceback" not in said, said
    assert elapsed < EXIT_BOUND, f"exit {elapsed:.2f} s after the signal"


@pytest.mark.parametrize("stdin", ["pipe", "terminal"])
@pytest.mark.parametrize("command", ["encrypt", "decrypt"])
@SIGNALS
def test_signal_while_stdin_is_idle(
    tmp_path: Path, keyfile: Path, command: str, signum: int, code: int, stdin: str
) -> None:
    """stdin an idle pipe or terminal (held open, nothing written): the signal ends the command
    at once."""
    out = tmp_path / "out"
    out.mkdir()
    # (the command's end, the end this test holds open): a pipe's read end, a pty's slave
    theirs, ours = os.pipe()[::-1] if stdin == "pipe" else pty.openpty()[::-1]
    try:
        with gcmstream(command, "-k", keyfile, "-o", out / "file", stdin=theirs) as process:
            os.close(theirs)
            theirs = -1
            wait_for_the_temporary_file(out, process)
            status, elapsed = signal_and_time_the_exit(process, signum)
            check_the_end(process, status, code, elapsed)
    finally:
        os.close(ours)
        if theirs >= 0:
            os.close(theirs)
    assert list(out.iterdir()) == []  # neither the temporary file nor the output


@pytest.mark.parametrize("command", ["encrypt", "decrypt"])
@pytest.mark.slow  # 1 to 2 s a case; make check keeps test_signal_while_stdin_is_idle
@SIGNALS
def test_signal_while_a_fifo_given_as_input_is_idle(
    tmp_path: Path, keyfile: Path, command: str, signum: int, code: int
) -> None:
    """``-i FIFO`` whose writer is connected and silent: the signal ends the command at once."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    with gcmstream(command, "-k", keyfile, fifo, "-o", out / "file", stdin=subprocess.DEVNULL) as process:
        # the writer, once the command opened the FIFO for reading (ENXIO until then)
        deadline = time.monotonic() + START_TIMEOUT
        writer = -1
        while writer < 0:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
        try:
            wait_for_the_temporary_file(out, process)
            status, elapsed = signal_and_time_the_exit(process, signum)
            check_the_end(process, status, code, elapsed)
        finally:
            os.close(writer)
    assert list(out.iterdir()) == []


def wait_for_an_open_of_the_fifo(process: subprocess.Popen[bytes]) -> None:
    """Until a thread of ``process`` waits in open() for the FIFO's other end (Linux's wchan)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        waits = set()
        for task in Path(f"/proc/{process.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                waits.add((task / "wchan").read_text())
        if "wait_for_partner" in waits:
            return
        assert process.poll() is None, process.stderr.read() if process.stderr else None
        assert time.monotonic() < deadline, f"no thread waits in a FIFO's open: {waits}"
        time.sleep(0.01)


@pytest.mark.skipif(sys.platform != "linux", reason="reads which kernel call a thread waits in")
@pytest.mark.parametrize("end", ["output", "input"])
@SIGNALS
def test_signal_while_a_fifo_waits_for_its_other_end(
    tmp_path: Path, keyfile: Path, end: str, signum: int, code: int
) -> None:
    """``encrypt -o FIFO`` that nobody reads yet, ``decrypt FIFO`` that nobody writes yet: the
    command waits in open(), where no stop request reaches it; the signal gives the open up at
    once, with the documented exit status and nothing written."""
    fifo, out, plain = tmp_path / "fifo", tmp_path / "out", tmp_path / "plain"
    os.mkfifo(fifo)
    out.mkdir()
    plain.write_bytes(b"x" * 100)
    if end == "output":
        args: tuple[str | Path, ...] = ("encrypt", "-k", keyfile, plain, "-o", fifo)
    else:
        args = ("decrypt", "-k", keyfile, fifo, "-o", out / "file")
    with gcmstream(*args, stdin=subprocess.DEVNULL) as process:
        wait_for_an_open_of_the_fifo(process)
        status, elapsed = signal_and_time_the_exit(process, signum)
        check_the_end(process, status, code, elapsed)
    assert list(out.iterdir()) == []


@pytest.fixture(scope="module")
def sealed_file(tmp_path_factory: pytest.TempPathFactory, keyfile: Path) -> Path:
    """8 MiB encrypted: far more than a pipe holds."""
    folder = tmp_path_factory.mktemp("sealed")
    (folder / "plain").write_bytes(os.urandom(8 * 1024 * 1024))
    command = ["encrypt", "-k", keyfile, folder / "plain", "-o", folder / "sealed"]
    subprocess.run([sys.executable, "-m", "gcmstream", *map(str, command)], check=True, env=env())
    return folder / "sealed"


@pytest.mark.slow  # 1 to 2 s a case; make check keeps test_signal_while_stdin_is_idle
@SIGNALS
def test_signal_while_the_reader_of_stdout_stalls(
    keyfile: Path, sealed_file: Path, signum: int, code: int
) -> None:
    """``decrypt`` to a pipe nobody reads any more, its worker blocked in write(): the signal
    ends the command within the same bound (no temporary file to wait for)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "decrypt", "-k", str(keyfile), str(sealed_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
        preexec_fn=interruptible,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        assert len(process.stdout.read(1)) == 1  # writing has begun; now nobody reads
        time.sleep(0.3)  # let it fill the pipe and block in write()
        status, elapsed = signal_and_time_the_exit(process, signum)
        check_the_end(process, status, code, elapsed)
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()


@SIGNALS
def test_signal_while_decrypt_waits_for_the_end_after_final_releases_none_of_it(
    keyfile: Path, signum: int, code: int
) -> None:
    """``decrypt`` to stdout given the whole stream on a pipe left open: FINAL authenticated and
    is held back until the input's end is seen. A signal then ends the command with none of
    FINAL's plaintext written (review 2, finding 2: it was written, then exit 130 or 143)."""
    plain = b"first-record-" * 10 + b"LAST"
    command = ["encrypt", "-k", str(keyfile), "--record-size", "64"]
    sealed = subprocess.run(
        [sys.executable, "-m", "gcmstream", *command], input=plain, capture_output=True, check=True, env=env()
    ).stdout
    theirs, ours = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "decrypt", "-k", str(keyfile)],
        stdin=theirs,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
        preexec_fn=interruptible,
    )
    os.close(theirs)
    assert process.stdout is not None and process.stderr is not None
    try:
        os.write(ours, sealed)
        deadline = time.monotonic() + START_TIMEOUT
        while struct.unpack("i", fcntl.ioctl(ours, termios.FIONREAD, b"\0" * 4))[0]:  # not all read yet
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)  # and the read that looks for the end has begun
        status, elapsed = signal_and_time_the_exit(process, signum)
        written = process.stdout.read()
        check_the_end(process, status, code, elapsed)
    finally:
        os.close(ours)
        process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()
    final = len(plain) % 64 or 64
    # the records before FINAL, or fewer if the worker was given up first (_PIPE_STOP_WAIT)
    assert plain[:-final].startswith(written)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_output_is_created_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    """The signal arrives while the temporary output file is being created. In the event loop
    the CLI ran in before, SIGINT cancelled the task awaiting that creation in a thread, the
    file descriptor it returned was dropped, and a 0-byte ``.partial`` stayed (2 of 16 runs of
    a SIGINT timed for it). Run in this process, sent from inside the creation itself, each
    time: the command stops, exit status 130 or 143, nothing left."""
    from gcmstream._atomic import temporary_in as create

    from .helpers import run_cli

    keyfile, plain, out = tmp_path / "key", tmp_path / "plain", tmp_path / "out"
    assert run_cli("keygen", "-o", keyfile).status == 0
    plain.write_bytes(os.urandom(4096))
    out.mkdir()

    def create_then_signal(directory: int, mode: int, suffix: str = "") -> tuple[int, str]:
        made = create(directory, mode, suffix=suffix)
        os.kill(os.getpid(), signum)
        time.sleep(0.05)  # the signal is handled while the creation is still under way
        return made

    monkeypatch.setattr("gcmstream._output.temporary_in", create_then_signal)
    # SIGINT as a shell's foreground command has it (a runner may start the suite with it
    # ignored); the other handlers are this process's, put back by the command when it ends
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for command, source in (("encrypt", plain), ("decrypt", tmp_path / "sealed")):
            if command == "decrypt":
                monkeypatch.setattr("gcmstream._output.temporary_in", create)
                assert run_cli("encrypt", "-q", "-k", keyfile, plain, "-o", source).status == 0
                monkeypatch.setattr("gcmstream._output.temporary_in", create_then_signal)
            for _ in range(3):
                done = run_cli(command, "-q", "-k", keyfile, source, "-o", out / "file")
                expected = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED
                assert done.status == expected, done.stderr
                assert done.stderr.count("\n") == 1, done.stderr
                assert os.listdir(out) == []
    finally:
        signal.signal(signal.SIGINT, saved)


def test_sigint_as_the_temporary_file_appears_leaves_nothing(tmp_path: Path, keyfile: Path) -> None:
    """A real Ctrl-C sent the moment the output's temporary file appears (polled every
    millisecond), in six runs: each exits 130 within the bound, one line on stderr, no file
    left. (A poll lands after the creation, so this rarely met the event loop's window; the
    test above sends the signal inside the creation, in process, and fails on that code.)"""
    out = tmp_path / "out"
    out.mkdir()
    for _ in range(6):
        theirs, ours = os.pipe()[::-1]  # stdin held open and idle: the command waits in it
        try:
            with gcmstream("encrypt", "-k", keyfile, "-o", out / "file", stdin=theirs) as process:
                os.close(theirs)
                theirs = -1
                deadline = time.monotonic() + START_TIMEOUT
                while not os.listdir(out):
                    assert process.poll() is None and time.monotonic() < deadline
                    time.sleep(0.001)
                status, elapsed = signal_and_time_the_exit(process, signal.SIGINT)
                check_the_end(process, status, EXIT_INTERRUPTED, elapsed)
        finally:
            os.close(ours)
            if theirs >= 0:
                os.close(theirs)
        assert os.listdir(out) == []
