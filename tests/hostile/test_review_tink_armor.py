"""Findings of the hostile review of Tink's streaming format and armor
(docs/review-2026-12-04-tink-armor.md).

Each test states what docs/TINK.md, docs/FORMAT.md 12, SECURITY.md or the project's standards
promise; each failed on the code as reviewed (8c5f999) and passes since its fix. Tink's own
package is the reference where the finding is a disagreement with Tink.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import json
import os
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcmstream import GcmStreamError, KeyFileError, TruncatedArmorError
from gcmstream.armor import BEGIN_LINE, dearmoring_reader
from gcmstream.cli import EXIT_OK, EXIT_TRUNCATED
from gcmstream.tinkfile import open_tink_file
from gcmstream.tinkstream import (
    TINK_KEY_TYPE_URL,
    TinkKeyset,
    TinkOpener,
    TinkSealer,
    TinkStreamingKey,
    read_tink_keyset,
    tink_decrypt,
    tink_encrypt,
)

from ..helpers import run_cli

tink = pytest.importorskip("tink", reason="the tink package is in the test extra")
from tink import secret_key_access, streaming_aead  # noqa: E402
from tink.proto import aes_gcm_hkdf_streaming_pb2, common_pb2, tink_pb2  # noqa: E402

streaming_aead.register()


def tink_handle(key_size: int, segment_size: int) -> Any:
    """A keyset handle Tink makes itself: one AES-GCM-HKDF streaming key (HKDF-SHA256)."""
    key_format = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKeyFormat(key_size=key_size)
    key_format.params.derived_key_size = key_size
    key_format.params.hkdf_hash_type = common_pb2.SHA256
    key_format.params.ciphertext_segment_size = segment_size
    template = tink_pb2.KeyTemplate(
        type_url=TINK_KEY_TYPE_URL, value=key_format.SerializeToString(), output_prefix_type=tink_pb2.RAW
    )
    return tink.new_keyset_handle(template)


def keyset_document(handle: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN)
    )
    return document


class _Kept(io.BytesIO):
    """A BytesIO that Tink's encrypting stream may close without losing what it wrote."""

    def close(self) -> None:
        pass


def tink_seal(handle: Any, plaintext: bytes) -> bytes:
    out = _Kept()
    with handle.primitive(streaming_aead.StreamingAead).new_encrypting_stream(out, b"") as stream:
        stream.write(plaintext)
    return out.getvalue()


def tink_open(handle: Any, ciphertext: bytes) -> bytes:
    primitive = handle.primitive(streaming_aead.StreamingAead)
    with primitive.new_decrypting_stream(io.BytesIO(ciphertext), b"") as stream:
        return bytes(stream.read())


def tink_accepts_keyset(text: str) -> bool:
    try:
        tink.json_proto_keyset_format.parse(text, secret_key_access.TOKEN).primitive(
            streaming_aead.StreamingAead
        )
    except tink.TinkError:
        return False
    return True


# -- finding 1: two threads sealing on one TinkSealer reuse a nonce --------------------------


class _RecordingAead:
    """An AESGCM stand-in that records every nonce it seals with, and holds the first seal
    of ``hold_thread`` until ``release`` is set (bounded), so that a second thread's call
    lands while the first is inside ``seal``."""

    def __init__(self, real: Any, release: threading.Event, inside: threading.Event) -> None:
        self.real, self.release, self.inside = real, release, inside
        self.nonces: list[bytes] = []
        self.hold_thread: int | None = None

    def encrypt_into(self, nonce: bytes, data: Any, associated: Any, out: Any) -> Any:
        self.nonces.append(bytes(nonce))
        if threading.get_ident() == self.hold_thread and not self.inside.is_set():
            self.inside.set()
            self.release.wait(5)
        return self.real.encrypt_into(nonce, data, associated, out)


def test_two_threads_sealing_on_one_tink_sealer_never_reuse_a_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    release, inside = threading.Event(), threading.Event()
    made: list[_RecordingAead] = []

    def recording(key: bytes) -> Any:
        made.append(_RecordingAead(AESGCM(key), release, inside))
        return made[-1]

    monkeypatch.setattr("gcmstream.tinkstream.AESGCM", recording)
    sealer = TinkSealer(TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64))
    (aead,) = made
    sealer.seal(b"")  # the header: both threads' calls below seal segments only
    outcome: list[BaseException | None] = []

    def first() -> None:
        aead.hold_thread = threading.get_ident()
        sealer.seal(b"A" * 1000)

    def second() -> None:
        try:
            sealer.seal(b"B" * 1000)
        except GcmStreamError as exc:  # a ConcurrencyError is the refusal gcmstream's Sealer gives
            outcome.append(exc)
        else:
            outcome.append(None)
        finally:
            release.set()

    holder = threading.Thread(target=first)
    holder.start()
    assert inside.wait(5)
    other = threading.Thread(target=second)
    other.start()
    other.join(10)
    release.set()
    holder.join(10)
    assert not holder.is_alive() and not other.is_alive()
    reused = len(aead.nonces) - len(set(aead.nonces))
    assert reused == 0, f"{reused} segments sealed under a nonce already used (of {len(aead.nonces)})"


def test_a_copied_tink_sealer_never_reuses_a_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    """gcmstream's own Sealer survives copy.copy (the copy shares its record counter); a
    TinkSealer's copy has its own index over the same key and nonce prefix."""
    made: list[_RecordingAead] = []

    def recording(key: bytes) -> Any:
        made.append(_RecordingAead(AESGCM(key), threading.Event(), threading.Event()))
        return made[-1]

    monkeypatch.setattr("gcmstream.tinkstream.AESGCM", recording)
    sealer = TinkSealer(TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64))
    (aead,) = made
    sealer.seal(b"")
    try:
        twin = copy.copy(sealer)
    except (TypeError, GcmStreamError):  # refusing the copy is a fix too
        return
    sealer.seal(b"A" * 1000)
    twin.seal(b"B" * 1000)
    reused = len(aead.nonces) - len(set(aead.nonces))
    assert reused == 0, f"{reused} segments sealed under a nonce already used (of {len(aead.nonces)})"


class _HoldingAead:
    """An AESGCM stand-in whose first ``decrypt_into`` (in the thread that made it) waits,
    after opening, until ``release`` is set (bounded)."""

    def __init__(self, real: Any, release: threading.Event, inside: threading.Event) -> None:
        self.real, self.release, self.inside = real, release, inside
        self.thread = threading.get_ident()

    def decrypt_into(self, nonce: bytes, data: Any, associated: Any, out: Any) -> Any:
        result = self.real.decrypt_into(nonce, data, associated, out)
        if threading.get_ident() == self.thread and not self.inside.is_set():
            self.inside.set()
            self.release.wait(5)
        return result


def _drain(opener: TinkOpener, results: dict[str, bytes | BaseException], name: str) -> None:
    got = b""
    try:
        for _ in range(1000):
            chunk = opener.read()
            if not chunk:
                break
            got += chunk
        results[name] = got
    except BaseException as exc:
        results[name] = exc


def test_two_threads_reading_one_tink_opener_release_no_byte_twice_and_raise_only_from_the_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64)
    plaintext = os.urandom(500)
    ciphertext = tink_encrypt(key, plaintext)
    release, inside = threading.Event(), threading.Event()
    opener = TinkOpener(key)
    opener.receive_data(ciphertext)
    opener.receive_eof()
    results: dict[str, bytes | BaseException] = {}
    # the first reader's segment-0 key is made in its thread: that one holds after opening
    monkeypatch.setattr("gcmstream.tinkstream.AESGCM", lambda key: _HoldingAead(AESGCM(key), release, inside))
    first = threading.Thread(target=_drain, args=(opener, results, "first"))
    first.start()
    assert inside.wait(5)
    monkeypatch.setattr("gcmstream.tinkstream.AESGCM", AESGCM)
    second = threading.Thread(target=_drain, args=(opener, results, "second"))
    second.start()
    second.join(10)
    release.set()
    first.join(10)
    assert not first.is_alive() and not second.is_alive()
    released = 0
    for outcome in results.values():
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, GcmStreamError), repr(outcome)  # ConcurrencyError
        else:
            released += len(outcome)
    assert released <= len(plaintext), "plaintext released twice"


# -- finding 2: open_tink_file refuses a file Tink and TinkOpener read -----------------------


def test_a_rotated_keyset_with_two_segment_sizes_opens_every_file_tink_reads(tmp_path: Path) -> None:
    # the primary (4096-byte segments) first, then the key that wrote the file (100-byte segments)
    primary, old = tink_handle(16, 4096), tink_handle(16, 100)
    document = keyset_document(primary)
    document["key"] += keyset_document(old)["key"]
    text = json.dumps(document)
    handle = tink.json_proto_keyset_format.parse(text, secret_key_access.TOKEN)
    keyset = read_tink_keyset(text)
    # a length whose file, laid out with the primary's 4096-byte segments, would end fewer
    # than 16 bytes into a segment
    for length in range(6000, 9000):
        ciphertext = tink_seal(old, os.urandom(length))
        if len(ciphertext) > 4096 and 0 < len(ciphertext) % 4096 < 16:
            break
    else:  # pragma: no cover - the layout above always has such a length
        pytest.fail("no length with the wanted layout")
    plaintext = tink_open(handle, ciphertext)  # Tink reads it with the same keyset
    assert tink_decrypt(keyset, ciphertext) == plaintext  # and so does the sequential reader
    path = tmp_path / "old.tink"
    path.write_bytes(ciphertext)
    with open_tink_file(path, keyset) as opened:
        assert opened.read() == plaintext


# -- finding 3: a failed open_tink_file closes its descriptor twice ----------------------------


def test_a_failed_open_tink_file_does_not_close_a_descriptor_it_no_longer_owns(tmp_path: Path) -> None:
    key = TinkStreamingKey(os.urandom(16))
    bad = tmp_path / "bad.tink"
    bad.write_bytes(bytes([key.header_size]) + os.urandom(100))  # segment 0 fails
    unrelated = tmp_path / "unrelated"
    unrelated.write_bytes(b"someone else's file")
    caught: BaseException | None = None
    try:
        open_tink_file(bad, key)
    except GcmStreamError as exc:
        caught = exc
    assert caught is not None
    # the number open_tink_file used (and closed) goes to an unrelated file, as the next open
    # in any thread of the process would get it
    traceback = caught.__traceback__
    number = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == "open_tink_file":
            number = traceback.tb_frame.f_locals["fd"]
        traceback = traceback.tb_next
    assert isinstance(number, int)
    spare = os.open(unrelated, os.O_RDONLY)  # the lowest free number: often ``number`` itself
    if spare != number:
        try:
            os.dup2(spare, number)
        finally:
            os.close(spare)
    try:
        del caught
        gc.collect()  # the half-made TinkDecryptedFile is finalized
        os.fstat(number)  # still the unrelated file's descriptor
        assert os.pread(number, 7, 0) == b"someone"
    finally:
        with contextlib.suppress(OSError):
            os.close(number)


# -- finding 4: keyset files: an error outside the tree, and keysets Tink refuses ------------


def primary_only() -> dict[str, Any]:
    return keyset_document(tink_handle(16, 4096))


def test_a_deeply_nested_keyset_file_is_a_key_file_error() -> None:
    """Fixed in this review (finding 4): json's RecursionError was outside the error tree."""
    text = "[" * 100_000 + "]" * 100_000  # 200 KB: under the 1 MiB bound
    with pytest.raises(KeyFileError):
        read_tink_keyset(text)


def _two_primaries() -> str:
    document = primary_only()
    other = keyset_document(tink_handle(32, 1 << 20))["key"][0]
    other["keyId"] = document["primaryKeyId"]
    document["key"].append(other)
    return json.dumps(document)


def _bool_primary() -> str:
    document = primary_only()
    document["primaryKeyId"] = True
    document["key"][0]["keyId"] = 1
    return json.dumps(document)


def _wide_key_id() -> str:
    document = primary_only()
    document["primaryKeyId"] = document["key"][0]["keyId"] = 1 << 40
    return json.dumps(document)


@pytest.mark.parametrize(
    "make", [_two_primaries, _bool_primary, _wide_key_id], ids=lambda make: make.__name__
)
def test_a_keyset_tink_refuses_is_refused(make: Any) -> None:
    text = make()
    assert not tink_accepts_keyset(text)
    with pytest.raises(KeyFileError):
        read_tink_keyset(text)


# -- finding 5: what the opener holds for input nobody authenticated --------------------------


def test_tink_opener_refuses_unbounded_unread_input() -> None:
    key = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=4096)
    opener = TinkOpener(key)
    opener.receive_data(bytes([key.header_size]) + os.urandom(23))  # a header, then garbage
    chunk = bytearray(1 << 20)  # a reused receive buffer: copied on every call
    with pytest.raises(GcmStreamError):  # gcmstream's Opener: BufferFullError
        for _ in range(32):  # 32 MiB, 8,192 segments, none read
            opener.receive_data(chunk)


def _keyset_with_a_large_old_key() -> tuple[TinkKeyset, TinkStreamingKey]:
    # the primary has 4 KiB segments; an old key of the same size has 64 MiB segments
    primary = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=4096, key_id=1)
    old = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64 << 20, key_id=2)
    return TinkKeyset([primary, old], primary), primary


def test_an_opener_allocates_no_more_than_the_key_the_stream_uses() -> None:
    keyset, primary = _keyset_with_a_large_old_key()
    ciphertext = tink_encrypt(primary, b"five!")
    opener = TinkOpener(keyset)
    opener.receive_data(ciphertext)
    opener.receive_eof()
    tracemalloc.start()
    try:
        assert opener.read() == b"five!"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes to open a 5-byte message under a 4 KiB-segment key"


def test_a_live_stream_under_the_primary_is_read_as_it_comes_beside_a_large_old_key() -> None:
    keyset, primary = _keyset_with_a_large_old_key()
    sealer = TinkSealer(primary)
    sent = bytes(sealer.seal(os.urandom(100_000)))  # 24 segments, the stream not ended
    opener = TinkOpener(keyset)
    opener.receive_data(sent)
    got = opener.read()
    assert got, "nothing released from 24 complete segments of the primary's stream"


def test_input_in_one_byte_pieces_is_held_at_about_its_size() -> None:
    """A peer without the key sends a header and then one segment of 64 KiB a byte at a time
    (one byte a TCP segment, which a reader's recv returns as it comes): the opener must hold
    it all before it can try segment 0, and should hold it as bytes, not as 65,536 objects."""
    key = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64 << 10)
    # the header and segment 0 fill one segment size: all held until one more byte comes
    sent = bytes([key.header_size]) + os.urandom(key.ciphertext_segment_size - 1)
    opener = TinkOpener(key)
    tracemalloc.start()
    try:
        for at in range(len(sent)):
            opener.receive_data(sent[at : at + 1])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert opener.read() is None
    assert held < 4 * len(sent), f"{held} bytes held for {len(sent)} bytes of input"


# -- finding 7: sealing a view of the sealer's own output seals other bytes --------------------


def test_sealing_the_sealers_previous_output_seals_those_bytes() -> None:
    key = TinkStreamingKey(os.urandom(16), ciphertext_segment_size=64)
    sealer = TinkSealer(key)
    first = sealer.seal(os.urandom(3000))
    kept = bytes(first)
    second = bytes(sealer.seal(first[:1000]))  # the view, as returned (valid until this call)
    ciphertext = kept + second + bytes(sealer.close())
    assert tink_decrypt(key, ciphertext)[3000:] == kept[:1000]


# -- finding 8: armor cut inside its begin line is named as unsupported input -----------------


@pytest.mark.parametrize("cut", [1, 5, 20, len(BEGIN_LINE) - 1])
def test_armor_cut_inside_its_begin_line_is_a_truncation(tmp_path: Path, cut: int) -> None:
    """decrypt says "unsupported input: ... this reader takes the binary form" (exit 7) for
    armored text cut inside its begin line, where a cut binary file and armor cut after its
    begin line are "truncated input" (exit 5)."""
    key = tmp_path / "k.key"
    assert run_cli("keygen", "-o", key).status == EXIT_OK
    text = run_cli("encrypt", "-a", "-k", key, input=b"hello").stdout
    result = run_cli("decrypt", "-k", key, input=text[:cut])
    assert result.status == EXIT_TRUNCATED and "truncated input" in result.stderr, result.stderr
    assert result.stdout == b""
    with pytest.raises(TruncatedArmorError):
        dearmoring_reader(io.BytesIO(text[:cut]).readinto)(bytearray(10))


# -- what held: the sequential reader against Tink, on edited ciphertexts of a mixed keyset ---

EXAMPLES = min(int(os.environ.get("HOSTILE_FUZZ_EXAMPLES", "200")), 300)


@pytest.fixture(scope="module")
def mixed_keyset() -> tuple[list[Any], Any, TinkKeyset]:
    """Four Tink keys of both key sizes and four segment sizes (41 is the smallest Tink allows
    for AES-128), merged into one keyset: Tink's handle and gcmstream's reading of its JSON."""
    handles = [tink_handle(16, 64), tink_handle(32, 100), tink_handle(16, 200), tink_handle(16, 41)]
    document = keyset_document(handles[0])
    for handle in handles[1:]:
        document["key"] += keyset_document(handle)["key"]
    text = json.dumps(document)
    return handles, tink.json_proto_keyset_format.parse(text, secret_key_access.TOKEN), read_tink_keyset(text)


def _edit(ciphertext: bytes, data: st.DataObject) -> bytes:
    edited = bytearray(ciphertext)
    for _ in range(data.draw(st.integers(0, 2))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete", "repeat"]))
        at = data.draw(st.integers(0, len(edited)))
        if op == "flip" and at < len(edited):
            edited[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del edited[at:]
        elif op == "insert":
            edited[at:at] = data.draw(st.binary(min_size=1, max_size=64))
        elif op == "delete":
            del edited[at : at + data.draw(st.sampled_from([1, 16, 64]))]
        elif op == "repeat":
            end = data.draw(st.integers(at, len(edited)))
            edited[end:end] = edited[at:end]
    return bytes(edited)


def _released(
    keyset: TinkKeyset, ciphertext: bytes, data: st.DataObject
) -> tuple[bytes, BaseException | None]:
    """Feed in drawn piece sizes and buffer types (a bytearray zeroed once given), reading
    between pieces in a drawn style; what was released, and the error."""
    opener = TinkOpener(keyset)
    piece = data.draw(st.sampled_from([1, 7, 16, 64, 100, 1 << 20]))
    kind = data.draw(st.sampled_from(["bytes", "bytearray", "memoryview"]))
    size = data.draw(st.sampled_from([0, 1, 9, 48, 300]))
    got = bytearray()

    def drain() -> None:
        for _ in range(10_000):
            if size == 0:
                chunk = opener.read()
            else:
                buffer = bytearray(size)
                count = opener.readinto(buffer)
                chunk = None if count is None else bytes(buffer[:count])
            if not chunk:
                return
            got.extend(chunk)

    try:
        for start in range(0, len(ciphertext), piece):
            part = bytearray(ciphertext[start : start + piece])
            opener.receive_data(
                bytes(part) if kind == "bytes" else part if kind == "bytearray" else memoryview(part)
            )
            part[:] = bytes(len(part))
            drain()
        opener.receive_eof()
        drain()
    except GcmStreamError as exc:
        return bytes(got), exc
    return bytes(got), None


@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(data=st.data())
def test_tink_and_the_sequential_reader_agree_on_edited_ciphertexts_of_a_mixed_keyset(
    mixed_keyset: tuple[list[Any], Any, TinkKeyset], data: st.DataObject
) -> None:
    handles, handle, keyset = mixed_keyset
    plaintext = (bytes(range(256)) * 4)[: data.draw(st.sampled_from([0, 1, 5, 30, 60, 100, 300, 1000]))]
    ciphertext = _edit(tink_seal(data.draw(st.sampled_from(handles)), plaintext), data)
    try:
        tinks: bytes | None = tink_open(handle, ciphertext)
    except tink.TinkError:
        tinks = None
    got, error = _released(keyset, ciphertext, data)
    if tinks is not None:
        assert error is None and got == tinks
    else:
        assert error is not None, "a stream Tink refuses was read to its end"
        assert plaintext.startswith(got)  # only authenticated segments, in order
