"""One configuration for a channel's two ends and a server (issue 24.1), as ``ssl.SSLContext``
or aioquic's ``QuicConfiguration``: the key or key ring, the context, the handshake's options,
the record and ring sizes, the per-key limits, every timeout and the pending-handshake bound.

A :class:`Configuration` is validated once, when it is made, by the same checks the core runs
(``format.check_*``, ``ring.ring_capacity``, ``KeyLimits``), so a bad value raises where it was
written, not at each connection; it is frozen (``replace()`` makes a changed copy), compares by
value, and its ``repr`` shows key IDs, never a key. :meth:`Configuration.channel` is the one
place a Channel is built from it. Sans-IO: no loop, no sockets.

The defaults of the three timeouts live here, beside the rule that checks them: a timeout is
``None`` (no limit) or a positive, finite number of seconds.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Final

from .admission import AdmissionPolicy, admission_policy
from .channel import Channel, check_key_exchange
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    KeyExchange,
    KeyLimits,
    KeyRing,
    Keys,
    Role,
    as_key_ring,
    check_context,
    check_identity,
    check_record_size,
)
from .ring import DEFAULT_RING_SIZE, ring_capacity

__all__ = (
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_RECORD_TIMEOUT",
    "UNSET",
    "Configuration",
    "Unset",
    "check_timeout",
    "configure",
)

# Seconds a channel waits for its handshake to complete before giving up on it (every entry
# point's default and the CLI's): an unauthenticated peer holds a pending slot at most this long.
DEFAULT_HANDSHAKE_TIMEOUT: Final = 30.0

# A record that has started to arrive must finish within this many seconds, or the connection
# is dropped: a peer trickling one byte at a time would otherwise hold its ring (up to
# max_record_size) for ever. 30 s, as the handshake timeout: far above what a record of 16 MiB
# takes on any link that can carry this traffic (0.2 s at 1 Gbit/s, 13 s at 10 Mbit/s).
DEFAULT_RECORD_TIMEOUT: Final = 30.0

# A server may drop a client that sends nothing for this many seconds after its handshake.
# None by default, as asyncio's and anyio's servers: silence is normal in many protocols (a
# client that sent its request and now only reads, a long poll); the states a peer could use
# to hold memory are bounded already (handshake_timeout, record_timeout, the pending bound).
DEFAULT_IDLE_TIMEOUT: Final[float | None] = None


def check_timeout(value: float | None, name: str) -> float | None:
    """A timeout: None (no limit) or a positive, finite number of seconds (an int is taken)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive, finite number of seconds or None, got {value!r}")
    return float(value)


class Unset(enum.Enum):
    """The type of :data:`UNSET`, the default of every option keyword of an entry point."""

    UNSET = "UNSET"

    def __repr__(self) -> str:  # as signatures show it: ``record_size=UNSET``
        return self.value


UNSET: Final = Unset.UNSET
"""An option keyword that was not given: its value is ``config``'s, or else the
:class:`Configuration` default (so an option given beside ``config=`` can be told apart from
one left alone, even when it equals the default)."""


def configure(config: Configuration | None, /, **options: Any) -> Configuration:
    """The one place an entry point's option keywords become a :class:`Configuration`; every
    entry point calls it. ``options`` are the keywords as the caller passed them (:data:`UNSET`
    where not given). Without ``config`` the given ones build a Configuration (checked there);
    with it, any given one is a TypeError naming it: ``config`` already holds that option
    (``config.replace(...)`` changes it), and two values for one option would leave the
    reader to guess which one wins."""
    given = {name: value for name, value in options.items() if value is not UNSET}
    if config is None:
        if "key" not in given:
            raise TypeError("missing key= (or config=)")
        return Configuration(**given)
    if not isinstance(config, Configuration):
        raise TypeError(f"config must be a Configuration, got {type(config).__name__}")
    if given:
        names = ", ".join(f"{name}=" for name in sorted(given))
        raise TypeError(f"{names} given beside config=, which holds every option: use config.replace(...)")
    return config


class Configuration:
    """Everything a gcmstream channel end or server is configured with, checked once.

    ``key`` (bytes or a :class:`~gcmstream.KeyRing`; kept as a KeyRing), ``context``,
    ``key_exchange``, ``local_id``, ``peer_id``, ``record_size``, ``max_record_size``,
    ``ring_size`` and ``limits`` mean what they mean for :class:`~gcmstream.Channel`;
    ``handshake_timeout``, ``record_timeout`` and ``idle_timeout`` are seconds or None (no
    limit), as for :func:`~gcmstream.start_server`; ``admission`` is a server's rule for its
    pending handshakes (:class:`~gcmstream.AdmissionPolicy`; ``max_pending_handshakes=N``
    stands for ``AdmissionPolicy.from_max_pending_handshakes(N)``, not both). Identities are
    kept as the bytes a peer sees.

    Every entry point takes one as ``config=``, or its option keywords as a shorthand that
    builds one (:func:`configure`, the one place; an option given beside ``config=`` is a
    TypeError naming it). What each uses of it:

    * servers (``start_server``, ``start_unix_server``, ``create_tcp_listener``,
      ``create_unix_listener``, ``SecureListener``): every option;
    * anyio clients (``connect_tcp``, ``connect_unix``, ``SecureStream.wrap``): all but
      ``admission`` (``idle_timeout`` bounds each receive's wait after the handshake);
    * asyncio clients (``open_connection``, ``open_unix_connection``): all but ``admission``
      and ``idle_timeout``;
    * ``wrap_streams``: the channel options and ``handshake_timeout`` (over streams it does
      not own it keeps no record or idle timer);
    * ``encrypting_writer``: ``key`` (a KeyRing's primary), ``context``, ``record_size``,
      ``limits``; ``decrypting_reader``: ``key``, ``context``, ``max_record_size``,
      ``limits``, ``ring_size``.

    * the file and pipeline functions (``encrypt_iter``, ``encrypt_stream``,
      ``encrypt_file``, ``encrypt_file_async``, their ``decrypt_`` twins, ``open_file``,
      ``open_file_async``, ``gcmstream.files.encrypt_path``/``decrypt_path``): ``key``,
      ``context``, and ``record_size`` to encrypt (``limits`` too in ``encrypt_path``) or
      ``max_record_size`` to decrypt; not ``ring_size`` (the file engine sizes its own ring).
      Their keywords default to None, not :data:`UNSET` (no timeout among them: None is no
      value they take), and ``recipients=``, ``identities=`` or ``passphrase=`` beside
      ``config=`` is refused too (``gcmstream.pipeline.file_keywords``).

    A keyword an entry point does not use is not among its parameters.
    """

    __slots__ = (
        "admission",
        "context",
        "handshake_timeout",
        "idle_timeout",
        "key",
        "key_exchange",
        "limits",
        "local_id",
        "max_record_size",
        "peer_id",
        "record_size",
        "record_timeout",
        "ring_size",
    )

    key: KeyRing
    context: bytes
    key_exchange: KeyExchange
    local_id: bytes | None
    peer_id: bytes | None
    record_size: int
    max_record_size: int
    ring_size: int
    limits: KeyLimits | None
    handshake_timeout: float | None
    record_timeout: float | None
    idle_timeout: float | None
    admission: AdmissionPolicy

    def __init__(
        self,
        *,
        key: Keys,
        context: Buffer = b"",
        key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
        local_id: str | bytes | None = None,
        peer_id: str | bytes | None = None,
        record_size: int = DEFAULT_RECORD_SIZE,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        ring_size: int = DEFAULT_RING_SIZE,
        limits: KeyLimits | None = None,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        record_timeout: float | None = DEFAULT_RECORD_TIMEOUT,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        admission: AdmissionPolicy | None = None,
        max_pending_handshakes: int | None = None,
    ) -> None:
        if limits is not None and not isinstance(limits, KeyLimits):
            raise TypeError(f"limits must be a KeyLimits or None, got {type(limits).__name__}")
        max_record_size = check_record_size(max_record_size, "max_record_size")
        ring_capacity(max_record_size, ring_size)  # a bad ring_size raises here
        values: dict[str, object] = {
            "key": as_key_ring(key),
            "context": check_context(context),
            "key_exchange": check_key_exchange(key_exchange),
            "local_id": None if local_id is None else check_identity(local_id, "local_id"),
            "peer_id": None if peer_id is None else check_identity(peer_id, "peer_id"),
            "record_size": check_record_size(record_size),
            "max_record_size": max_record_size,
            "ring_size": ring_size,
            "limits": limits,
            "handshake_timeout": check_timeout(handshake_timeout, "handshake_timeout"),
            "record_timeout": check_timeout(record_timeout, "record_timeout"),
            "idle_timeout": check_timeout(idle_timeout, "idle_timeout"),
            "admission": admission_policy(admission, max_pending_handshakes),
        }
        for name in _FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Configuration is frozen: use replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Configuration is frozen")

    def _values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    def replace(self, **changes: Any) -> Configuration:
        """A copy with ``changes`` (keyword arguments of the constructor), checked again."""
        return Configuration(**{**self._values(), **changes})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        mine, theirs = self._values(), other._values()
        # KeyRings compare by their keys, in order, and their names (never by identity)
        mine["key"], theirs["key"] = (_ring_value(self.key), _ring_value(other.key))
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]  # equal by value, like a dict of options

    def __repr__(self) -> str:  # the KeyRing's repr shows key IDs and names, never a key
        shown = ", ".join(f"{name}={value!r}" for name, value in self._values().items())
        return f"Configuration({shown})"

    def channel(self, role: Role, *, reuse_output: bool = True) -> Channel:
        """A new Channel for this end's ``role``, with every option of this configuration:
        the one place that passes them on, so a new option cannot be dropped on one path."""
        return Channel(
            self.key,
            role=role,
            context=self.context,
            record_size=self.record_size,
            max_record_size=self.max_record_size,
            limits=self.limits,
            reuse_output=reuse_output,
            ring_size=self.ring_size,
            key_exchange=self.key_exchange,
            local_id=self.local_id,
            peer_id=self.peer_id,
        )


# the constructor's order, for repr and replace
_FIELDS = (
    "key",
    "context",
    "key_exchange",
    "local_id",
    "peer_id",
    "record_size",
    "max_record_size",
    "ring_size",
    "limits",
    "handshake_timeout",
    "record_timeout",
    "idle_timeout",
    "admission",
)


def _ring_value(ring: KeyRing) -> tuple[tuple[bytes, bytes | None], ...]:
    return tuple((ident, ring.identity(ident)) for ident in ring.key_ids)
