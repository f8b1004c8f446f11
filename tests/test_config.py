"""The one configuration object (issue 24.1): checked once, frozen, equal by value, never shows
a key, and the one place a Channel is built from the options."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute

import gcmstream.config
from gcmstream import Channel, GcmStreamAttribute, KeyExchange, KeyLimits, KeyRing, Role, generate_key
from gcmstream.admission import DEFAULT_ADMISSION
from gcmstream.config import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECORD_TIMEOUT,
    UNSET,
    Configuration,
    check_timeout,
    configure,
)
from gcmstream.format import HARD_MAX_RECORD_SIZE, MAX_CONTEXT_SIZE, key_id
from gcmstream.header import HeaderReader
from gcmstream.testing import run_handshake

from .helpers import KEY

# Every entry point that takes options: each takes config= or the option keywords.
ENTRY_POINTS: dict[str, Any] = {
    "open_connection": gcmstream.open_connection,
    "open_unix_connection": gcmstream.open_unix_connection,
    "start_server": gcmstream.start_server,
    "start_unix_server": gcmstream.start_unix_server,
    "wrap_streams": gcmstream.wrap_streams,
    "encrypting_writer": gcmstream.encrypting_writer,
    "decrypting_reader": gcmstream.decrypting_reader,
    "SecureStream.wrap": gcmstream.SecureStream.wrap,
    "connect_tcp": gcmstream.connect_tcp,
    "connect_unix": gcmstream.connect_unix,
    "create_tcp_listener": gcmstream.create_tcp_listener,
    "create_unix_listener": gcmstream.create_unix_listener,
    "SecureListener": gcmstream.SecureListener,
}

# Every value a caller can get wrong, with the parameter its error must name.
BAD_VALUES: list[tuple[str, object, type[Exception]]] = [
    ("key", bytes(15), ValueError),
    ("key", "a key", TypeError),
    ("context", bytes(MAX_CONTEXT_SIZE + 1), ValueError),
    ("context", "text", TypeError),
    ("key_exchange", KeyExchange.NONE, ValueError),
    ("local_id", "", ValueError),
    ("local_id", bytes(256), ValueError),
    ("peer_id", 7, TypeError),
    ("record_size", 0, ValueError),
    ("record_size", HARD_MAX_RECORD_SIZE + 1, ValueError),
    ("max_record_size", 0, ValueError),
    ("ring_size", 0, ValueError),
    ("ring_size", 1.5, ValueError),
    ("limits", {"hard_records": 3}, TypeError),
    ("handshake_timeout", 0, ValueError),
    ("handshake_timeout", -1.0, ValueError),
    ("record_timeout", math.nan, ValueError),
    ("idle_timeout", math.inf, ValueError),
    ("idle_timeout", "5", TypeError),
    ("record_timeout", True, TypeError),
    ("max_pending_handshakes", 0, ValueError),
    ("max_pending_handshakes", 2.5, ValueError),
    ("max_pending_handshakes", True, ValueError),
    ("admission", 256, TypeError),
]


@pytest.mark.parametrize(("name", "value", "error"), BAD_VALUES)
def test_a_bad_value_raises_when_the_configuration_is_made(
    name: str, value: object, error: type[Exception]
) -> None:
    """Checked once, where it was written, not at each connection; the message names what
    was wrong (the key's own check names the key's length, never its bytes)."""
    options: dict[str, Any] = {"key": KEY, name: value}
    with pytest.raises(error) as raised:
        Configuration(**options)
    if name != "key":
        assert name in str(raised.value) or name.replace("_", " ") in str(raised.value), raised.value


def test_the_defaults_live_in_the_configuration() -> None:
    """One default per option, Configuration's (its timeouts' defaults beside their rule):
    every entry point's option keyword defaults to UNSET, which takes that default (or
    config='s value), and Channel's own defaults are the same."""
    own = inspect.signature(Configuration).parameters
    assert own["handshake_timeout"].default == DEFAULT_HANDSHAKE_TIMEOUT == 30.0
    assert own["record_timeout"].default == DEFAULT_RECORD_TIMEOUT == 30.0
    assert own["idle_timeout"].default is DEFAULT_IDLE_TIMEOUT is None
    assert Configuration(key=KEY).admission is DEFAULT_ADMISSION
    made = Configuration(key=KEY)  # each default as the signature says (a mutation run's find)
    for name, parameter in own.items():
        if name not in ("key", "admission", "max_pending_handshakes"):
            assert getattr(made, name) == parameter.default, name
    assert Configuration(key=KEY, max_pending_handshakes=8).admission.full == 8
    with pytest.raises(ValueError, match="not both"):
        Configuration(key=KEY, admission=DEFAULT_ADMISSION, max_pending_handshakes=8)
    checked = 0
    for entry in ENTRY_POINTS.values():
        parameters = inspect.signature(entry).parameters
        assert parameters["config"].default is None, entry
        for name, parameter in parameters.items():
            if name in own:
                assert parameter.default is UNSET, f"{entry.__qualname__}({name}=)"
                assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, f"{entry.__qualname__}({name}=)"
                checked += 1
    assert checked >= 120
    for name, parameter in inspect.signature(Channel).parameters.items():
        if name in own and name != "key":
            assert parameter.default == own[name].default, f"Channel({name}=)"
            checked += 1
    assert checked >= 128


def test_values_are_kept_in_their_checked_form() -> None:
    config = Configuration(key=KEY, context=bytearray(b"ctx"), local_id="me", handshake_timeout=5)
    assert isinstance(config.key, KeyRing) and config.key.primary == KEY
    assert config.context == b"ctx" and type(config.context) is bytes
    assert config.local_id == b"me" and config.peer_id is None
    assert config.handshake_timeout == 5.0 and type(config.handshake_timeout) is float
    assert check_timeout(None, "t") is None


def test_it_is_frozen_and_replace_checks_again() -> None:
    config = Configuration(key=KEY)
    with pytest.raises(AttributeError, match="frozen"):
        config.record_size = 1
    with pytest.raises(AttributeError, match="frozen"):
        del config.context
    smaller = config.replace(record_size=1024, peer_id="server")
    assert (smaller.record_size, smaller.peer_id, config.record_size) == (1024, b"server", 65536)
    assert smaller.key is config.key  # the ring is shared, not rebuilt
    with pytest.raises(ValueError, match="record_timeout"):
        config.replace(record_timeout=-1)
    with pytest.raises(TypeError):
        config.replace(colour="blue")


# Each refusal's whole message: what was wrong, by its parameter's name, and what was found
# (its type or value), never a key. (Mutation run 2026-12-05, docs/mutation-2026-12-05-mtink4.md:
# messages that lost the type found, or gained text, passed every test that searched them.)
REFUSALS: list[tuple[dict[str, Any], type[Exception], str]] = [
    (
        {"key": KEY, "idle_timeout": "5"},
        TypeError,
        "idle_timeout must be a number of seconds or None, got str",
    ),
    ({"key": KEY, "limits": {}}, TypeError, "limits must be a KeyLimits or None, got dict"),
    (
        {"key": KEY, "max_record_size": 0},
        ValueError,
        "max_record_size must be an int from 1 to 16777216, got 0",
    ),
    ({"key": KEY, "record_size": 0}, ValueError, "record_size must be an int from 1 to 16777216, got 0"),
    ({"key": KEY, "ring_size": 0}, ValueError, "ring_size must be a positive number of bytes, got 0"),
    ({"key": KEY, "local_id": ""}, ValueError, "local_id must be 1 to 255 bytes, got 0"),
    ({"key": KEY, "peer_id": 7}, TypeError, "peer_id must be str or bytes, got int"),
    (
        {"key": KEY, "max_pending_handshakes": 0},
        ValueError,
        "max_pending_handshakes must be an int >= 1, got 0",
    ),
    ({"key": KEY, "admission": 256}, TypeError, "admission must be an AdmissionPolicy, got int"),
    (
        {"key": KEY, "record_timeout": math.nan},
        ValueError,
        "record_timeout must be a positive, finite number of seconds or None, got nan",
    ),
    (
        {"key": KEY, "idle_timeout": -1},
        ValueError,
        "idle_timeout must be a positive, finite number of seconds or None, got -1",
    ),
    (
        {"key": KEY, "handshake_timeout": 0},
        ValueError,
        "handshake_timeout must be a positive, finite number of seconds or None, got 0",
    ),
]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    REFUSALS,
    ids=[next(name for name in o if name != "key") for o, _, _ in REFUSALS],
)
def test_each_refusal_says_exactly_what_was_wrong(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        Configuration(**options)
    assert str(raised.value) == message


def test_the_usage_refusals_say_exactly_what_was_wrong() -> None:
    with pytest.raises(TypeError) as missing:
        configure(None, key=UNSET)
    assert str(missing.value) == "missing key= (or config=)"
    with pytest.raises(AttributeError) as deleted:
        del Configuration(key=KEY).context
    assert str(deleted.value) == "a Configuration is frozen"


def test_equal_by_value_and_not_hashable() -> None:
    alice = generate_key()
    assert Configuration(key=alice, local_id="a") == Configuration(key=KeyRing([alice]), local_id=b"a")
    assert Configuration(key=alice) != Configuration(key=generate_key())
    assert Configuration(key=KeyRing({"x": alice})) != Configuration(key=KeyRing({"y": alice}))
    assert Configuration(key=alice) != Configuration(key=alice, idle_timeout=60)
    assert Configuration(key=alice) != "a configuration"
    with pytest.raises(TypeError):
        hash(Configuration(key=alice))


def test_repr_shows_key_ids_never_a_key() -> None:
    keys = [generate_key(), generate_key(128)]
    text = repr(Configuration(key=KeyRing({"alice": keys})))
    # every option, by name, in the constructor's order, as a call would write them
    assert ", context=b'', key_exchange=<KeyExchange.MLKEM768_X25519: " in text, text
    assert text.startswith("Configuration(key=<KeyRing alice=") and text.endswith(")"), text
    assert key_id(keys[0]).hex()[:8] in text and "alice" in text
    for key in keys:
        assert key.hex() not in text and repr(key) not in text and str(list(key)) not in text


def test_channel_passes_every_option_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one place options reach a Channel: each channel option of the configuration, set to
    a value other than its default, arrives as that value."""
    config = Configuration(
        key=KEY,
        context=b"ctx",
        key_exchange=KeyExchange.X25519,
        local_id="me",
        peer_id="you",
        record_size=1000,
        max_record_size=2000,
        ring_size=300_000,
        limits=KeyLimits(update_after_records=5, hard_records=9),
    )
    seen: dict[str, Any] = {}

    def record(key: Any, **options: Any) -> None:
        seen.update(options, key=key)

    monkeypatch.setattr(gcmstream.config, "Channel", record)
    config.channel(Role.RESPONDER, reuse_output=False)
    channel_options = set(inspect.signature(Channel).parameters) - {"auto_key_update"}
    assert set(seen) == channel_options
    for name in channel_options - {"role", "reuse_output"}:
        assert seen[name] == getattr(config, name), name
    assert (seen["role"], seen["reuse_output"]) == (Role.RESPONDER, False)
    config.channel(Role.INITIATOR)  # Channel's default: its output buffer is reused
    assert (seen["role"], seen["reuse_output"]) == (Role.INITIATOR, True)


def test_channels_from_one_configuration_complete_a_handshake() -> None:
    config = Configuration(key=KEY, context=b"app v1", key_exchange=KeyExchange.X25519)
    initiator, responder = config.channel(Role.INITIATOR), config.channel(Role.RESPONDER)
    run_handshake(initiator, responder)
    assert initiator.handshake_complete() and responder.handshake_complete()
    assert initiator.key_exchange is KeyExchange.X25519
    other = config.replace(context=b"app v2").channel(Role.RESPONDER)
    run_handshake(config.channel(Role.INITIATOR), other)
    with pytest.raises(gcmstream.GcmStreamError):
        other.handshake_complete()


# -- every entry point takes config= or its keywords (issue 24.1) ------------------------------


def _handler(*streams: object) -> None:
    pass


# what each entry point needs besides its options (never used: the options are refused first)
_ARGUMENTS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "open_connection": (("127.0.0.1", 9), {}),
    "open_unix_connection": (("/nonexistent/socket",), {}),
    "start_server": ((_handler, "127.0.0.1", 0), {}),
    "start_unix_server": ((_handler, "/nonexistent/socket"), {}),
    "wrap_streams": ((None, None), {"role": Role.INITIATOR}),
    "encrypting_writer": ((None,), {}),
    "decrypting_reader": ((None,), {}),
    "SecureStream.wrap": ((None,), {"role": Role.INITIATOR}),
    "connect_tcp": (("127.0.0.1", 9), {}),
    "connect_unix": (("/nonexistent/socket",), {}),
    "create_tcp_listener": ((), {}),
    "create_unix_listener": (("/nonexistent/socket",), {}),
    "SecureListener": ((None,), {}),
}


def _call(name: str, **options: Any) -> None:
    """Call entry point ``name`` with ``options``, run to its end if it is a coroutine."""
    arguments, keywords = _ARGUMENTS[name]
    result = ENTRY_POINTS[name](*arguments, **keywords, **options)
    if inspect.iscoroutine(result):
        asyncio.run(result)


def _options_of(name: str) -> list[str]:
    own = inspect.signature(Configuration).parameters
    return [option for option in inspect.signature(ENTRY_POINTS[name]).parameters if option in own]


_CONFLICTS = [(name, option) for name in ENTRY_POINTS for option in _options_of(name)]


@pytest.mark.parametrize(("name", "option"), _CONFLICTS, ids=[f"{n}-{o}" for n, o in _CONFLICTS])
def test_an_option_beside_config_is_a_type_error_naming_it(name: str, option: str) -> None:
    """config= holds every option: one given beside it, even at its default value, is refused
    by name before any I/O (so every keyword an entry point names reaches configure(): one
    that did not would be silently dropped, and this would not raise)."""
    default = inspect.signature(Configuration).parameters[option].default
    value = KEY if default is inspect.Parameter.empty else default
    with pytest.raises(TypeError, match=rf"\b{option}= given beside config="):
        _call(name, config=Configuration(key=KEY), **{option: value})


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_an_entry_point_needs_a_key_or_a_configuration(name: str) -> None:
    with pytest.raises(TypeError, match=r"missing key= \(or config=\)"):
        _call(name)
    with pytest.raises(TypeError, match="config must be a Configuration, got dict"):
        _call(name, config={"key": KEY})


def test_configure_is_the_one_place() -> None:
    config = Configuration(key=KEY)
    assert configure(config, key=UNSET, record_size=UNSET) is config
    built = configure(None, key=KEY, record_size=1000, context=UNSET)
    assert built == Configuration(key=KEY, record_size=1000)
    with pytest.raises(TypeError, match=r"context=, record_size= given beside config="):
        configure(config, record_size=1000, context=b"")
    assert repr(UNSET) == "UNSET"


# The options each entry point is given, as keywords or as config=, and its peer's (keywords).
CHOSEN: dict[str, Any] = {
    "context": b"cfg",
    "record_size": 1000,
    "key_exchange": KeyExchange.X25519,
    "local_id": "entry",
    "peer_id": "peer",
}
PEER: dict[str, Any] = {
    "key": KEY,
    "context": b"cfg",
    "key_exchange": KeyExchange.X25519,
    "local_id": "peer",
    "peer_id": "entry",
}
PAYLOAD = bytes(range(256)) * 10  # three records of 1,000 bytes


async def _observe(name: str, options: dict[str, Any], where: str) -> tuple[object, ...]:
    """Run entry point ``name`` with ``options`` against a peer over a real socket (127.0.0.1,
    or a unix socket at ``where``); what it shows: its record size, the identity it saw, the
    identity its peer saw, and whether the payload crossed."""
    entry = ENTRY_POINTS[name]
    if name in ("open_connection", "open_unix_connection", "start_server", "start_unix_server"):
        return await _observe_aio(name, entry, options, where)
    if name in ("wrap_streams", "encrypting_writer", "decrypting_reader"):
        return await _observe_wrapped(name, entry, options)
    return await _observe_anyio(name, entry, options, where)


def _aio_view(writer: gcmstream.SecureStreamWriter) -> tuple[object, object]:
    return writer.get_extra_info("gcmstream_record_size"), writer.get_extra_info("gcmstream_peer_id")


async def _observe_aio(name: str, entry: Any, options: dict[str, Any], where: str) -> tuple[object, ...]:
    server_side: asyncio.Future[tuple[object, ...]] = asyncio.get_running_loop().create_future()

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        data = await reader.read()
        server_side.set_result((*_aio_view(writer), data))
        writer.close()

    unix = "unix" in name
    if name.startswith("start"):
        server = await (
            entry(handler, where, **options) if unix else entry(handler, "127.0.0.1", 0, **options)
        )
        address = (where,) if unix else ("127.0.0.1", server.sockets[0].getsockname()[1])
        client: Any = gcmstream.open_unix_connection if unix else gcmstream.open_connection
        _, writer = await client(*address, **PEER)
    else:
        start: Any = gcmstream.start_unix_server if unix else gcmstream.start_server
        server = await (start(handler, where, **PEER) if unix else start(handler, "127.0.0.1", 0, **PEER))
        address = (where,) if unix else ("127.0.0.1", server.sockets[0].getsockname()[1])
        _, writer = await entry(*address, **options)
    writer.write(PAYLOAD)
    writer.write_eof()
    client_view = _aio_view(writer)
    served = await asyncio.wait_for(server_side, 10)
    writer.close()
    server.close()
    await server.wait_closed()
    entry_view, peer_view = (
        (served[:2], client_view) if name.startswith("start") else (client_view, served[:2])
    )
    return (*entry_view, peer_view[1], served[2] == PAYLOAD)


async def _observe_wrapped(name: str, entry: Any, options: dict[str, Any]) -> tuple[object, ...]:
    """wrap_streams as the initiator, or the one-way pair, over a plain asyncio connection."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future()
    )
    server = await asyncio.start_server(lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    far_reader, far_writer = await accepted
    try:
        if name == "wrap_streams":
            responder = gcmstream.wrap_streams(far_reader, far_writer, role=Role.RESPONDER, **PEER)
            initiator = entry(reader, writer, role=Role.INITIATOR, **options)
            (peer_reader, peer_writer), (_, mine_writer) = await asyncio.gather(responder, initiator)
            mine_writer.write(PAYLOAD)
            mine_writer.write_eof()
            return (*_aio_view(mine_writer), _aio_view(peer_writer)[1], await peer_reader.read() == PAYLOAD)
        one_way = {"key": KEY, "context": PEER["context"]}
        if name == "encrypting_writer":
            sealing = entry(writer, **options)
            opened = gcmstream.decrypting_reader(far_reader, **one_way)
        else:
            sealing = gcmstream.encrypting_writer(writer, **one_way)
            opened = entry(far_reader, **options)
        sealing.write(PAYLOAD)
        sealing.write_eof()
        return (sealing.get_extra_info("gcmstream_record_size"), await opened.read() == PAYLOAD)
    finally:
        writer.close()
        far_writer.close()
        server.close()
        await server.wait_closed()


def _anyio_view(stream: gcmstream.SecureStream) -> tuple[object, object]:
    return stream.extra(GcmStreamAttribute.record_size), stream.extra(GcmStreamAttribute.peer_id)


async def _observe_anyio(name: str, entry: Any, options: dict[str, Any], where: str) -> tuple[object, ...]:
    unix = "unix" in name
    served: list[tuple[object, ...]] = []
    done = anyio.Event()

    async def handler(stream: gcmstream.SecureStream) -> None:
        data = b""
        with contextlib.suppress(anyio.EndOfStream):
            while True:
                data += await stream.receive()
        served.append((*_anyio_view(stream), data))
        done.set()
        await stream.aclose()

    if name in ("create_tcp_listener", "create_unix_listener", "SecureListener"):
        if name == "SecureListener":
            listener = entry(await anyio.create_tcp_listener(local_host="127.0.0.1"), **options)
        else:
            listener = await (entry(where, **options) if unix else entry(local_host="127.0.0.1", **options))
    else:
        if unix:
            listener = await gcmstream.create_unix_listener(where, **PEER)
        else:
            listener = await gcmstream.create_tcp_listener(local_host="127.0.0.1", **PEER)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handler)
        port: int = 0 if unix else listener.extra(SocketAttribute.local_port)
        if name == "SecureStream.wrap":
            transport = await anyio.connect_tcp("127.0.0.1", port)
            client = await entry(transport, role=Role.INITIATOR, **options)
        elif name in ("connect_tcp", "connect_unix"):
            client = await (entry(where, **options) if unix else entry("127.0.0.1", port, **options))
        elif unix:
            client = await gcmstream.connect_unix(where, **PEER)
        else:
            client = await gcmstream.connect_tcp("127.0.0.1", port, **PEER)
        await client.send(PAYLOAD)
        await client.send_eof()
        with anyio.fail_after(10):
            await done.wait()
        client_view = _anyio_view(client)
        await client.aclose()
        tg.cancel_scope.cancel()
    (server_view,) = served
    serving = name in ("create_tcp_listener", "create_unix_listener", "SecureListener")
    entry_view, peer_view = (server_view[:2], client_view) if serving else (client_view, server_view[:2])
    return (*entry_view, peer_view[1], server_view[2] == PAYLOAD)


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_each_entry_point_given_config_behaves_as_given_the_keywords(name: str, tmp_path: Path) -> None:
    """Over a real connection (127.0.0.1, or a unix socket in a temporary directory), with a
    peer given the keywords: the same Configuration as config= or as keywords gives the same
    record size, the same identities on both ends and the payload across (a context or key
    exchange that did not arrive would fail the handshake; an identity that did not, the
    peer's peer_id check). A one-way entry point takes only its options as keywords, and the
    whole Configuration (the options it does not use ignored) as config=."""
    parameters = inspect.signature(ENTRY_POINTS[name]).parameters
    keywords = {option: value for option, value in CHOSEN.items() if option in parameters}
    config = Configuration(key=KEY, **CHOSEN)
    results = [
        asyncio.run(_observe(name, options, str(tmp_path / f"{name}.{form}")))
        for form, options in (("keywords", {"key": KEY, **keywords}), ("config", {"config": config}))
    ]
    one_way = name in ("encrypting_writer", "decrypting_reader")
    assert (
        results[0]
        == results[1]
        == (
            (1000 if name == "encrypting_writer" else 65536, True)
            if one_way
            else (1000, b"peer", b"entry", True)
        )
    ), name


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_an_entry_point_checks_its_options_once_before_any_io(name: str) -> None:
    """Each keyword is checked by Configuration, the one copy of each rule (the timeouts'
    rule too), before a socket is opened: a bad value is a ValueError naming it, not a
    connection attempt (these entry points' addresses would refuse it) or a check per client."""
    option, bad = next(
        (option, bad)
        for option, bad in (
            ("handshake_timeout", -1.0),
            ("context", bytes(MAX_CONTEXT_SIZE + 1)),
            ("record_size", 0),
        )
        if option in _options_of(name)
    )
    with pytest.raises(ValueError, match=option):
        _call(name, key=KEY, **{option: bad})


async def _empty_chunks() -> AsyncIterator[bytes]:
    """No chunks (every call below is refused before it reads one)."""
    for chunk in [b""][:0]:
        yield chunk


def _context_calls(tmp_path: Path) -> dict[str, Callable[[Any], object]]:
    """One call per public entry point that takes ``context``, with everything else valid."""
    plain, sealed, out = tmp_path / "plain", tmp_path / "sealed", tmp_path / "out"
    plain.write_bytes(b"plain")
    gcmstream.encrypt_file(plain, sealed, key=KEY)
    sink: Any = out  # (never written: refused before)
    calls: dict[str, Callable[[Any], object]] = {
        name: functools.partial(_call_with_context, name)
        for name in ENTRY_POINTS
        if "context" in _options_of(name)
    }
    calls.update(
        {
            "Channel": lambda bad: Channel(KEY, role=Role.RESPONDER, context=bad),
            "Configuration": lambda bad: Configuration(key=KEY, context=bad),
            "Sealer": lambda bad: gcmstream.Sealer(KEY, context=bad),
            "Opener": lambda bad: gcmstream.Opener(KEY, context=bad),
            "HeaderReader": lambda bad: HeaderReader(KEY, context=bad),
            "encrypt_file": lambda bad: gcmstream.encrypt_file(plain, out, key=KEY, context=bad),
            "decrypt_file": lambda bad: gcmstream.decrypt_file(sealed, out, key=KEY, context=bad),
            "open_file": lambda bad: gcmstream.open_file(sealed, key=KEY, context=bad),
            "encrypt_file_async": lambda bad: asyncio.run(
                gcmstream.encrypt_file_async(plain, out, key=KEY, context=bad)
            ),
            "decrypt_file_async": lambda bad: asyncio.run(
                gcmstream.decrypt_file_async(sealed, out, key=KEY, context=bad)
            ),
            "open_file_async": lambda bad: asyncio.run(
                gcmstream.open_file_async(sealed, key=KEY, context=bad)
            ),
            "encrypt_stream": lambda bad: asyncio.run(
                gcmstream.encrypt_stream(_empty_chunks(), sink, key=KEY, context=bad)
            ),
            "decrypt_stream": lambda bad: asyncio.run(
                gcmstream.decrypt_stream(_empty_chunks(), sink, key=KEY, context=bad)
            ),
            "encrypt_iter": lambda bad: asyncio.run(
                _exhaust(gcmstream.encrypt_iter(_empty_chunks(), key=KEY, context=bad))
            ),
            "decrypt_iter": lambda bad: asyncio.run(
                _exhaust(gcmstream.decrypt_iter(_empty_chunks(), key=KEY, context=bad))
            ),
        }
    )
    return calls


def _call_with_context(name: str, bad: Any) -> None:
    _call(name, key=KEY, context=bad)


async def _exhaust(items: AsyncIterator[object]) -> None:
    async for _ in items:
        pass


def _takes_context() -> set[str]:
    """Every public callable (gcmstream.__all__, their methods, HeaderReader) with ``context``."""
    found = set()
    candidates: list[tuple[str, Any]] = [(name, getattr(gcmstream, name)) for name in gcmstream.__all__]
    candidates.append(("HeaderReader", HeaderReader))
    for name, obj in list(candidates):
        if inspect.isclass(obj):
            candidates += [(f"{name}.{m}", getattr(obj, m)) for m in vars(obj) if not m.startswith("_")]
    for name, obj in candidates:
        with contextlib.suppress(TypeError, ValueError):
            if callable(obj) and "context" in inspect.signature(obj).parameters:
                found.add(name)
    return found


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ("text", TypeError, "context must be bytes-like, not str"),
        (bytes(MAX_CONTEXT_SIZE + 1), ValueError, f"context of {MAX_CONTEXT_SIZE + 1} bytes exceeds"),
    ],
    ids=["not-bytes", "too-long"],
)
def test_every_entry_point_refuses_a_bad_context_with_the_documented_error(
    bad: Any, error: type[Exception], message: str, tmp_path: Path
) -> None:
    """errors.py: a context over its bound is a ValueError, one not bytes-like a TypeError, with
    format.check_context's message, from every public entry point that takes one, when it is
    called (the context is checked once, where it is kept: HeaderReader for a Channel, issue
    21 review), and the table covers every such entry point."""
    calls = _context_calls(tmp_path)
    assert set(calls) == _takes_context()
    for name, call in calls.items():
        with pytest.raises(error, match=message):
            call(bad)
        assert not (tmp_path / "out").exists(), name
