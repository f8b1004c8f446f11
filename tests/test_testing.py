"""Every adapter through gcmstream.testing's conformance suite, on every loop it supports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gcmstream import testing

ASYNCIO_LOOPS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]
ALL_BACKENDS = [*ASYNCIO_LOOPS, pytest.param(("trio", {}), id="trio")]

ADAPTERS: list[tuple[Callable[[], testing.Adapter], list[Any]]] = [
    (testing.asyncio_adapter, ASYNCIO_LOOPS),
    (testing.asyncio_wrapped_adapter, ASYNCIO_LOOPS),
    (testing.anyio_adapter, ALL_BACKENDS),
]

CASES = [
    pytest.param(make, backend.values[0], check, id=f"{make().name}-{backend.id}-{name}")
    for make, backends in ADAPTERS
    for backend in backends
    for name, check in testing.CHECKS.items()
]


@pytest.mark.parametrize(("make_adapter", "anyio_backend", "check"), CASES)
@pytest.mark.anyio
async def test_conformance(
    make_adapter: Callable[[], testing.Adapter],
    anyio_backend: object,
    check: Callable[[testing.Adapter], object],
) -> None:
    await check(make_adapter())  # type: ignore[misc]


def test_a_failed_check_says_what_was_expected_and_what_was_seen() -> None:
    with pytest.raises(AssertionError, match=r"^the first receive: expected b'first record', saw b'first'$"):
        testing._expect_equal("the first receive", b"first", b"first record")
    long = bytes(range(100))
    with pytest.raises(AssertionError, match=r"expected 100 bytes starting b'\\x00\\x01.*, saw b''$"):
        testing._expect_equal("the client received", b"", long)
    testing._expect_equal("equal values pass", b"x", b"x")
