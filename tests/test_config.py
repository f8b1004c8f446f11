"""The one configuration object (issue 24.1): checked once, frozen, equal by value, never shows
a key, and the one place a Channel is built from the options."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest

import gcmstream.config
from gcmstream import Channel, KeyExchange, KeyLimits, KeyRing, Role, generate_key
from gcmstream.admission import DEFAULT_ADMISSION
from gcmstream.config import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECORD_TIMEOUT,
    UNSET,
    Configuration,
    check_timeout,
)
from gcmstream.format import HARD_MAX_RECORD_SIZE, MAX_CONTEXT_SIZE, key_id
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
