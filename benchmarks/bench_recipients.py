"""Part recipients (issue 14): what sealing to public keys or a passphrase costs.

* **Header write and read** for 1, 10 and 100 recipients (X25519) and 1, 10 and 55 (the most a
  header holds) hybrid ML-KEM-768 + X25519 recipients, beside a pre-shared key's header: wall
  and CPU time per header, and its size. Write is ``Sealer(recipients=...)`` (file key, one
  HPKE seal per recipient, commitment). Read is an ``Opener`` given one identity whose stanza is
  the last (anonymous stanzas: it tries every one of its kind), fed the header and an empty
  FINAL record. "hostile read" is the bound: 10 identities, none matching, every stanza tried.
* **scrypt** at the default work factor (log2 N = 18, r = 8): sealing and opening a passphrase
  header, wall and CPU.
* **Record layer**: sealing and opening 32 MiB in 64 KiB records under a key file and under a
  recipient (hybrid) file, Sealer/Opener made outside the timing: the same record layer, so the
  ratio should be 1.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench_common import mbps, write_result

from gcmstream import Identity, NoIdentityMatchedError, Opener, RecipientKind, Sealer
from gcmstream.recipients import DEFAULT_WORK_FACTOR, MAX_IDENTITIES

Op = Callable[[], object]


def measure(fn: Op, reps: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``fn`` over ``reps`` runs, after one warm-up."""
    fn()
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def open_header(wire: bytes, hostile: bool = False, **keying: Any) -> None:
    opener = Opener(**keying)
    opener.receive_data(wire)
    try:
        end = opener.read()
    except NoIdentityMatchedError:
        if not hostile:
            raise
        return
    assert end == b""
    assert not hostile


def header_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    key = os.urandom(32)
    counts = {RecipientKind.X25519: (1, 2) if quick else (1, 10, 100)}
    counts[RecipientKind.MLKEM768_X25519] = (1, 2) if quick else (1, 10, 55)
    reps = 3 if quick else 15
    sealed_key = bytes(Sealer(key).seal(b"", final=True))
    write = measure(lambda: Sealer(key), reps)
    read = measure(lambda: open_header(sealed_key, key=key), reps)
    rows.append(
        {
            "kind": "pre-shared key",
            "recipients": 0,
            "header_bytes": len(Sealer(key).header),
            "write_s": write,
            "read_s": read,
            "hostile_read_s": None,
        }
    )
    strangers = {kind: [Identity.generate(kind) for _ in range(MAX_IDENTITIES)] for kind in RecipientKind}
    for kind, ns in counts.items():
        for n in ns:
            identities = [Identity.generate(kind) for _ in range(n)]
            recipients = [identity.recipient for identity in identities]
            wire = bytes(Sealer(recipients=recipients).seal(b"", final=True))
            header = Sealer(recipients=recipients).header
            write = measure(partial(Sealer, recipients=recipients), reps)
            read = measure(partial(open_header, wire, identities=identities[-1:]), reps)
            hostile = measure(partial(open_header, wire, True, identities=strangers[kind]), reps)
            rows.append(
                {
                    "kind": kind.text,
                    "recipients": n,
                    "header_bytes": len(header),
                    "write_s": write,
                    "read_s": read,
                    "hostile_read_s": hostile,
                }
            )
            print(
                f"   {kind.text:15} {n:4} recipients: header {len(header):6} B, write "
                f"{write[0] * 1e3:7.2f} ms, read {read[0] * 1e3:7.2f} ms, hostile read "
                f"{hostile[0] * 1e3:7.2f} ms (wall)",
                flush=True,
            )
    return rows


def scrypt_rows(quick: bool) -> list[dict[str, Any]]:
    work = 10 if quick else DEFAULT_WORK_FACTOR
    reps = 1 if quick else 3
    wire = bytes(Sealer(passphrase="benchmark", work_factor=work).seal(b"", final=True))
    write = measure(lambda: Sealer(passphrase="benchmark", work_factor=work), reps)
    read = measure(lambda: open_header(wire, passphrase="benchmark"), reps)
    print(
        f"   scrypt log2N={work}: write {write[0]:.2f} s wall {write[1]:.2f} s CPU, "
        f"read {read[0]:.2f} s wall {read[1]:.2f} s CPU",
        flush=True,
    )
    return [
        {
            "work_factor": work,
            "r": 8,
            "memory_mib": 128 * 8 * (1 << work) >> 20,
            "write_s": write,
            "read_s": read,
        }
    ]


def record_rows(quick: bool) -> list[dict[str, Any]]:
    size = (1 if quick else 32) * 1024 * 1024
    plain = os.urandom(size)
    key = os.urandom(32)
    identity = Identity.generate()
    reps = 2 if quick else 7
    keyings: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "key file": ({"key": key}, {"key": key}),
        "recipient file": ({"recipients": [identity.recipient]}, {"identities": [identity]}),
    }
    wires = {name: bytes(Sealer(**seal).seal(plain, final=True)) for name, (seal, _) in keyings.items()}
    header_sizes = {name: len(Sealer(**seal).header) for name, (seal, _) in keyings.items()}
    rows = []
    samples: dict[str, list[tuple[float, float]]] = {
        f"{n} {op}": [] for n in keyings for op in ("seal", "open")
    }
    for _ in range(reps):  # interleaved, so that load hits both alike
        for name, (seal, opening) in keyings.items():
            sealer = Sealer(**seal)
            samples[f"{name} seal"].append(_once(partial(sealer.seal, plain, final=True)))
            opener = Opener(**opening)
            opener.receive_data(wires[name][: header_sizes[name]])
            assert opener.header_verified()
            rest, out = wires[name][header_sizes[name] :], bytearray(size)
            samples[f"{name} open"].append(_once(partial(_drain, opener, rest, out)))
    for case, values in samples.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        rows.append({"case": case, "bytes": size, "wall_s": wall, "cpu_s": cpu, "mb_per_s": mbps(size, wall)})
        print(f"   {case:22} {mbps(size, wall):8.0f} MB/s wall, {mbps(size, cpu):8.0f} MB/s CPU", flush=True)
    return rows


def _once(fn: Op) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _drain(opener: Opener, rest: bytes, out: bytearray) -> None:
    opener.receive_data(rest)
    view = memoryview(out)
    got = 0
    while n := opener.readinto(view[got:]):
        got += n
    assert got == len(out)


def main(quick: bool = False) -> None:
    data = {
        "params": {"quick": quick, "default_work_factor": DEFAULT_WORK_FACTOR},
        "rows": [  # one list, each row naming its table
            *({"table": "headers", **row} for row in header_rows(quick)),
            *({"table": "scrypt", **row} for row in scrypt_rows(quick)),
            *({"table": "records", **row} for row in record_rows(quick)),
        ],
        "targets": {},
    }
    write_result("recipients", data, quick)
