"""Smoke test of every benchmark part: ``benchmarks/run.py --quick PART`` in a subprocess.

It only checks that each part runs and writes its results with the expected keys, so the
benchmarks never rot. No timing is asserted anywhere. Peers whose packages are missing (the
``bench`` extra: tink, trustme, memray, matplotlib) are skipped inside the part and recorded.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"

# slow: the parts that took over 2.5 s each (pytest --durations, 2 shared cores)
PARTS = [
    "seed",
    "allocs",
    "codec",
    pytest.param("sockets", marks=pytest.mark.slow),
    pytest.param("echo", marks=pytest.mark.slow),
    pytest.param("conns", marks=pytest.mark.slow),
    pytest.param("busy", marks=pytest.mark.slow),  # 5.5-9 s: six workers, 2 rounds
    # its accept loop starts six worker processes: 21 s of wall, 2.7 s of CPU at load 12
    pytest.param("handshake", marks=pytest.mark.slow),
    pytest.param("flood", marks=pytest.mark.slow),
    pytest.param("guard", marks=pytest.mark.slow),
    pytest.param("files", marks=pytest.mark.slow),
    "recipients",
    "tink",
]
COMMON_KEYS = {"part", "quick", "date", "machine", "params", "rows", "targets"}


@pytest.mark.parametrize("part", PARTS)
def test_quick_benchmark_writes_results(part: str, tmp_path: Path) -> None:
    env = dict(os.environ, GCMSTREAM_BENCH_RESULTS=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(RUN), part, "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    path = tmp_path / f"{part}.quick.json"
    assert path.exists(), proc.stdout + proc.stderr
    data = json.loads(path.read_text())
    assert set(data) >= COMMON_KEYS, sorted(data)
    assert data["part"] == part
    assert data["quick"] is True
    assert data["rows"], "a part must produce rows"
    for name, target in data["targets"].items():
        assert {"target", "met"} <= set(target), name
    for row in data["rows"]:  # a variant may only be skipped for a missing optional package
        error = row.get("error") if isinstance(row, dict) else None
        assert not error or "not installed" in error, f"{row.get('name')}: {error}"


@pytest.mark.slow  # about 3 s: three workers start, the watchdog kills them
def test_a_flood_run_past_its_time_limit_reports_a_time_out() -> None:
    """The flood's watchdog kills a run's workers after its time limit and the run raises
    TimeoutError, not the "worker ended before 'FLOOD '" of the killed worker's closed output
    (issue 24: slow runs were reported that way)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        bench_flood = importlib.import_module("bench_flood")
        bench_net = importlib.import_module("bench_net")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    work = bench_net.Workdir()
    try:
        with pytest.raises(TimeoutError, match=r"asyncio flood run timed out: not done within 1\.5 s"):
            # the baseline alone (3 s) outlasts the limit: the watchdog ends the run
            bench_flood.one_run(work, "asyncio", 1000, 3.0, 1.5)
    finally:
        work.close()
