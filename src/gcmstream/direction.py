"""One direction of a stream: its key generation, its position under that key, and the per-key
limits that the Sealer and the Opener both enforce.

The nonce of record ``seq`` under a key generation is ``iv XOR seq`` (``TrafficKeys``); it is
derived from the position, never stored, so the only way to reuse a nonce would be to move the
position backwards, which nothing here does. A direction advances by exactly one record per
sealed or opened record, and restarts at 0 only together with a new key generation.
"""

from __future__ import annotations

from .errors import LimitReachedError, MalformedRecordError
from .format import FLAG_FINAL, FLAG_KEY_UPDATE, KeyLimits, Suite, TrafficKeys

__all__ = ("Direction", "far_from_limits", "plan_flags")


class Direction:
    """Keys and position of one direction: ``seq`` records and ``key_bytes`` plaintext bytes
    under the current key generation, ``records_before``/``bytes_before`` under earlier ones."""

    __slots__ = ("bytes_before", "key_bytes", "keys", "limits", "records_before", "seq")

    def __init__(self, secret: bytes, suite: Suite, limits: KeyLimits) -> None:
        self.keys = TrafficKeys(secret, suite)
        self.limits = limits
        self.seq = 0
        self.key_bytes = 0
        self.records_before = 0
        self.bytes_before = 0

    def __repr__(self) -> str:  # never show key material
        return f"<Direction generation={self.keys.generation} seq={self.seq}>"

    @property
    def records(self) -> int:
        """Records sealed or opened in this direction, all key generations together."""
        return self.records_before + self.seq

    @property
    def bytes(self) -> int:
        return self.bytes_before + self.key_bytes

    def check_open(self, size: int) -> None:
        """Refuse (before decrypting) a record that would take the peer past a hard limit."""
        limits = self.limits
        if self.seq >= limits.hard_records:
            raise MalformedRecordError(
                f"record {self.records}: the peer passed the per-key record limit", record_number=self.records
            )
        if self.key_bytes + size > limits.hard_bytes:
            raise MalformedRecordError(
                f"record {self.records}: the peer passed the per-key byte limit", record_number=self.records
            )

    def advance(self, size: int, flags: int) -> None:
        """Account for one record of ``size`` plaintext bytes carrying ``flags``."""
        if flags & FLAG_KEY_UPDATE:
            self.records_before += self.seq + 1
            self.bytes_before += self.key_bytes + size
            self.seq = self.key_bytes = 0
            self.keys = self.keys.next()
        else:
            self.seq += 1
            self.key_bytes += size


def far_from_limits(direction: Direction, records: int, record_size: int, update_requested: bool) -> bool:
    """True when ``records`` more records of up to ``record_size`` bytes stay below every
    update limit (so below the hard ones, which are at least as high): then they are all plain
    records, and planning them one by one would find nothing. The Sealer's per-call shortcut."""
    limits = direction.limits
    return (
        not update_requested
        and direction.seq + records + 1 < limits.update_after_records
        and direction.key_bytes + (records + 1) * record_size < limits.update_after_bytes
    )


def plan_flags(
    direction: Direction,
    sizes: list[int],
    *,
    final: bool,
    update_requested: bool,
    auto_update: bool,
    record_size: int,
) -> list[int]:
    """The flags of each record that sealing ``sizes`` from ``direction``'s position would
    make, or LimitReachedError (nothing sealed) if one of them would pass a hard limit.

    Pure: the Sealer checks a whole call with it before sealing anything, then seals with the
    flags it returned, so the check and the sealing cannot disagree. The last slot of a key is
    kept for a record that carries KEY_UPDATE (or FINAL): a plain record there would leave no
    way to move on to the next key.
    """
    limits = direction.limits
    seq, key_bytes, update = direction.seq, direction.key_bytes, update_requested
    last_index = len(sizes) - 1
    flags = []
    for index, length in enumerate(sizes):
        last = final and index == last_index
        due = not last and (
            update
            or (
                auto_update
                and (
                    seq + 1 >= limits.update_after_records
                    or key_bytes + length >= limits.update_after_bytes
                    # in time: the next full record must still fit under this key's hard limit
                    or key_bytes + length + record_size > limits.hard_bytes
                )
            )
        )
        if (
            seq >= limits.hard_records
            or key_bytes + length > limits.hard_bytes
            or (seq + 1 >= limits.hard_records and not due and not last)
        ):
            raise LimitReachedError(
                f"sealing would pass the hard limit of {limits.hard_records} records or "
                f"{limits.hard_bytes} bytes per key; call update_key() first"
            )
        if due:
            flags.append(FLAG_KEY_UPDATE)
            seq, key_bytes, update = 0, 0, False
        else:
            flags.append(FLAG_FINAL if last else 0)
            seq, key_bytes = seq + 1, key_bytes + length
    return flags
