"""The command line's outputs under another user's symbolic link: ``keygen``/``identity`` with
``--force``, ``encrypt -o`` and ``decrypt -o`` all refuse it (exit 6, one line naming the path)
and write nothing through it or beside its target. Links and FIFOs are files, so those run in
process (``run_cli``: a process adds nothing to them); a terminal and ``/dev/stdout`` (this
process's own descriptor 1) run as real subprocesses (``python -m gcmstream``). The library's
side is tests/test_output.py."""

from __future__ import annotations

import errno
import os
import pty
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gcmstream import SameFileError, TruncatedStreamError, UnsupportedFormatError, pipeline, read_key_file
from gcmstream.cli import EXIT_CODES, EXIT_IO, EXIT_USAGE
from tests.helpers import run_cli
from tests.test_cli import TIMEOUT, env, one_line_error
from tests.test_cli import gcm_process as gcm

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    assert run_cli("keygen", "-o", path).status == 0
    return path


def command(name: str, keyfile: Path, folder: Path) -> tuple[str | Path, ...]:
    """The arguments of ``name`` up to (not including) its output path."""
    plain = folder / "plain"
    plain.write_bytes(b"secret data")
    if name == "keygen":
        return ("keygen", "--force", "-o")
    if name == "identity":
        return ("identity", "--force", "-o")
    if name == "encrypt":
        return ("encrypt", "-k", keyfile, plain, "-o")
    pipeline.encrypt_file(plain, folder / "cipher", key=read_key_file(keyfile))
    return ("decrypt", "-k", keyfile, folder / "cipher", "-o")


def plant(tmp_path: Path, shared_mode: int) -> tuple[Path, Path, Path]:
    """(their directory, the shared directory, shared/out -> their/bait), all but the shared
    directory owned by nobody."""
    theirs, shared = tmp_path / "their", tmp_path / "shared"
    theirs.mkdir()
    shared.mkdir()
    shared.chmod(shared_mode)
    bait = theirs / "bait"
    bait.write_bytes(b"theirs")
    bait.chmod(0o666)
    os.utime(bait, ns=(1_000_000_000, 1_000_000_000))
    os.chown(bait, NOBODY, NOBODY)
    os.chown(theirs, NOBODY, NOBODY)
    planted = shared / "out"
    planted.symlink_to(bait)
    os.lchown(planted, NOBODY, NOBODY)
    return theirs, shared, planted


def untouched(theirs: Path, shared: Path) -> None:
    bait = theirs / "bait"
    assert bait.read_bytes() == b"theirs"
    assert bait.stat().st_mtime_ns == 1_000_000_000
    assert sorted(p.name for p in theirs.iterdir()) == ["bait"]  # no temporary file beside it
    assert sorted(p.name for p in shared.iterdir()) == ["out"]
    assert (shared / "out").is_symlink() and os.lstat(shared / "out").st_uid == NOBODY


@needs_root
@pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["world-writable", "sticky-like-tmp"])
@pytest.mark.parametrize("name", ["keygen", "identity", "encrypt", "decrypt"])
def test_another_users_link_at_the_output_is_refused(
    tmp_path: Path, keyfile: Path, name: str, mode: int
) -> None:
    """Before the fix, keygen and identity with --force renamed the new secret over the
    link's target (their file, then holding our key and mode 0600, still theirs to read)."""
    args = command(name, keyfile, tmp_path)
    theirs, shared, planted = plant(tmp_path, mode)
    message = one_line_error(run_cli(*args, planted), EXIT_IO)
    assert str(planted) in message and "symbolic link owned by another user" in message
    untouched(theirs, shared)


@needs_root
@pytest.mark.parametrize("name", ["keygen", "identity"])
def test_another_users_link_behind_one_of_ours_is_refused(tmp_path: Path, keyfile: Path, name: str) -> None:
    args = command(name, keyfile, tmp_path)
    theirs, shared, planted = plant(tmp_path, 0o1777)
    (tmp_path / "mine").symlink_to(planted)
    message = one_line_error(run_cli(*args, tmp_path / "mine"), EXIT_IO)
    assert str(tmp_path / "mine") in message and "symbolic link owned by another user" in message
    untouched(theirs, shared)


@pytest.mark.parametrize("name", ["keygen", "identity"])
def test_a_link_of_ours_still_leads_to_its_target(tmp_path: Path, keyfile: Path, name: str) -> None:
    args = command(name, keyfile, tmp_path)
    (tmp_path / "target").write_bytes(b"old")
    (tmp_path / "link").symlink_to("target")
    result = run_cli(*args, tmp_path / "link")
    assert result.status == 0, result.stderr
    assert (tmp_path / "link").is_symlink()
    assert (tmp_path / "target").read_bytes() != b"old"
    assert stat.S_IMODE((tmp_path / "target").stat().st_mode) == 0o600
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file


@pytest.mark.parametrize("name", ["keygen", "identity"])
def test_a_secret_goes_to_a_regular_file_only(tmp_path: Path, keyfile: Path, name: str) -> None:
    """keygen -o FIFO --force replaced the FIFO (as root, -o /dev/null replaced /dev/null);
    now it is refused and '-o -' is the way to print a key."""
    args = command(name, keyfile, tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    message = one_line_error(run_cli(*args, fifo), EXIT_IO)
    assert str(fifo) in message and "refusing to write a secret into a FIFO" in message
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@needs_root
def test_another_users_link_to_a_terminal_is_refused_without_opening_it(
    tmp_path: Path, keyfile: Path
) -> None:
    """Before the fix encrypt opened -o by path, following any link, to ask whether it was a
    terminal (a write-intent open of whatever their link chose), and exited 2 for a terminal;
    now the one rule refuses their link first (exit 6) and isatty asks the descriptor opened."""
    args = command("encrypt", keyfile, tmp_path)
    controller, terminal = pty.openpty()
    try:
        planted = tmp_path / "tty"
        planted.symlink_to(os.ttyname(terminal))
        os.lchown(planted, NOBODY, NOBODY)
        message = one_line_error(gcm(*args, planted), EXIT_IO)
        assert str(planted) in message and "symbolic link owned by another user" in message
        os.lchown(planted, 0, 0)  # ours: followed, opened, and refused as a terminal
        assert "terminal" in one_line_error(gcm(*args, planted), EXIT_USAGE)
    finally:
        os.close(controller)
        os.close(terminal)


def run_to(stdout: int, *args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT,
        env=env(),
        check=False,
    )


def decrypted(wire: bytes, keyfile: Path, folder: Path) -> bytes:
    (folder / "wire").write_bytes(wire)
    pipeline.decrypt_file(folder / "wire", folder / "back", key=read_key_file(keyfile))
    return (folder / "back").read_bytes()


@needs_root
def test_dev_stdout_on_a_deleted_file_writes_into_it_never_to_its_name(tmp_path: Path, keyfile: Path) -> None:
    """/dev/stdout -> /proc/self/fd/1 -> "<path> (deleted)": before the fix that text was
    followed, and another user's file of that name was replaced by the output."""
    args = command("encrypt", keyfile, tmp_path)
    with tempfile.TemporaryFile(dir=tmp_path) as deleted:
        bait = Path(os.readlink(f"/proc/self/fd/{deleted.fileno()}"))
        bait.write_bytes(b"theirs")
        os.chown(bait, NOBODY, NOBODY)
        result = run_to(deleted.fileno(), *args, "/dev/stdout")
        assert result.returncode == 0, result.stderr
        deleted.seek(0)
        wire = deleted.read()
    assert decrypted(wire, keyfile, tmp_path) == b"secret data"
    assert bait.read_bytes() == b"theirs" and bait.stat().st_uid == NOBODY


def test_dev_stdout_appended_to_a_log_appends(tmp_path: Path, keyfile: Path) -> None:
    """``encrypt -o /dev/stdout >> log``: before the fix the log was replaced by a new file
    (its lines gone, its mode 0600); now it grows, as ``cat > /dev/stdout`` makes it grow."""
    args = command("encrypt", keyfile, tmp_path)
    log = tmp_path / "log"
    log.write_bytes(b"earlier lines\n")
    log.chmod(0o644)
    number = log.stat().st_ino
    with open(log, "ab") as appending:
        result = run_to(appending.fileno(), *args, "/dev/stdout")
    assert result.returncode == 0, result.stderr
    grown = log.read_bytes()
    assert grown.startswith(b"earlier lines\n")
    assert decrypted(grown[len(b"earlier lines\n") :], keyfile, tmp_path) == b"secret data"
    assert stat.S_IMODE(log.stat().st_mode) == 0o644 and log.stat().st_ino == number


def test_encrypt_o_replaces_an_existing_file_atomically_keygen_refuses_it(
    tmp_path: Path, keyfile: Path
) -> None:
    """README.md, where -o is described: `encrypt -o FILE` (and decrypt's) replaces an existing
    FILE with no --force, by a rename (a new file: the old one's mode and inode are not kept),
    and a failure leaves FILE as it was; only keygen and identity refuse an existing FILE."""
    args = command("encrypt", keyfile, tmp_path)
    out = tmp_path / "out"
    out.write_bytes(b"earlier")
    out.chmod(0o644)
    number = out.stat().st_ino
    assert run_cli(*args, out).status == 0
    assert decrypted(out.read_bytes(), keyfile, tmp_path) == b"secret data"
    assert out.stat().st_ino != number and stat.S_IMODE(out.stat().st_mode) == 0o600
    replaced = out.read_bytes()
    failed = run_cli("encrypt", "-k", keyfile, tmp_path / "missing", "-o", out)
    assert failed.status == EXIT_IO and out.read_bytes() == replaced
    for kind in ("keygen", "identity"):
        message = one_line_error(run_cli(kind, "-o", out), EXIT_USAGE)
        assert "exists; use --force" in message and out.read_bytes() == replaced
    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    assert "`encrypt -o FILE` and `decrypt -o FILE` replace an existing FILE atomically" in readme


# -- the output is a file the command reads (a new user's findings) ----------------------------


def shell(line: str, folder: Path) -> subprocess.CompletedProcess[bytes]:
    """``line`` run by sh in ``folder``, ``gcmstream`` there being this Python's module, and
    files capped at 1 MiB (``ulimit -f``): the old code wrote without end into ``F >> F``."""
    program = f"{sys.executable} -m gcmstream"
    return subprocess.run(
        ["sh", "-c", f"ulimit -f 2048; {line.replace('gcmstream', program)}"],
        cwd=folder,
        capture_output=True,
        timeout=TIMEOUT,
        env=env(),
        check=False,
    )


def test_stdout_redirected_onto_the_input_is_refused_before_reading(tmp_path: Path, keyfile: Path) -> None:
    """``encrypt -k K e.bin >> e.bin`` wrote for ever (6.3 GB in 10 s), ``encrypt -k K p.txt >
    p.txt`` exited 0 having encrypted the file the shell emptied, ``decrypt ... x > x`` blamed a
    cut file: each is now refused as ``-o F F`` is (exit 2), saying what cat says."""
    plain = tmp_path / "p.txt"
    key = f"-k {keyfile}"
    for line, emptied in (
        (f"gcmstream encrypt {key} e.bin >> e.bin", False),
        (f"gcmstream encrypt {key} < e.bin >> e.bin", False),
        (f"gcmstream info {key} e.bin >> e.bin", False),
        (f"gcmstream encrypt {key} p.txt > p.txt", True),
        (f"gcmstream decrypt {key} e.bin > e.bin", True),
        (f"gcmstream decrypt {key} < e.bin > e.bin", True),
    ):
        plain.write_bytes(b"secret data")
        pipeline.encrypt_file(plain, tmp_path / "e.bin", key=read_key_file(keyfile))
        wire = (tmp_path / "e.bin").read_bytes()
        run = shell(line, tmp_path)
        message = one_line_error(run, EXIT_USAGE)
        assert "the output (stdout) is the input file" in message, (line, message)
        assert ("the shell already emptied it" in message) == emptied, (line, message)
        if not emptied:  # nothing written: the file is as it was
            assert (tmp_path / "e.bin").read_bytes() == wire, line
    # another file: not refused by this rule
    assert shell(f"gcmstream encrypt {key} p.txt > other", tmp_path).returncode == 0
    assert shell(f"gcmstream encrypt {key} p.txt >> other", tmp_path).returncode == 0


def test_stdout_opened_read_write_on_the_input_is_not_said_to_be_emptied(
    tmp_path: Path, keyfile: Path
) -> None:
    """``encrypt F 1<>F`` was told "with '>' the shell already emptied it" though F is whole
    (``<>`` opens without emptying): it now says what would happen, and F is kept."""
    plain = tmp_path / "p.txt"
    plain.write_bytes(b"secret data")
    pipeline.encrypt_file(plain, tmp_path / "e.bin", key=read_key_file(keyfile))
    for line, kept in (
        (f"gcmstream encrypt -k {keyfile} p.txt 1<>p.txt", plain),
        (f"gcmstream decrypt -k {keyfile} e.bin 1<>e.bin", tmp_path / "e.bin"),
        (f"gcmstream info -k {keyfile} e.bin 1<>e.bin", tmp_path / "e.bin"),
    ):
        before = kept.read_bytes()
        message = one_line_error(shell(line, tmp_path), EXIT_USAGE)
        assert "nothing read (what is written would overwrite what is read)" in message, (line, message)
        assert kept.read_bytes() == before, line


def test_output_read_as_dev_stdin_is_named_by_its_path(tmp_path: Path, keyfile: Path) -> None:
    """``encrypt -o F /dev/stdin < F`` named "/dev/stdin" as both the input and the output (a
    review): the output is F, and the message says so. The usage table's row 2 names the rule."""
    (tmp_path / "p.txt").write_bytes(b"the only copy")
    run = shell(f"gcmstream encrypt -k {keyfile} -o p.txt /dev/stdin < p.txt", tmp_path)
    message = one_line_error(run, EXIT_USAGE)
    assert message == "gcmstream encrypt: /dev/stdin is p.txt, the output: give another -o\n"
    assert (tmp_path / "p.txt").read_bytes() == b"the only copy"
    assert "an output that is a file the command reads" in EXIT_CODES[EXIT_USAGE]


def test_stdout_redirected_onto_the_key_file_is_refused_and_the_key_kept(
    tmp_path: Path, keyfile: Path
) -> None:
    """``encrypt -k K p >> K``: the key file is read, so it is no place for the output."""
    (tmp_path / "p.txt").write_bytes(b"secret data")
    key = keyfile.read_bytes()
    message = one_line_error(
        shell(f"gcmstream encrypt -k {keyfile} p.txt >> {keyfile}", tmp_path), EXIT_USAGE
    )
    assert "the output (stdout) is the key file" in message
    assert keyfile.read_bytes() == key


def test_output_naming_a_key_identity_or_passphrase_file_read_is_refused(
    tmp_path: Path, keyfile: Path
) -> None:
    """``-o`` naming any file the command reads (a key, an identity, a recipients or passphrase
    file) is refused as ``-o F F`` is, before anything is written: the file survives."""
    plain = tmp_path / "plan.txt"
    plain.write_bytes(b"secret data")
    identity = tmp_path / "me.id"
    assert run_cli("identity", "-o", identity).status == 0
    recipients = tmp_path / "recipients"
    recipients.write_bytes(run_cli("recipient", identity).stdout)
    passphrase = tmp_path / "pass"
    passphrase.write_bytes(b"correct horse battery staple\n")
    passphrase.chmod(0o600)
    cipher = tmp_path / "cipher"
    pipeline.encrypt_file(plain, cipher, key=read_key_file(keyfile))
    for args, kept, what in (
        (("encrypt", "-i", identity, "-o", identity, plain), identity, "identity file"),
        (("encrypt", "-k", keyfile, "-o", keyfile, plain), keyfile, "key file"),
        (("decrypt", "-k", keyfile, "-o", keyfile, cipher), keyfile, "key file"),
        (("decrypt", "-i", identity, "-o", identity, cipher), identity, "identity file"),
        (
            ("encrypt", "--passphrase-file", passphrase, "-o", passphrase, plain),
            passphrase,
            "passphrase file",
        ),
        (("encrypt", "-R", recipients, "-o", recipients, plain), recipients, "recipients file"),
    ):
        before = kept.read_bytes()
        message = one_line_error(run_cli(*args), EXIT_USAGE)
        assert f"{kept} is both the {what} and the output: give another -o" in message, message
        assert kept.read_bytes() == before, args


def test_a_character_device_or_a_socket_is_never_the_same_file(tmp_path: Path, keyfile: Path) -> None:
    """``-o /dev/null < /dev/null`` and ``-o /dev/stdout`` with stdin and stdout one socket
    were refused as "the same file": what is read from a character device or a socket and
    what is written to it are separate streams (the rule: _output.refuse_same_file)."""
    run = shell(f"gcmstream encrypt -k {keyfile} -o /dev/null < /dev/null", tmp_path)
    assert run.returncode == 0, run.stderr
    assert shell(f"gcmstream encrypt -k {keyfile} /dev/null > /dev/null", tmp_path).returncode == 0
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.shutdown(socket.SHUT_WR)  # stdin: empty, ended
        process = subprocess.run(
            [sys.executable, "-m", "gcmstream", "encrypt", "-k", str(keyfile), "-o", "/dev/stdout"],
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
            stderr=subprocess.PIPE,
            timeout=TIMEOUT,
            env=env(),
            check=False,
        )
        theirs.close()
        assert process.returncode == 0, process.stderr
        sealed = b"".join(iter(lambda: ours.recv(65536), b""))
    assert decrypted(sealed, keyfile, tmp_path) == b""


def test_a_fifo_as_both_input_and_stdout_is_refused(tmp_path: Path, keyfile: Path) -> None:
    """``gcmstream encrypt ff 1<>ff`` was not caught (stdout not a regular file): it read its
    own output, and waited for ever on the empty FIFO. Refused now, as ``-o ff ff`` is."""
    os.mkfifo(tmp_path / "ff")
    for line, what in (
        ("gcmstream encrypt -k {key} ff 1<>ff", "input file, ff"),
        ("gcmstream encrypt -k {key} < ff 1<>ff", "input file, stdin"),
        ("gcmstream decrypt -k {key} ff 1<>ff", "input file, ff"),
    ):
        # `< ff` alone would wait for a writer: `0<>ff` opens it too, as `1<>ff` does
        run = shell(line.format(key=keyfile).replace("< ff", "0<>ff"), tmp_path)
        message = one_line_error(run, EXIT_USAGE)
        assert f"the output (stdout) is the {what}: nothing read (what is written would be read back)" in (
            message
        ), (line, message)
    message = one_line_error(shell(f"gcmstream encrypt -k {keyfile} -o ff ff", tmp_path), EXIT_USAGE)
    assert "ff is both the input and the output: give another -o" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="making a block device node needs root")
def test_a_block_device_as_both_input_and_stdout_is_refused(tmp_path: Path, keyfile: Path) -> None:
    """A block device is written in place, so it is "the same file" as a FIFO is: refused
    before it is opened (the node's device need not exist: it is never opened)."""
    os.mknod(tmp_path / "disk", stat.S_IFBLK | 0o600, os.makedev(7, 250))
    message = one_line_error(shell(f"gcmstream encrypt -k {keyfile} -o disk disk", tmp_path), EXIT_USAGE)
    assert "disk is both the input and the output: give another -o" in message


def test_a_full_output_is_named(tmp_path: Path, keyfile: Path) -> None:
    """A write error only a write gives (no space left) names the output: ``-o /dev/full`` or
    stdout; it said "No space left on device" alone, as if the input had failed."""
    args = command("encrypt", keyfile, tmp_path)
    full = f"gcmstream encrypt: /dev/full: {os.strerror(errno.ENOSPC)}\n"
    assert one_line_error(run_cli(*args, "/dev/full"), EXIT_IO) == full
    with open("/dev/full", "wb") as device:
        result = run_to(device.fileno(), *args[:-1])
    assert one_line_error(result, EXIT_IO) == f"gcmstream encrypt: stdout: {os.strerror(errno.ENOSPC)}\n"


def open_writer(fifo: Path, process: subprocess.Popen[bytes]) -> int:
    """``fifo`` opened for writing once ``process`` opened it for reading (ENXIO until then):
    a bounded wait that fails, rather than hangs, if the process ended first."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            time.sleep(0.01)
            continue
        os.set_blocking(writer, True)
        return writer
    raise AssertionError(f"the command never opened {fifo}: {process.communicate()}")


def _reap(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` if a step that failed left it running (a race test never leaves one)."""
    if process.poll() is None:
        process.kill()
        process.wait()


def test_an_output_made_a_link_to_the_input_while_the_passphrase_is_read_is_refused(tmp_path: Path) -> None:
    """The rule looked at the paths once, before the passphrase was read (here from a FIFO,
    which waits for its writer): ``-o out`` made a link to the input in that gap was then
    followed, and the rename replaced the input by its ciphertext (a hostile review). The rule
    is applied again to what is open, so the input is kept and the command exits 2."""
    plain, out, fifo = tmp_path / "plain", tmp_path / "out", tmp_path / "pass"
    plain.write_bytes(b"precious")
    os.mkfifo(fifo, 0o600)
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "encrypt", "--passphrase-file", fifo, "-o", out, plain],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    try:
        writer = open_writer(fifo, process)  # the command is reading the passphrase now
        out.symlink_to(plain)
        with open(writer, "wb") as passphrase:
            passphrase.write(b"correct horse battery staple\n")
        _, error = process.communicate(timeout=TIMEOUT)
    finally:
        _reap(process)
    message = error.decode()
    assert process.returncode == EXIT_USAGE, message
    assert message == f"gcmstream encrypt: {plain} is both the input and the output: give another -o\n"
    assert plain.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "pass", "plain"]


def an_idle_block_device() -> os.stat_result | None:
    """A block device of this machine, a loop device with nothing attached first (opening
    it fails, so even the old code could not read or write it)."""
    found: list[tuple[bool, str]] = []
    with os.scandir("/dev") as entries:
        for entry in entries:
            if stat.S_ISBLK(entry.stat(follow_symlinks=False).st_mode):
                size = Path(f"/sys/class/block/{entry.name}/size")
                idle = entry.name.startswith("loop") and size.exists() and size.read_text().strip() == "0"
                found.append((not idle, entry.path))
    return os.stat(min(found)[1]) if found else None


def test_two_nodes_of_one_block_device_are_the_same_file(tmp_path: Path, keyfile: Path) -> None:
    """Two device nodes of one block device (``mknod``) have two inodes but are one device, so
    one as the input and the other as the output is refused, as one node for both is; they
    were compared by inode only (a hostile review). Checked on the command line and in
    the library, before either is opened."""
    if os.geteuid() != 0:
        pytest.skip("making a block device node needs root")
    device = an_idle_block_device()
    if device is None:
        pytest.skip("no block device in /dev to make a second node of")
    for name in ("one", "two"):
        os.mknod(tmp_path / name, stat.S_IFBLK | 0o600, device.st_rdev)
    message = one_line_error(
        run_cli("decrypt", "-k", keyfile, "-o", tmp_path / "two", tmp_path / "one"), EXIT_USAGE
    )
    assert f"{tmp_path / 'one'} is both the input and the output: give another -o" in message
    with pytest.raises(SameFileError, match="is both the input file and the output"):
        pipeline.decrypt_file(tmp_path / "one", tmp_path / "two", key=read_key_file(keyfile))
    # another device is not the same file: whatever fails then, it is not this rule
    os.mknod(tmp_path / "other", stat.S_IFBLK | 0o600, os.makedev(os.major(device.st_rdev), 255))
    refused = (OSError, TruncatedStreamError, UnsupportedFormatError)  # (never SameFileError)
    with pytest.raises(refused):  # an idle loop device reads empty: a truncated stream
        pipeline.decrypt_file(tmp_path / "one", tmp_path / "other", key=read_key_file(keyfile))


def stopped_while_reading(process: subprocess.Popen[bytes], path: Path) -> None:
    """Stop ``process`` (SIGSTOP) once it has ``path`` open and its output's temporary file
    beside it: the rename that ends the command is then still to come. A bounded wait that
    fails, rather than hangs, if the process ended first."""
    deadline = time.monotonic() + TIMEOUT
    descriptors = Path(f"/proc/{process.pid}/fd")
    while time.monotonic() < deadline and process.poll() is None:
        try:
            reading = any(os.readlink(fd) == str(path) for fd in descriptors.iterdir())
        except OSError:  # a descriptor closed between the listing and its readlink
            reading = False
        if reading and any(p.name.endswith(".partial") for p in path.parent.iterdir()):
            process.send_signal(signal.SIGSTOP)
            return
        time.sleep(0.0005)
    raise AssertionError(f"the command never had {path} open with its output: {process.communicate()}")


def test_the_input_moved_onto_the_output_during_decrypt_offset_is_refused_and_kept(
    tmp_path: Path, keyfile: Path
) -> None:
    """``decrypt --offset`` looked at INPUT by its name only (it opened it by path after OUT,
    and the rule compared OUT with that path): ``mv IN OUT`` while it ran left rc 0, OUT the
    plaintext, and the ciphertext gone (a hostile review). INPUT is now opened first and the
    rule compares OUT with the file read: exit 2, the ciphertext kept at OUT's name."""
    plain, cipher, out = tmp_path / "plain", tmp_path / "cipher", tmp_path / "out"
    plain.write_bytes(os.urandom(1 << 25))  # 32 MiB: long enough to be caught reading it
    assert run_cli("encrypt", "-q", "-k", keyfile, "-o", cipher, plain).status == 0
    wire = cipher.read_bytes()
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", "decrypt", "-q", "-k", keyfile, "--offset=0", "-o", out, cipher],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    try:
        stopped_while_reading(process, cipher)
        cipher.rename(out)
        process.send_signal(signal.SIGCONT)
        _, error = process.communicate(timeout=TIMEOUT)
    finally:
        _reap(process)
    message = error.decode()
    assert process.returncode == EXIT_USAGE, message
    assert message == f"gcmstream decrypt: {cipher} is both the input and the output: give another -o\n"
    assert out.read_bytes() == wire
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "out", "plain"]


def wait_for_partial(folder: Path, process: subprocess.Popen[bytes]) -> None:
    """A bounded wait for the output's temporary file in ``folder`` (OUT is open)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        if any(p.name.endswith(".partial") for p in folder.iterdir()):
            return
        time.sleep(0.01)
    raise AssertionError(f"the command never opened its output: {process.communicate()}")


@pytest.mark.parametrize("kind", ["key", "identity", "passphrase"])
def test_a_key_identity_or_passphrase_file_moved_onto_the_output_is_refused_and_kept(
    tmp_path: Path, keyfile: Path, kind: str
) -> None:
    """The key, identity and passphrase files were compared with OUT by their path at the end:
    ``mv KEY OUT`` while the input was read left rc 0 and the only key file replaced by the
    output (a hostile review). Each is now compared as it was when it was read: exit 2, the
    file kept at OUT's name. The input is a FIFO, so the command waits on it, OUT open."""
    secret, out, fifo = tmp_path / "secret", tmp_path / "out", tmp_path / "in"
    data = b"the data"
    if kind == "key":
        secret.write_bytes(keyfile.read_bytes())
        args: tuple[str | Path, ...] = ("encrypt", "-k", secret)
    elif kind == "identity":
        assert run_cli("identity", "-o", secret).status == 0
        recipient = run_to(subprocess.PIPE, "recipient", secret).stdout.decode().strip()
        assert run_cli("encrypt", "-r", recipient, "-o", tmp_path / "sealed", keyfile).status == 0
        data = (tmp_path / "sealed").read_bytes()
        args = ("decrypt", "-i", secret)
    else:
        secret.write_bytes(b"correct horse battery staple\n")
        args = ("encrypt", "--passphrase-file", secret)
    secret.chmod(0o600)
    kept = secret.read_bytes()
    os.mkfifo(fifo, 0o600)
    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", *map(str, args), "-q", "-o", out, fifo],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    try:
        with open(open_writer(fifo, process), "wb") as writer:  # the secret was read by now
            writer.write(data)
            wait_for_partial(tmp_path, process)
            secret.rename(out)
        _, error = process.communicate(timeout=TIMEOUT)
    finally:
        _reap(process)
    message = error.decode()
    assert process.returncode == EXIT_USAGE, message
    assert (
        message == f"gcmstream {args[0]}: {secret} is both the {kind} file and the output: give another -o\n"
    )
    assert out.read_bytes() == kept


def test_stdout_onto_the_identity_or_key_file_of_recipient_listen_connect_is_refused(
    tmp_path: Path, keyfile: Path
) -> None:
    """``recipient ID >> ID`` (or ``1<>ID``) wrote the recipient line into the identity file,
    exit 0, and ``listen``/``connect -k K >> K`` would append what the peer sends to the key,
    where ``info`` refused: the same rule now applies to every command that writes stdout while
    reading a file (exit 2, the file kept). listen's address is taken (and connect's has no
    listener), so the old code failed there instead, on another exit status."""
    assert run_cli("identity", "-o", tmp_path / "ID").status == 0
    (tmp_path / "ID").chmod(0o600)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with taken:
        busy = taken.getsockname()[1]
        with socket.socket() as spare:  # a port with no listener: connect is refused there
            spare.bind(("127.0.0.1", 0))
            idle = spare.getsockname()[1]
        for line, kept, what in (
            ("gcmstream recipient ID >> ID", tmp_path / "ID", "identity file, ID"),
            ("gcmstream recipient ID 1<>ID", tmp_path / "ID", "identity file, ID"),
            ("gcmstream recipient - < ID >> ID", tmp_path / "ID", "identity file, stdin"),
            (f"gcmstream listen -k {keyfile} 127.0.0.1:{busy} >> {keyfile}", keyfile, "key file"),
            (f"gcmstream connect -k {keyfile} 127.0.0.1:{idle} >> {keyfile}", keyfile, "key file"),
        ):
            before = kept.read_bytes()
            message = one_line_error(shell(line, tmp_path), EXIT_USAGE)
            assert f"the output (stdout) is the {what}" in message, (line, message)
            assert "nothing read" in message, (line, message)
            assert message.endswith("; redirect stdout elsewhere\n"), (line, message)  # no -o to give
            assert kept.read_bytes() == before, line
    assert shell("gcmstream recipient ID >> other", tmp_path).returncode == 0


def test_dev_fd_of_a_descriptor_the_command_opened_itself_is_refused(tmp_path: Path, keyfile: Path) -> None:
    """``-o /dev/fd/N`` was written into as an inherited descriptor whatever N was: N the
    write end of the command's own signal wake-up pipe took the ciphertext, exit 0 (a hostile
    review). Only a descriptor open when the command began is one it was given: any other N
    is refused as not open (exit 6, as an N not open at all), and one given (``pass_fds``) is
    still written into."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"secret data")
    # /proc/thread-self/fd is a thread's view of the same table (another inode: it was taken
    # for another process's, and the wake-up pipe took the ciphertext, exit 0; rev8)
    for table in ("/dev/fd", "/proc/thread-self/fd"):
        for number in range(3, 12):  # none given: whatever the command opens lands in this range
            run = run_to(subprocess.PIPE, "encrypt", "-q", "-k", keyfile, "-o", f"{table}/{number}", plain)
            message = one_line_error(run, EXIT_IO)
            # one the command opened: not open as far as -o goes; none at all: no such entry
            ends = ("Bad file descriptor\n", "No such file or directory\n")
            assert message.endswith(ends), (table, number, message)
    # stdin and stderr closed by the shell: the stand-in opened for stderr (descriptor 0 then)
    # is the command's own, not given, so -o /dev/stdin is not written into it (rev8: exit 0)
    line = shlex.join(
        [
            sys.executable,
            "-m",
            "gcmstream",
            "encrypt",
            "-q",
            "-k",
            str(keyfile),
            "-o",
            "/dev/stdin",
            str(plain),
        ]
    )
    closed = subprocess.run(
        ["sh", "-c", f"{line} 0<&- 2>&-"], capture_output=True, timeout=TIMEOUT, env=env(), check=False
    )
    assert closed.returncode == EXIT_IO
    with open(tmp_path / "log", "ab") as log:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "gcmstream",
                "encrypt",
                "-q",
                "-k",
                keyfile,
                "-o",
                f"/dev/fd/{log.fileno()}",
                plain,
            ],
            pass_fds=(log.fileno(),),
            capture_output=True,
            timeout=TIMEOUT,
            env=env(),
            check=False,
        )
    assert run.returncode == 0, run.stderr
    assert decrypted((tmp_path / "log").read_bytes(), keyfile, tmp_path) == b"secret data"


def test_the_key_file_is_read_once_and_that_reading_is_the_one_compared(
    tmp_path: Path, keyfile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-k KEY`` was read twice, once to look at it (recorded for the same-file rule and its
    mode) and once more by name for the key: a file renamed onto KEY between the two was the
    key used while the rule compared OUT with the first (rev8: the key in use lost, exit 0).
    The key now comes from the one reading (the second reader is never called)."""
    import gcmstream.keyfile
    from gcmstream.cli import main

    def read_again(path: object) -> bytes:
        raise AssertionError(f"the key file was read again by name: {path}")

    monkeypatch.setattr(gcmstream.keyfile, "read_key_file", read_again)
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"data")
    assert main(["encrypt", "-q", "-k", str(keyfile), "-o", str(out), str(plain)]) == 0
    key = gcmstream.read_key_file(keyfile)  # (the package's own name: not the one patched)
    gcmstream.decrypt_file(out, tmp_path / "back", key=key)
    assert (tmp_path / "back").read_bytes() == b"data"
