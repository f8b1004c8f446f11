"""CPU time of the command line's start-up: ``--version``, ``--help``, ``encrypt -k`` and ``decrypt -k``
of a 1 KiB file, beside ``python -c pass``, in interleaved runs (issue 25). CPU is user + sys of each child
(``os.wait4``); medians in ms. ``--before SRC`` adds the same commands run from another source
tree (e.g. ``git archive main | tar x -C /tmp/before``, then ``--before /tmp/before/src``).

    nice .venv/bin/python benchmarks/bench_startup.py --runs 21 --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def cpu_ms(argv: list[str], environ: dict[str, str]) -> float:
    """user + sys CPU of one run of ``argv`` (stdout and stderr to /dev/null)."""
    with open(os.devnull, "wb") as null:
        process = subprocess.Popen(argv, stdout=null, stderr=null, env=environ)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{argv} exited {process.returncode}")
    return (usage.ru_utime + usage.ru_stime) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--before", metavar="SRC", help="another source tree to compare with")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "plain").write_bytes(os.urandom(1024))
        key = work / "key"
        subprocess.run([sys.executable, "-m", "gcmstream", "keygen", "-o", str(key)], check=True)
        trees = {"after": str(SRC)}
        if options.before:
            trees = {"before": options.before, **trees}
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], dict(os.environ))
        }
        for name, src in trees.items():
            environ = {**os.environ, "PYTHONPATH": src}
            gcm = [sys.executable, "-m", "gcmstream"]
            commands[f"{name}: --version"] = ([*gcm, "--version"], environ)
            commands[f"{name}: --help"] = ([*gcm, "--help"], environ)
            sealed = work / f"sealed-{name}"
            given = [str(work / "plain")]
            if '"--input"' in (Path(src) / "gcmstream" / "cli.py").read_text():  # -i FILE up to 0.1.0
                given = ["-i", str(work / "plain")]
            encrypt = [*gcm, "encrypt", "-q", "-k", str(key), "-o", str(sealed), *given]
            commands[f"{name}: encrypt -k 1 KiB"] = (encrypt, environ)
            subprocess.run(encrypt, check=True, env=environ)  # the input of decrypt
            decrypt = [*gcm, "decrypt", "-q", "-k", str(key), "-o", str(work / f"back-{name}")]
            decrypt += ["-i", str(sealed)] if given[0] == "-i" else [str(sealed)]
            commands[f"{name}: decrypt -k 1 KiB"] = (decrypt, environ)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(options.runs):  # interleaved: a busy moment touches every command alike
            for name, (argv, environ) in commands.items():
                times[name].append(cpu_ms(argv, environ))
    floor = statistics.median(times["python -c pass"])
    print(f"| command | CPU median (ms) | min | max | x python -c pass |  ({options.runs} runs)")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | {median / floor:.2f} |")


if __name__ == "__main__":
    main()
