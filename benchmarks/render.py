"""Render benchmarks/README.md's tables and benchmarks/chart.png from benchmarks/results/*.json.

``python benchmarks/render.py`` (``--quick`` renders the *.quick.json files to stdout only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
CHART = HERE / "chart.png"
PARTS = ["seed", "allocs", "codec", "sockets", "echo", "conns", "busy", "flood", "files", "recipients"]


def load(quick: bool) -> dict[str, dict[str, Any]]:
    out = {}
    for part in PARTS:
        path = RESULTS / (f"{part}.quick.json" if quick else f"{part}.json")
        if path.exists():
            out[part] = json.loads(path.read_text())
    return out


def _f(value: Any, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and value != value:
        return "n/a"
    text = f"{value:,.{digits}f}"
    return text + unit


def _size(n: int) -> str:
    return f"{n // 1048576} MiB" if n >= 1048576 else f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def seed_section(d: dict[str, Any]) -> str:
    p = d["params"]
    rows = []
    for r in d["rows"]:
        for kind in ("encrypt", "decrypt"):
            x = r[kind]
            rows.append(
                [
                    r["name"] if kind == "encrypt" else "",
                    kind,
                    _f(x["ns_op"] / 1000, 0, " us"),
                    _f(x["MB_s"]),
                    _f(x["bytes"]),
                    _f(x["allocs"], 1),
                    _f(x["native_allocs"], 1),
                    _f(x["tm_peak_bytes"]),
                    _f(r["decrypt_encrypt_ratio"], 2) if kind == "decrypt" else "",
                ]
            )
    head = [
        "implementation",
        "op",
        "time/op",
        "MB/s",
        "B/op (memray)",
        "allocs/op (memray)",
        "of which native",
        "tracemalloc peak B",
        "decrypt/encrypt",
    ]
    copy = d.get("memcpy_in_out_ns")
    notes = "\n".join(f"- {n}" for n in d.get("notes", []))
    return (
        f"## 1. Seed workload\n\n{_size(p['plaintext_bytes'])} plaintext, {p['context_bytes']}-byte "
        f"context / associated data, {p['key_bytes']}-byte key, gcmstream record size "
        f"{_size(p['record_size'])}; median of {p['reps']} interleaved repetitions.\n\n"
        + table(head, rows)
        + "\n\n"
        "- **both allocate**: gcmstream `encrypt` is a new Sealer's `seal(plaintext, final=True)`, "
        "which allocates its output; `decrypt` gives a new Opener the ciphertext as `bytes` (held by "
        "reference, whole records opened where they lie) and reads with `readinto` into a "
        "`bytearray` made inside the operation. Raw `encrypt`/`decrypt` allocate likewise.\n"
        "- **both preallocated**: 256 KiB pieces; encrypt seals into the Sealer's reusable output, "
        "decrypt feeds `bytes` pieces and reads into a preallocated buffer; raw `*_into` likewise.\n"
        "- **copied into the ring**: decrypt fed through `get_buffer()`/`buffer_updated(n)` (the "
        "copy a socket's `recv_into` makes), read into a preallocated buffer.\n"
        f"- The allocation of the 10 MiB output alone (zeroed, page faults included) took "
        f"{_f((d.get('alloc_output_ns') or 0) / 1000, 0)} us; the two memcpys of the ring path "
        f"(ciphertext in, plaintext out) {_f((copy or 0) / 1000, 0)} us.\n"
        "- B/op and allocs/op: memray, every allocation call in the operation (native `malloc` "
        "family, where OpenSSL and cryptography's Rust code allocate, plus Python's pymalloc), "
        "short-lived ones included, minus a no-op loop; 'of which native' is the malloc family "
        "only. tracemalloc sees only Python's allocator; its column is the Python-heap peak "
        "during one operation.\n" + notes + "\n"
    )


def allocs_section(d: dict[str, Any]) -> str:
    rows = []
    for r in d["rows"]:
        raw, rin, rv = r["raw_decrypt_into"], r["gcmstream_readinto"], r["gcmstream_read_view"]
        lib = r.get("gcmstream_readinto_library_only", {})
        lib256 = r.get("gcmstream_readinto_256k_library_only", {})
        rows.append(
            [
                _size(r["record_size"]),
                f"{_f(raw['native_allocs'], 1)} / {_f(raw['native_bytes'])}",
                f"{_f(raw['allocs'], 1)} / {_f(raw['bytes'])}",
                f"{_f(lib.get('native_allocs'), 1)} / {_f(lib.get('native_bytes'))}",
                f"{_f((lib.get('native_allocs') or 0) + (lib.get('python_allocs') or 0), 1)} / "
                f"{_f((lib.get('native_bytes') or 0) + (lib.get('python_bytes') or 0))}",
                f"{_f(lib.get('python_allocs'), 1)} / {_f(lib.get('python_bytes'))}",
                f"{_f(lib256.get('python_allocs'), 1)} / {_f(lib256.get('python_bytes'))}",
                f"{_f(rin['allocs'], 1)} / {_f(rin['bytes'])}",
                f"{_f(rv['allocs'], 1)} / {_f(rv['bytes'])}",
                _f(rin["tm_net_bytes"], 1),
            ]
        )
    head = [
        "record",
        "raw decrypt_into native (allocs / B)",
        "raw decrypt_into all",
        "gcmstream open, native",
        "gcmstream open, all (library frames)",
        "of which Python, one record per readinto",
        "of which Python, 256 KiB readinto",
        "readinto path incl. feeding loop",
        "read_view path incl. feeding loop",
        "retained B (tracemalloc)",
    ]
    text = (
        "## 2. Allocations per record against record size\n\n"
        "Steady state (the Opener already holds its ring), per record. 'library frames': memray "
        "allocations whose innermost Python frame is in `src/gcmstream` (the benchmark's own "
        "feeding loop, which stands in for the transport, excluded). 'incl. feeding loop': "
        "everything in the step minus a no-op loop. Python columns: pymalloc allocations in "
        "library frames, reading one record per `readinto` call, or into a 256 KiB buffer as the "
        "codec and socket parts do.\n\n" + table(head, rows) + "\n"
    )
    cost = d.get("memray_call_cost")
    if cost:
        text += (
            f"\nmemray's own share: under memray every Python function call allocated "
            f"{_f(cost['allocs_per_call'], 2)} blocks / {_f(cost['bytes_per_call'])} B (a frame object "
            "its stack tracking materialises; untraced CPython 3.11 makes no allocation for a call), "
            "measured in this run as a loop calling an empty function minus the bare loop. Each "
            "library call on the path is counted at that price.\n"
        )
    attr = d.get("attribution", {})
    key = "65536" if "65536" in attr else next(iter(attr), None)
    if key:
        arows = [
            [
                f"`{a['site']}`",
                f"`{a['code'][:70]}`",
                a["allocator"],
                _f(a["allocs_per_record"], 2),
                _f(a["bytes_per_record"]),
            ]
            for a in attr[key]
            if a["site"].startswith("gcmstream/")
        ][:16]
        text += (
            f"\nWhere the open path allocates at {_size(int(key))} records (readinto path, memray, "
            "innermost gcmstream frame, per record):\n\n"
            + table(["site", "code", "allocator", "allocs", "B"], arows)
            + "\n"
        )
    return text


def codec_section(d: dict[str, Any]) -> str:
    names = [
        "gcmstream seal",
        "raw encrypt_into",
        "gcmstream open (bytes in) readinto",
        "gcmstream open (ring) readinto",
        "gcmstream open (ring) read_view",
        "raw decrypt_into (fresh stream)",
        "raw decrypt_into (cache-hot)",
        "memcpy feed",
        "cobblestone decrypt update_into",
    ]
    rows = []
    for r in d["rows"]:
        m = r["MB_s"]
        der = r["derived"]
        rows.append(
            [_size(r["record_size"])]
            + [_f(m.get(n)) for n in names]
            + [
                _f(der["open_bytes_vs_fresh_raw"], 2),
                _f(der["open_ring_readinto_vs_fresh_raw"], 2),
                _f(der.get("open_bytes_vs_cobblestone"), 2),
                _f(der["seal_vs_raw"], 2),
            ]
        )
    head = [
        "record",
        *names,
        "open (bytes in) / fresh raw",
        "open (ring) / fresh raw",
        "open (bytes in) / Cobblestone",
        "seal / raw",
    ]
    p = d["params"]
    return (
        "## 3. Codec throughput (MB/s of plaintext, no I/O)\n\n"
        f"{_size(p['volume_bytes'])} per operation, median of {p['reps']} interleaved repetitions. "
        f"`open (bytes in)`: the stream given in {_size(p.get('feed', 262144))} `bytes` pieces (whole "
        "records opened where they lie, split ones copied), read with `readinto` into a "
        f"{_size(p['app_buffer'])} buffer. `open (ring)`: fed through `get_buffer`/`buffer_updated` "
        "(the copy a socket's `recv_into` makes). Raw `decrypt_into` writes into the same "
        "application buffer, over a fresh stream (ciphertext no earlier call touched) or the same "
        "cache-hot volume every call. Cobblestone has one chunk size (16 KiB); its figure is "
        "repeated on every row as measured in that row's run. `memcpy feed`: the copy into the "
        "ring alone.\n\n" + table(head, rows) + "\n"
    )


def sockets_section(d: dict[str, Any]) -> str:
    rows = []
    base = {r["name"]: r["MB_s"] for r in d["rows"]}
    tls = base.get("asyncio TLS 1.3")
    for r in d["rows"]:
        cipher = r["cipher"][0] if r.get("cipher") else ""
        note = r.get("error") or cipher
        rows.append(
            [
                r["name"],
                _f(r["MB_s"]),
                _f(r["MB_s"] / tls, 2) if r["MB_s"] and tls else "n/a",
                _f(r.get("receiver_cpu_ms_per_mib"), 2),
                _f(r.get("sender_cpu_ms_per_mib"), 2),
                note or "",
            ]
        )
    p = d["params"]
    return (
        f"## 4. Loopback sockets, {_size(p['bytes'])} one way\n\n"
        f"Receiver and sender in two processes{' pinned to two cores' if p.get('pinned') else ''}; "
        f"median of {p['reps']} interleaved runs; {_size(p['chunk'])} writes and reads; the "
        "receiver times first byte to end of stream. CPU ms/MiB: each process's user + system "
        "time while the data moved (receiver: first byte to end; sender: its send loop) per MiB. "
        "Wall-clock MB/s on this shared machine flips between regimes from run to run; CPU per "
        "MiB is the steadier comparison.\n\n"
        + table(
            [
                "path",
                "MB/s",
                "x asyncio TLS",
                "receiver CPU ms/MiB",
                "sender CPU ms/MiB",
                "negotiated suite / note",
            ],
            rows,
        )
        + "\n"
        + _floors(d.get("floors", {}))
    )


def _floors(f: dict[str, Any]) -> str:
    if "receiver_floor_ms_per_mib" not in f:
        return ""
    return (
        "\nFloors, same run: raw `decrypt_into` "
        f"{_f(f['decrypt_into_cpu_s_per_mib'] * 1e3, 2)} ms/MiB and `encrypt_into` "
        f"{_f(f['encrypt_into_cpu_s_per_mib'] * 1e3, 2)} ms/MiB (64 KiB records, fresh stream, in "
        "the orchestrating process). Receiver floor = plain BufferedProtocol receiver + raw "
        f"`decrypt_into` = {_f(f['receiver_floor_ms_per_mib'], 2)} ms/MiB; sender floor = plain "
        f"sender + raw `encrypt_into` = {_f(f['sender_floor_ms_per_mib'], 2)} ms/MiB, so a sender "
        f"whose core does only that is bound at {_f(f['sender_bound_ceiling_MB_s'])} MB/s (the "
        "sender-bound ceiling).\n"
    )


def echo_section(d: dict[str, Any]) -> str:
    sizes = [str(s) for s in d["params"]["sizes"]]
    rows = [
        [r["name"]] + [_f(r["median_us"].get(s), 1) for s in sizes] + [r.get("error") or ""]
        for r in d["rows"]
    ]
    return (
        "## 5. Echo round trip (median us)\n\n"
        f"{d['params']['round_trips']} round trips per size and run, "
        f"median of {d['params']['reps']} runs.\n\n"
        + table(["path", *[_size(int(s)) for s in sizes], "note"], rows)
        + "\n"
        + (
            "\ngcmstream codec CPU per message on one side, no I/O (seal + flush, then "
            "receive_data + read; a round trip pays it twice): "
            + ", ".join(
                f"{_size(int(k))} {_f(v, 1)} us" for k, v in d["codec_us_per_message_per_side"].items()
            )
            + ".\n"
            if d.get("codec_us_per_message_per_side")
            else ""
        )
    )


def _when(d: dict[str, Any]) -> str:
    """When a part ran, on what and how loaded: its own line, for a part rerun alone."""
    source = d.get("source", {})
    dirty = " with uncommitted changes in src/" if source.get("src_dirty") else ""
    return (
        f"Run {d['date']}, commit {source.get('commit', '?')}{dirty}, 1-minute load average "
        f"{d['loadavg'][0]:.1f} when it ended."
    )


def conns_section(d: dict[str, Any]) -> str:
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append([r["name"], "n/a", "n/a", "n/a", "n/a", r["error"]])
            continue
        idle, used = r["server_idle"], r["server_used"]
        rows.append(
            [
                r["name"],
                _f(r["server_rss_per_conn_idle"] / 1024, 1),
                _f(r["server_rss_per_conn_used"] / 1024, 1),
                str(idle.get("rings", "")),
                str(used.get("sealer_output_buffers", "")),
                "",
            ]
        )
    n = d["params"]["connections"]
    return (
        f"## 6. Memory per connection ({n} connections)\n\n"
        "Server process RSS growth per connection after the handshakes (idle) and after each "
        f"connection echoed one {d['params']['message']}-byte message (lightly used); rings and "
        "sealer output buffers counted in the server with `gc.get_objects()` (a sealer's "
        "output buffer starts at 256 bytes). Command: `python benchmarks/run.py conns`. "
        f"{_when(d)}\n\n"
        + table(
            [
                "server",
                "KiB/conn idle",
                "KiB/conn used",
                "rings when idle",
                "sealer buffers when used",
                "note",
            ],
            rows,
        )
        + "\n"
    )


def _ratio_spread(spread: dict[str, float] | None) -> str:
    """A median ratio and its min-max; n/a for a result written before the column existed."""
    if not spread:
        return "n/a"
    return f"{spread['median']:.2f} ({spread['min']:.2f}-{spread['max']:.2f})"


def busy_section(d: dict[str, Any]) -> str:
    p = d["params"]
    busy = p["busy"]
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append([r["name"]] + ["n/a"] * 11 + [r["error"]])
            continue
        cpu, wall = r["cpu_ratio"], r["wall_ratio"]
        rows.append(
            [
                r["name"],
                _f(r["cpu_ms_per_mib_1"], 3),
                _f(r["cpu_ms_per_mib_busy"], 3),
                f"**{cpu['median']:.2f}** ({cpu['min']:.2f}-{cpu['max']:.2f})",
                _f(r["cpu_ms_per_mib_busy"] - r["cpu_ms_per_mib_1"], 3),
                f"{_f(r.get('sys_ms_per_mib_1'), 3)} / {_f(r.get('sys_ms_per_mib_busy'), 3)}",
                _ratio_spread(r.get("user_ratio")),
                _f(r["wall_ms_per_mib_1"], 3),
                _f(r["wall_ms_per_mib_busy"], 3),
                _ratio_spread(wall),
                f"{_f(r.get('reads_per_mib_1'), 0)} / {_f(r.get('reads_per_mib_busy'), 0)}",
                f"{_f(r.get('page_faults_per_mib_1'), 0)} / {_f(r.get('page_faults_per_mib_busy'), 0)}",
                "",
            ]
        )
    return (
        f"## 6b. Server CPU per MiB, 1 against {busy} busy connections\n\n"
        f"A server process (one core) receives {p['total_bytes'] >> 20} MiB of fresh random data "
        f"written {p['write'] // 1024} KiB at a time by a client process, over one connection and "
        f"over {busy} at once (each its share); its handlers only read ({p['read'] // 1024} KiB) "
        "and count (reads/MiB: how many reads returned data; page faults: the server's minor "
        "faults, fresh memory touched). Server CPU (getrusage, user + sys; user CPU ratio: "
        "the same ratio without the kernel's share) "
        "and wall from the first byte read to the "
        f"last, {p['rounds']} rounds, servers interleaved; ratio = the round's {busy}-connection "
        "figure over its one-connection neighbour, median of rounds (min-max). Command: "
        f"`python benchmarks/run.py busy`. {_when(d)}\n\n"
        + table(
            [
                "server",
                "CPU ms/MiB, 1",
                f"CPU ms/MiB, {busy}",
                "CPU ratio",
                "CPU added ms/MiB",
                f"sys ms/MiB, 1 / {busy}",
                "user CPU ratio",
                "wall ms/MiB, 1",
                f"wall ms/MiB, {busy}",
                "wall ratio",
                f"reads/MiB, 1 / {busy}",
                f"page faults/MiB, 1 / {busy}",
                "note",
            ],
            rows,
        )
        + "\n"
    )


def flood_section(d: dict[str, Any]) -> str:
    p = d["params"]
    rows = []
    for r in d["rows"]:
        base, flood = r["baseline"], r["flood"]
        rows.append(
            [
                r["name"],
                _f(base["worst_ms"], 1),
                _f(base["median_ms"], 2),
                _f(base["p99_ms"], 1),
                _f(flood["worst_ms"], 1),
                _f(flood["median_ms"], 2),
                _f(flood["p99_ms"], 1),
                f"{base['count']} / {flood['count']}",
                ", ".join(_f(s, 1) for s in r["flood_seconds"]),
                ", ".join(_f(c, 1) for c in r["server_cpu_us_per_record"]),
                r.get("error") or "",
            ]
        )
    return (
        "## 7. Echo under a flood of one-byte records (ms)\n\n"
        f"A peer with the key announces {_size(p['record_size_announced'])} records and sends "
        f"{p['records']:,} one-byte records (then FINAL) at once, while an echo client "
        f"({p['message']}-byte messages) measures round trips on another connection to the same "
        f"server; the no-flood baseline is the same client in the {p['baseline_s']:g} s before "
        f"the flood, same run. Only the server runs on the loop named; {p['reps']} runs per loop, "
        "interleaved, round trips pooled. Command: `python benchmarks/run.py flood`. "
        f"{_when(d)}\n\n"
        + table(
            [
                "server loop",
                "no flood: worst",
                "median",
                "p99",
                "flood: worst",
                "median",
                "p99",
                "round trips (base / flood)",
                "flood lasted (s)",
                "server CPU us / record",
                "note",
            ],
            rows,
        )
        + (
            f"\n\nThe codec's own CPU per flood record (the same wire fed to an Opener in the pieces "
            f"its ring offers and read as the server reads it, no sockets): "
            f"{_f(d['codec_cpu_us_per_record'], 1)} us.\n"
            if d.get("codec_cpu_us_per_record") is not None
            else ""
        )
        + "\n"
    )


def files_section(d: dict[str, Any]) -> str:
    rows = []
    for r in d["rows"]:
        if "reads_per_s" in r:
            reads = r["reads_per_s"]
            rows.append(
                [r["name"], f"open_file {_f(reads['open_file'])}/s", f"floor {_f(reads['floor'])}/s", ""]
            )
            continue
        rss = _f(r["rss_kib_max"] / 1024, 1) if "rss_kib_max" in r else "-"
        rows.append([r["name"], _f(r["wall"] * 1000), _f(r["cpu"] * 1000), rss])
    p = d["params"]
    return (
        f"## 8. Files ({_size(p['bytes'])} in {p['dir']}, median of {p['reps']}; {p['age']})\n\n"
        "Commands run as subprocesses, interleaved: the CLI to /dev/null (and to a tmpfs file), "
        "the floor (a Python process reading the file with readinto, raw AESGCM encrypt_into or "
        "decrypt_into per 64 KiB record into a reused buffer, os.write to /dev/null), and age. "
        "Random reads: 4 KiB at random offsets through `open_file`, against os.pread of the "
        "records each read touches plus raw decrypt_into. Both cores (issue 25): the CLI with "
        "`--jobs 1` and `--jobs 2`, the floor and rage (pyrage, if importable: bench-only), each "
        "from a tmpfs file to a tmpfs file.\n\n"
        + table(["command", "wall ms", "CPU ms", "peak RSS MiB"], rows)
        + "\n"
    )


def _table(d: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [row for row in d["rows"] if row.get("table") == name]


def recipients_section(d: dict[str, Any]) -> str:
    def ms(pair: list[float] | None) -> str:
        return "" if pair is None else f"{pair[0] * 1e3:.2f} ({pair[1] * 1e3:.2f})"

    headers = [
        [
            r["kind"],
            str(r["recipients"]),
            f"{r['header_bytes']:,}",
            ms(r["write_s"]),
            ms(r["read_s"]),
            ms(r["hostile_read_s"]),
        ]
        for r in _table(d, "headers")
    ]
    scrypt = [
        [
            f"2^{r['work_factor']}, r = {r['r']}",
            f"{r['memory_mib']} MiB",
            f"{r['write_s'][0]:.2f} ({r['write_s'][1]:.2f})",
            f"{r['read_s'][0]:.2f} ({r['read_s'][1]:.2f})",
        ]
        for r in _table(d, "scrypt")
    ]
    records = [
        [r["case"], _f(r["mb_per_s"]), _f(r["bytes"] / r["cpu_s"] / 1e6)] for r in _table(d, "records")
    ]
    return (
        "## 9. Recipients and passphrases (issue 14)\n\n"
        "`nice -n 5 python benchmarks/run.py recipients` (1-minute load average "
        f"{d['loadavg'][0]:.1f} when it ended). Header cost, wall ms (CPU ms) per header, median. "
        "Read: one identity whose stanza is the last; hostile read: 10 identities, none "
        "matching, so every stanza of their kind is tried (the reader's bound).\n\n"
        + table(["kind", "recipients", "header bytes", "write", "read", "hostile read"], headers)
        + "\n\nscrypt, seconds wall (CPU) to seal and to open a passphrase header:\n\n"
        + table(["N", "memory", "write", "read"], scrypt)
        + f"\n\nRecord layer, {_table(d, 'records')[0]['bytes'] >> 20} MiB in 64 KiB records, header "
        "excluded, cases interleaved:\n\n" + table(["case", "MB/s wall", "MB/s CPU"], records) + "\n"
    )


def targets_section(data: dict[str, dict[str, Any]]) -> str:
    rows = []
    for part in PARTS:
        for name, t in data.get(part, {}).get("targets", {}).items():
            value = t.get("value")
            shown = _f(value, 2) if isinstance(value, float) else str(value)
            if value is None and isinstance(t.get("per_size"), dict):
                shown = ", ".join(f"{_size(int(k))}: {v}" for k, v in t["per_size"].items())
            rows.append([part, name, t["target"], shown, "met" if t["met"] else "**short**"])
    return "## Targets\n\n" + table(["part", "target", "wanted", "figure", ""], rows) + "\n"


def chart(data: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    codec, allocs = data.get("codec"), data.get("allocs")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    if codec:
        sizes = [r["record_size"] for r in codec["rows"]]
        for name, style in (
            ("gcmstream open (bytes in) readinto", "o-"),
            ("gcmstream open (ring) readinto", "o--"),
            ("gcmstream seal", "s-"),
            ("raw decrypt_into (fresh stream)", "^-"),
            ("raw encrypt_into", "^--"),
        ):
            ax1.plot(sizes, [r["MB_s"][name] for r in codec["rows"]], style, label=name)
        cob = [r["MB_s"].get("cobblestone decrypt update_into") for r in codec["rows"]]
        if any(cob):
            vals = [c for c in cob if c]
            ax1.plot(
                [16384],
                [sorted(vals)[len(vals) // 2]],
                "D",
                markersize=9,
                label="Cobblestone decrypt (16 KiB chunks)",
            )
        ax1.set_xscale("log", base=2)
        ax1.set_xlabel("record size (bytes)")
        ax1.set_ylabel("MB/s of plaintext")
        ax1.set_title("Codec throughput (no I/O)")
        ax1.legend(fontsize=8)
        ax1.grid(True, alpha=0.3)
    if allocs:
        sizes = [r["record_size"] for r in allocs["rows"]]
        raw = [r["raw_decrypt_into"]["bytes"] for r in allocs["rows"]]
        lib = [
            (r.get("gcmstream_readinto_library_only") or {}).get("native_bytes", 0)
            + (r.get("gcmstream_readinto_library_only") or {}).get("python_bytes", 0)
            for r in allocs["rows"]
        ]
        native = [
            (r.get("gcmstream_readinto_library_only") or {}).get("native_bytes", 0) for r in allocs["rows"]
        ]
        ax2.plot(sizes, lib, "o-", label="gcmstream open, all allocations (library frames)")
        ax2.plot(sizes, native, "o--", label="gcmstream open, native allocations")
        ax2.plot(sizes, raw, "^-", label="raw decrypt_into (floor)")
        ax2.plot(sizes, [b + 256 for b in raw], ":", color="grey", label="target: floor + 256 B")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("record size (bytes)")
        ax2.set_ylabel("bytes allocated per record (memray)")
        ax2.set_ylim(bottom=0)
        ax2.set_title("Allocations per record on the open path")
        ax2.legend(fontsize=8)
        ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def render(data: dict[str, dict[str, Any]], with_chart: bool) -> str:
    first = next(iter(data.values()), None)
    machine = first["machine"] if first else {}
    dates = sorted(d["date"] for d in data.values())
    loads = ", ".join(f"{p} {d['loadavg'][0]:.2f}" for p, d in data.items())
    commits = sorted({d.get("source", {}).get("commit", "?") for d in data.values()})
    dirty = any(d.get("source", {}).get("src_dirty") for d in data.values())
    parts = [
        "# gcmstream benchmarks\n",
        "gcmstream side by side with what a user would pick instead and with the physical floor "
        "(raw `AESGCM`), in one run on one machine. Absolute times on these machines drift "
        "between runs; read the ratios, which come from cases interleaved in the same run.\n",
        "```sh\nmake bench                               # every part (< 10 min), then this file\n"
        "python benchmarks/run.py codec            # one part alone\n"
        "python benchmarks/run.py --quick          # every part on tiny sizes: a smoke test\n"
        "nice -n 5 python benchmarks/run.py files  # part 8, files: 1 GiB in /dev/shm (needs 5 GiB there), "
        "age if installed\n"
        "python benchmarks/render.py               # tables and chart from benchmarks/results/*.json\n```\n",
        f"**Run:** {dates[0] if dates else ''} .. {dates[-1] if dates else ''}, command "
        "`python benchmarks/run.py` (= `make bench`). **Machine:** "
        f"{machine.get('cpu', '?')}, {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}, "
        f"cryptography {machine.get('cryptography', '?')} ({machine.get('openssl', '?')}), "
        f"{machine.get('platform', '?')}. Source: commit {', '.join(commits)}"
        f"{' (with uncommitted changes in src/)' if dirty else ''}. "
        f"1-minute load average when each part ended: {loads}. "
        "Absolute figures, above all the socket and echo wall-clock figures, are noisy on this "
        "shared machine; CPU per byte and allocation counts are steadier.\n",
    ]
    if with_chart:
        parts.append("![throughput and allocations against record size](chart.png)\n")
    parts.append(targets_section(data))
    parts.append("NOTES_PLACEHOLDER\n")
    for part, fn in (
        ("seed", seed_section),
        ("allocs", allocs_section),
        ("codec", codec_section),
        ("sockets", sockets_section),
        ("echo", echo_section),
        ("conns", conns_section),
        ("busy", busy_section),
        ("flood", flood_section),
        ("files", files_section),
        ("recipients", recipients_section),
    ):
        if part in data:
            parts.append(fn(data[part]))
        else:
            parts.append(f"## {part}\n\nNo results yet (`python benchmarks/run.py {part}`).\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="render *.quick.json to stdout")
    args = parser.parse_args(argv)
    data = load(args.quick)
    if not data:
        print("no results: run benchmarks/run.py first", file=sys.stderr)
        return 1
    if args.quick:
        print(render(data, with_chart=False).replace("NOTES_PLACEHOLDER\n", ""))
        return 0
    drawn = chart(data, CHART)
    notes_path = HERE / "NOTES.md"
    notes = notes_path.read_text() if notes_path.exists() else ""
    README.write_text(render(data, with_chart=drawn).replace("NOTES_PLACEHOLDER\n", notes))
    print(f"wrote {README}" + (f" and {CHART}" if drawn else " (matplotlib missing: no chart)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
