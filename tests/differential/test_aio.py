"""SecureStreamReader against asyncio.StreamReader, the real thing, in seeded random scenarios.

Both readers get the same plaintext in the same record boundaries at the same moments: the
model is fed each record's plaintext (and EOF with the FINAL record), ours the sealed record.
Then both run the same operations (read, readexactly, readline, readuntil with 1- to 4-byte
separators, at_eof, async iteration, a cancelled wait) under a small limit, and every value,
every exception (type, message, partial, expected, consumed) and the moment each call
finished (how many records had arrived) must be equal.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gcmstream import AuthenticationError, Opener, Sealer, StreamBrokenError, aio

from ..helpers import KEY

SCENARIOS = 320
SEPARATORS = [b"\n", b"\r\n", b"ab", b"\n\n", b"a\r\n", b"\r\n\r\n", b"ba", b"aaa", b"b\nab"]
ALPHABET = b"ab\r\n"
OPERATIONS = ["read", "read", "readexactly", "readline", "readuntil", "readuntil", "readuntil", "at_eof"]
OPERATIONS += ["anext", "arrive", "cancelled"]


class PushedRecords(aio._Source):
    """Ciphertext pushed into the opener as it "arrives", as the BufferedProtocol does."""

    def __init__(self, opener: Opener) -> None:
        self._opener = opener
        self._waiter: asyncio.Future[None] | None = None

    def push(self, data: bytes, *, copy: bool) -> None:
        self._opener.receive_data(bytearray(data) if copy else data)  # copied into the ring, or held
        self._wake()

    def end(self) -> None:
        self._opener.receive_eof()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


@dataclass
class Scenario:
    seed: int
    limit: int
    records: list[tuple[bytes, bool]]  # plaintext, FINAL
    operations: list[tuple[str, Any]]
    prefed: int
    bursts: list[int]
    copy: list[bool] = field(default_factory=list)


def make_scenario(seed: int) -> Scenario:
    rng = random.Random(seed)

    def text(low: int, high: int) -> bytes:
        return bytes(rng.choice(ALPHABET) for _ in range(rng.randint(low, high)))

    records = [(text(1, 10), False) for _ in range(rng.randint(0, 8))]
    records.append((text(0, 6), True))  # FINAL may carry data or be empty
    operations: list[tuple[str, Any]] = []
    for _ in range(rng.randint(4, 14)):
        kind = rng.choice(OPERATIONS)
        if kind == "read":
            operations.append((kind, rng.choice([-1, 0, *range(1, 13)])))
        elif kind == "readexactly":
            operations.append((kind, rng.randint(0, 12)))
        elif kind in ("readuntil", "cancelled"):
            separator = rng.choice(SEPARATORS) if rng.random() < 0.7 else text(1, 4)
            operations.append((kind, separator))
        else:
            operations.append((kind, None))
    return Scenario(
        seed=seed,
        limit=rng.randint(1, 12),
        records=records,
        operations=operations,
        prefed=rng.randint(0, 2),
        bursts=[rng.choice([1, 1, 1, 2, 3]) for _ in records],
        copy=[rng.random() < 0.5 for _ in records],
    )


def outcome_of(task: asyncio.Future[Any]) -> tuple[Any, ...]:
    exc = task.exception()
    if exc is None:
        return ("value", task.result())
    details = {name: getattr(exc, name) for name in ("partial", "expected", "consumed") if hasattr(exc, name)}
    return ("raised", type(exc).__name__, exc.args, tuple(sorted(details.items())))


def operation(reader: Any, kind: str, argument: Any) -> Callable[[], Awaitable[Any]]:
    if kind == "read":
        return lambda: reader.read(argument)
    if kind == "readexactly":
        return lambda: reader.readexactly(argument)
    if kind == "readline":
        return lambda: reader.readline()
    if kind in ("readuntil", "cancelled"):
        return lambda: reader.readuntil(argument)
    if kind == "anext":
        return lambda: reader.__anext__()
    raise AssertionError(kind)


async def settle() -> None:
    for _ in range(6):
        await asyncio.sleep(0)


async def run_scenario(scenario: Scenario) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Returns what happened (for coverage counts) and every mismatch, described."""
    model = asyncio.StreamReader(limit=scenario.limit)
    sealer = Sealer(KEY)
    opener = Opener(KEY)
    source = PushedRecords(opener)
    ours = aio.SecureStreamReader(opener, source, limit=scenario.limit)
    header = sealer.take_header()
    sealed = [bytes(sealer.seal(text, final=final, flush=True)) for text, final in scenario.records]
    fed = 0

    def feed(count: int) -> None:
        nonlocal fed
        for _ in range(count):
            if fed == len(sealed):
                return
            text, final = scenario.records[fed]
            model.feed_data(text)
            source.push(sealed[fed], copy=scenario.copy[fed])
            if final:
                model.feed_eof()
                source.end()
            fed += 1

    source.push(header, copy=True)
    feed(scenario.prefed)
    seen: list[tuple[Any, ...]] = []
    mismatches: list[str] = []

    def compare(step: str, theirs: tuple[Any, ...], mine: tuple[Any, ...]) -> None:
        seen.append(theirs)
        if theirs != mine:
            mismatches.append(f"seed {scenario.seed} {step}: asyncio {theirs!r}, gcmstream {mine!r}")

    bursts = iter(scenario.bursts)
    for index, (kind, argument) in enumerate(scenario.operations):
        step = f"op {index} {kind}({argument!r}) limit={scenario.limit}"
        if kind == "at_eof":
            compare(step, ("value", model.at_eof()), ("value", ours.at_eof()))
            continue
        if kind == "arrive":
            feed(next(bursts, 1))
            continue
        tasks = [asyncio.ensure_future(operation(reader, kind, argument)()) for reader in (model, ours)]
        finished_at: list[int | None] = [None, None]
        await settle()
        while True:
            for i, task in enumerate(tasks):
                if task.done() and finished_at[i] is None:
                    finished_at[i] = fed
            if all(task.done() for task in tasks) or kind == "cancelled" or fed == len(sealed):
                break
            feed(next(bursts, 1))
            await settle()
        for task in tasks:
            if not task.done():
                task.cancel()
        await settle()
        outcomes = [("cancelled",) if task.cancelled() else outcome_of(task) for task in tasks]
        compare(step, (*outcomes[0], finished_at[0]), (*outcomes[1], finished_at[1]))
    feed(len(sealed))
    await settle()
    compare("at_eof at the end", ("value", model.at_eof()), ("value", ours.at_eof()))
    rest = [asyncio.ensure_future(reader.read()) for reader in (model, ours)]
    await settle()
    if all(task.done() for task in rest):
        compare("rest", outcome_of(rest[0]), outcome_of(rest[1]))
    else:
        mismatches.append(f"seed {scenario.seed}: read() of the rest did not finish")
        for task in rest:
            task.cancel()
    compare("at_eof after the rest", ("value", model.at_eof()), ("value", ours.at_eof()))
    return seen, mismatches


@pytest.mark.asyncio
async def test_reader_matches_asyncio_stream_reader_in_random_scenarios() -> None:
    mismatches: list[str] = []
    kinds: Counter[str] = Counter()
    for seed in range(SCENARIOS):
        seen, found = await run_scenario(make_scenario(seed))
        mismatches += found
        kinds.update(outcome[1] if outcome[0] == "raised" else outcome[0] for outcome in seen)
    assert not mismatches, f"{len(mismatches)} mismatches over {SCENARIOS} scenarios:\n" + "\n".join(
        mismatches[:20]
    )
    # the scenarios reach every outcome that matters, many times over
    for kind in ("LimitOverrunError", "IncompleteReadError", "ValueError", "StopAsyncIteration", "cancelled"):
        assert kinds[kind] >= 10, (kind, kinds)


async def two_readers(limit: int, records: list[tuple[bytes, bool]]) -> tuple[Any, Any]:
    model = asyncio.StreamReader(limit=limit)
    sealer, opener = Sealer(KEY), Opener(KEY)
    source = PushedRecords(opener)
    source.push(sealer.take_header(), copy=True)
    for text, final in records:
        model.feed_data(text)
        source.push(bytes(sealer.seal(text, final=final, flush=True)), copy=False)
        if final:
            model.feed_eof()
            source.end()
    return model, aio.SecureStreamReader(opener, source, limit=limit)


@pytest.mark.asyncio
async def test_multibyte_separator_may_end_past_the_limit_as_in_asyncio() -> None:
    """The case from issue 11: with limit 8, b"xxxxxxxx\\r" then b"\\ntail" is a line."""
    for reader in await two_readers(8, [(b"xxxxxxxx\r", False), (b"\ntail", True)]):
        assert await reader.readuntil(b"\r\n") == b"xxxxxxxx\r\n"
        assert await reader.read() == b"tail"


@pytest.mark.asyncio
async def test_unfound_multibyte_separator_at_the_end_is_incomplete_not_overrun() -> None:
    for reader in await two_readers(8, [(b"x" * 9, True)]):
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readuntil(b"\r\n")
        assert info.value.partial == b"x" * 9


@pytest.mark.asyncio
async def test_overrun_consumed_counts_bytes_that_cannot_start_the_separator() -> None:
    for reader in await two_readers(4, [(b"abcdef", False)]):
        with pytest.raises(asyncio.LimitOverrunError) as info:
            await reader.readuntil(b"\r\n")
        assert info.value.consumed == 5  # 6 bytes arrived, the last one could begin b"\r\n"
        assert await reader.read(10) == b"abcdef"  # and they are still there


@pytest.mark.asyncio
async def test_separator_that_arrived_after_an_overrun_is_found() -> None:
    for reader in await two_readers(3, [(b"aaaa", False), (b"\nbb\n", True)]):
        with pytest.raises(ValueError, match="Separator is found"):
            await reader.readline()
        assert await reader.readline() == b"bb\n"


@pytest.mark.asyncio
async def test_limit_must_be_positive_as_in_asyncio() -> None:
    for limit in (0, -1):
        with pytest.raises(ValueError, match="Limit cannot be <= 0"):
            asyncio.StreamReader(limit=limit)
        with pytest.raises(ValueError, match="Limit cannot be <= 0"):
            aio.SecureStreamReader(Opener(KEY), PushedRecords(Opener(KEY)), limit=limit)
        with pytest.raises(ValueError, match="Limit cannot be <= 0"):
            await aio.open_connection("127.0.0.1", 9, key=KEY, limit=limit)  # before connecting


@pytest.mark.asyncio
async def test_at_eof_once_the_final_record_arrived_and_everything_was_read() -> None:
    for reader in await two_readers(16, [(b"abc", False), (b"", True)]):
        assert not reader.at_eof()
        assert await reader.read(3) == b"abc"
        assert reader.at_eof()  # the FINAL record arrived; ours opened it to say so


@pytest.mark.asyncio
async def test_at_eof_never_raises_the_next_read_does() -> None:
    """Deliberate difference: at_eof() is True only at an authenticated end; an error found
    while checking is raised by the next read, and every read after that."""
    sealer, opener = Sealer(KEY), Opener(KEY)
    source = PushedRecords(opener)
    reader = aio.SecureStreamReader(opener, source)
    header = sealer.take_header()
    record = bytearray(sealer.seal(b"tampered", final=True))
    record[-1] ^= 1
    source.push(header + bytes(record), copy=False)
    assert not reader.at_eof()
    with pytest.raises(AuthenticationError):
        await reader.read(1)
    with pytest.raises(StreamBrokenError):
        await reader.read(1)
