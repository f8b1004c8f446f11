"""Channel: both directions of one connection, a Sealer for what we send and an Opener for what
we receive, keyed from both stream headers. Sans-IO."""

from __future__ import annotations

from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    KeyLimits,
    Role,
    StreamHeader,
    channel_secret,
)
from .opener import Opener
from .ring import DEFAULT_RING_RECORDS
from .sealer import Sealer

__all__ = ("Channel",)


class Channel:
    """Both directions of one connection: a Sealer for what we send, an Opener for what we
    receive. Each side sends its header first (``initial_data()``); once the peer's header has
    arrived (``handshake_complete()``), each direction is keyed from both headers, so both
    fresh salts and both roles: a replayed session or a reflected stream fails to open.
    """

    def __init__(
        self,
        key: Buffer,
        *,
        role: Role,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
        ring_records: int = DEFAULT_RING_RECORDS,
        _salt: bytes | None = None,
    ) -> None:
        if role not in (Role.INITIATOR, Role.RESPONDER):
            raise ValueError("a channel role is Role.INITIATOR or Role.RESPONDER")
        self.role = role
        self._context = bytes(context)
        self.sealer = Sealer(
            key,
            context=context,
            record_size=record_size,
            limits=limits,
            auto_key_update=auto_key_update,
            _salt=_salt,
            reuse_output=reuse_output,
            _role=role,
        )
        self.opener = Opener(
            key,
            context=context,
            max_record_size=max_record_size,
            limits=limits,
            ring_records=ring_records,
            _peer_role=role.peer,
            _on_peer_header=self._on_peer_header,
        )

    def __repr__(self) -> str:
        return f"<Channel {self.role.name} ready={self.sealer.ready}>"

    def initial_data(self) -> bytes:
        """Our stream header: send it before anything else."""
        return self.sealer.take_header()

    def handshake_complete(self) -> bool:
        """True once the peer's header verified; raises its error if it did not, and
        TruncatedStreamError if the input ended before it was whole."""
        return self.opener.header_verified() and self.sealer.ready

    def _on_peer_header(self, key: bytes, peer_header: StreamHeader) -> bytes:
        """The opener's hook once the peer's header verified: key both directions."""
        own, peer = self.sealer.header, peer_header.raw
        self.sealer.install_secret(channel_secret(key, own, peer, self._context))
        return channel_secret(key, peer, own, self._context)
