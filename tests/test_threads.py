"""Misuse from two threads: a Sealer or Opener shared without a lock must fail loudly.

The attack on a shared Sealer is nonce reuse: two threads sealing at once could both read the
same sequence number, and AES-GCM under a repeated nonce leaks the XOR of the plaintexts and
the authentication key. These tests look for it the way an outsider would, by comparing the
keystreams of the records that came out (ciphertext XOR known plaintext), not through internals.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from gcmstream import Channel, ConcurrencyError, Opener, Role, Sealer, UsageError
from gcmstream.format import RECORD_HEADER, RECORD_HEADER_SIZE, TAG_SIZE

from .helpers import KEY

ROUNDS = 400  # records; an unguarded Sealer reused nonces within the first few dozen
MAX_ROUNDS = 20_000  # per thread, at most: the loops stop once they have overlapped
SIZE = 32 * 1024  # large enough that encrypt_into releases the GIL for microseconds


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Make the interpreter switch threads as often as it can, so the two threads interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_threads(work: Callable[[int], None], count: int = 2) -> None:
    start = threading.Barrier(count)

    def started(index: int) -> None:
        start.wait(timeout=30)  # both begin together, so their calls overlap
        work(index)

    threads = [threading.Thread(target=started, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a thread did not finish"


def records(wire: bytes) -> Iterator[bytes]:
    """The ciphertexts (tag excluded) of the records in ``wire``, which has no header."""
    pos = 0
    while pos < len(wire):
        _, length = RECORD_HEADER.unpack_from(wire, pos)
        yield wire[pos + RECORD_HEADER_SIZE : pos + RECORD_HEADER_SIZE + length - TAG_SIZE]
        pos += RECORD_HEADER_SIZE + length


def test_a_sealer_shared_by_two_threads_refuses_instead_of_reusing_a_nonce(switch_often: None) -> None:
    sealer = Sealer(KEY, reuse_output=False)  # each output is fresh memory: threads keep theirs
    sealer.take_header()
    sealed: list[tuple[bytes, bytes]] = []  # (plaintext, record wire)
    refused = [0, 0]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for _ in range(MAX_ROUNDS):
                if len(sealed) >= ROUNDS and any(refused):
                    return  # enough overlap seen
                plaintext = os.urandom(SIZE)
                try:
                    out = bytes(sealer.seal(plaintext, flush=True))
                except ConcurrencyError:
                    refused[index] += 1
                    continue
                sealed.append((plaintext, out))
        except BaseException as exc:  # surfaces in the main thread below
            errors.append(exc)

    run_threads(work)
    assert not errors, errors
    keystreams = set()
    for plaintext, wire in sealed:
        (ciphertext,) = records(wire)
        keystream = bytes(a ^ b for a, b in zip(ciphertext[:32], plaintext[:32], strict=True))
        keystreams.add(keystream)
    assert len(keystreams) == len(sealed), "two records were sealed under one nonce"
    assert sum(refused) > 0, "the threads never overlapped: the test proved nothing"
    # and the records still form one valid stream, in the order they were sealed
    assert sealer.records_sealed == len(sealed)


def test_an_opener_shared_by_two_threads_refuses_and_never_repeats_or_loses_a_record(
    switch_often: None,
) -> None:
    count = 2 * ROUNDS
    chunks = [os.urandom(SIZE) for _ in range(count)]
    sealer = Sealer(KEY, record_size=SIZE)
    wire = bytes(sealer.seal(b"".join(chunks), final=True))
    opener = Opener(KEY)
    opener.receive_data(wire)
    opener.receive_eof()
    got: list[bytes] = []
    refused = [0, 0]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        buffer = bytearray(SIZE)  # one record per call
        try:
            while True:
                try:
                    n = opener.readinto(buffer)
                except ConcurrencyError:
                    refused[index] += 1
                    continue
                if not n:
                    return
                got.append(bytes(buffer[:n]))
        except BaseException as exc:
            errors.append(exc)

    run_threads(work)
    assert not errors, errors
    assert sorted(got) == sorted(chunks), "a record was lost, repeated or altered"
    assert sum(refused) > 0, "the threads never overlapped: the test proved nothing"


def test_concurrency_error_is_in_the_tree_and_a_runtime_error() -> None:
    assert issubclass(ConcurrencyError, UsageError)
    assert issubclass(ConcurrencyError, RuntimeError)


def test_a_peer_header_arriving_while_the_sealer_is_busy_still_keys_the_channel() -> None:
    """Review finding: keying a channel's sealer took the sealer's turn, so a header that
    arrived while another thread was inside seal() left the channel half-keyed for good. The
    other thread is simulated by holding the sealer's turn, which is exactly its state then."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(initiator.initial_data())
    initiator.opener.receive_data(responder.data_to_send())  # its header and Finished
    record = bytes(initiator.sealer.seal(b"hello", final=True))
    initiator_finished = initiator.data_to_send()  # version 2: this, not the header, keys it
    with responder.sealer._turn:  # another thread's seal() is under way
        responder.opener.receive_data(initiator_finished)
        with pytest.raises(ConcurrencyError):
            responder.sealer.seal(b"x")  # the busy sealer still refuses a second caller
    assert responder.handshake_complete()
    responder.opener.receive_data(record)
    assert responder.opener.read() == b"hello"
    assert responder.sealer.seal(b"reply", flush=True)
