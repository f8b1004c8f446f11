"""Channel: both directions of one connection, a Sealer for what we send and an Opener for what
we receive, keyed from both stream headers. Sans-IO."""

from __future__ import annotations

from .format import DEFAULT_MAX_RECORD_SIZE, DEFAULT_RECORD_SIZE, Buffer, KeyLimits, Role, channel_secret
from .opener import Opener
from .ring import DEFAULT_RING_SIZE
from .sealer import Sealer

__all__ = ("Channel",)


class Channel:
    """Both directions of one connection: a Sealer for what we send, an Opener for what we
    receive. Each side sends its header (``data_to_send()``, or ``initial_data()``) while it
    reads the peer's; once the peer's header has arrived (``handshake_complete()``), each
    direction is keyed from both headers, so both fresh salts and both roles: a replayed
    session or a reflected stream fails to open.
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
        ring_size: int = DEFAULT_RING_SIZE,
        _salt: bytes | None = None,
    ) -> None:
        if role not in (Role.INITIATOR, Role.RESPONDER):
            raise ValueError("a channel role is Role.INITIATOR or Role.RESPONDER")
        self.role = role
        self._context = bytes(context)
        self._header_due = True
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
            ring_size=ring_size,
            _peer_role=role.peer,
            _on_peer_header=self._on_peer_header,
        )

    def __repr__(self) -> str:
        return f"<Channel {self.role.name} ready={self.sealer.ready}>"

    def initial_data(self) -> bytes:
        """Our stream header: send it before anything else."""
        self._header_due = False
        return self.sealer.take_header()

    def data_to_send(self) -> bytes:
        """Handshake bytes due now (our header first), b"" when none is due. Adapters send them
        while they read the peer's, so the handshake also completes over a transport that does
        not buffer; they ask again after every input, for a handshake with more messages."""
        return self.initial_data() if self._header_due else b""

    def handshake_complete(self) -> bool:
        """True once the peer's header verified; raises its error if it did not, and
        TruncatedStreamError if the input ended before it was whole."""
        return self.opener.header_verified() and self.sealer.ready

    def _on_peer_header(self, key: bytes, peer_header: bytes) -> bytes:
        """The opener's hook once the peer's header verified: key both directions."""
        own = self.sealer.header
        self.sealer.install_secret(channel_secret(key, own, peer_header, self._context))
        return channel_secret(key, peer_header, own, self._context)
