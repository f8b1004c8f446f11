"""Shared fixtures: most tests run both ends of a channel in this one process, which a
responder otherwise refuses as a connection to itself (tests/test_handshake.py checks that);
tests marked ``@pytest.mark.anyio`` run on asyncio and on trio (``anyio_backend``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gcmstream.channel import self_connections_allowed


@pytest.fixture(autouse=True)
def _both_ends_in_this_process(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("refuse_self_connections"):
        yield
        return
    with self_connections_allowed():
        yield


@pytest.fixture(params=[pytest.param(("asyncio", {}), id="asyncio"), pytest.param(("trio", {}), id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Every ``@pytest.mark.anyio`` test on both backends; a test narrows it by parametrizing
    ``anyio_backend`` itself (tests/differential/test_trio_suite.py, tests/test_testing.py)."""
    return request.param
