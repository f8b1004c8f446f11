"""Tink's AES-GCM-HKDF streaming format against the real ``tink`` package (issue 26): Tink
writes and gcmstream reads, gcmstream writes and Tink reads, across key sizes, HKDF hashes,
segment sizes, plaintext lengths around every boundary and associated data up to 64 KiB; every
tampering is refused by both, and gcmstream releases no byte of a segment that did not
authenticate."""

from __future__ import annotations

import base64
import copy
import io
import itertools
import json
import pickle
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gcmstream import (
    AuthenticationError,
    KeyFileError,
    MalformedHeaderError,
    OutOfRangeError,
    ProtocolError,
    StreamBrokenError,
    StreamClosedError,
    TruncatedStreamError,
    UnsupportedBufferError,
)
from gcmstream.tinkstream import (
    TinkHash,
    TinkKeyset,
    TinkOpener,
    TinkPhase,
    TinkSealer,
    TinkStreamingKey,
    read_tink_keyset,
    tink_decrypt,
    tink_encrypt,
)

tink = pytest.importorskip("tink", reason="the tink package is in the test extra")
from tink import aead, secret_key_access, streaming_aead  # noqa: E402
from tink.proto import aes_gcm_hkdf_streaming_pb2, common_pb2, tink_pb2  # noqa: E402

streaming_aead.register()
aead.register()
TEMPLATES = streaming_aead.streaming_aead_key_templates
HASHES = {
    TinkHash.SHA1: common_pb2.SHA1,
    TinkHash.SHA256: common_pb2.SHA256,
    TinkHash.SHA512: common_pb2.SHA512,
}


class _Kept(io.BytesIO):
    """A BytesIO that Tink's encrypting stream may close without losing what it wrote."""

    def close(self) -> None:
        pass


def tink_handle(key_size: int, hkdf_hash: TinkHash, segment_size: int) -> Any:
    """A keyset handle made by Tink itself for these parameters (the key template built as the
    deprecated ``create_aes_gcm_hkdf_streaming_key_template`` builds it)."""
    key_format = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKeyFormat(key_size=key_size)
    key_format.params.derived_key_size = key_size
    key_format.params.hkdf_hash_type = HASHES[hkdf_hash]
    key_format.params.ciphertext_segment_size = segment_size
    template = tink_pb2.KeyTemplate(
        type_url="type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey",
        value=key_format.SerializeToString(),
        output_prefix_type=tink_pb2.RAW,
    )
    return tink.new_keyset_handle(template)


def keyset_json(handle: Any) -> str:
    return str(tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN))


def tink_seal(handle: Any, plaintext: bytes, associated_data: bytes) -> bytes:
    out = _Kept()
    with handle.primitive(streaming_aead.StreamingAead).new_encrypting_stream(out, associated_data) as stream:
        stream.write(plaintext)
    return out.getvalue()


def tink_open(handle: Any, ciphertext: bytes, associated_data: bytes) -> bytes:
    primitive = handle.primitive(streaming_aead.StreamingAead)
    with primitive.new_decrypting_stream(io.BytesIO(ciphertext), associated_data) as stream:
        return bytes(stream.read())


def feed(opener: TinkOpener, ciphertext: bytes, piece: int, read_size: int = 1000) -> bytes:
    """Feed ``ciphertext`` in pieces of ``piece`` bytes, reading between pieces with
    ``readinto`` of ``read_size`` bytes; returns all plaintext."""
    got = bytearray()
    buffer = bytearray(read_size)

    def drain() -> None:
        while count := opener.readinto(buffer):
            got.extend(buffer[:count])

    for start in range(0, len(ciphertext), piece):
        opener.receive_data(ciphertext[start : start + piece])
        drain()
    opener.receive_eof()
    drain()
    return bytes(got)


def lengths(key: TinkStreamingKey) -> list[int]:
    first = key.ciphertext_segment_size - key.header_size - 16
    middle = key.ciphertext_segment_size - 16
    return sorted(
        {
            0,
            1,
            first - 1,
            first,
            first + 1,
            first + middle - 1,
            first + middle,
            first + middle + 1,
            first + 3 * middle + 7,
        }
    )


# -- interoperation --------------------------------------------------------------------------

# every key size and HKDF hash; segment sizes from the smallest Tink accepts to 1 MiB
PARAMETERS = [
    (key_size, hkdf_hash, segment)
    for key_size, hkdf_hash in itertools.product((16, 32), TinkHash)
    for segment in (key_size + 25, 4096)
] + [(16, TinkHash.SHA256, 1 << 20), (32, TinkHash.SHA512, 1 << 20)]


@pytest.mark.parametrize(("key_size", "hkdf_hash", "segment"), PARAMETERS)
def test_tink_writes_and_gcmstream_reads_and_back(key_size: int, hkdf_hash: TinkHash, segment: int) -> None:
    handle = tink_handle(key_size, hkdf_hash, segment)
    keyset = read_tink_keyset(keyset_json(handle))
    key = keyset.primary
    assert (key.derived_key_size, key.hkdf_hash, key.ciphertext_segment_size) == (
        key_size,
        hkdf_hash,
        segment,
    )
    rng = random.Random(segment * key_size + hkdf_hash)
    for length in lengths(key):
        plaintext = rng.randbytes(length)
        associated_data = rng.randbytes(rng.choice((0, 1, 100)))
        theirs = tink_seal(handle, plaintext, associated_data)
        assert tink_decrypt(keyset, theirs, associated_data) == plaintext, length
        ours = tink_encrypt(keyset, plaintext, associated_data)
        assert len(ours) == len(theirs)  # the same segmentation, byte for byte in length
        assert tink_open(handle, ours, associated_data) == plaintext, length


@pytest.mark.parametrize("ad_size", [0, 1, 255, 4096, 65536])
def test_associated_data_up_to_64_kib_is_the_hkdf_info_on_both_sides(ad_size: int) -> None:
    handle = tink_handle(32, TinkHash.SHA256, 4096)
    keyset = read_tink_keyset(keyset_json(handle))
    associated_data = random.Random(ad_size).randbytes(ad_size)
    plaintext = b"associated " * 900
    assert tink_decrypt(keyset, tink_seal(handle, plaintext, associated_data), associated_data) == plaintext
    assert tink_open(handle, tink_encrypt(keyset, plaintext, associated_data), associated_data) == plaintext
    with pytest.raises(AuthenticationError):
        tink_decrypt(keyset, tink_seal(handle, plaintext, associated_data), associated_data + b"x")


@pytest.mark.parametrize("piece", [1, 7, 24, 25, 4071, 4096, 4097, 65536])
def test_every_feeding_style_reads_the_same_plaintext(piece: int) -> None:
    handle = tink_handle(16, TinkHash.SHA256, 4096)
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = random.Random(piece).randbytes(3 * 4080 + 99 if piece > 1 else 5000)
    ciphertext = tink_seal(handle, plaintext, b"ad")
    for read_size in (1, 100, 4080, 1 << 20):
        if piece == 1 and read_size == 1:
            continue  # 5,000 calls each way is enough; the sizes above cover the rest
        assert feed(TinkOpener(keyset, b"ad"), ciphertext, piece, read_size) == plaintext
    # bytearray pieces are copied: changing them after receive_data changes nothing
    opener = TinkOpener(keyset, b"ad")
    scratch = bytearray(ciphertext)
    opener.receive_data(scratch)
    scratch[:] = bytes(len(scratch))
    opener.receive_eof()
    assert opener.read() == plaintext


def test_sealing_in_every_call_size_is_what_tink_reads() -> None:
    handle = tink_handle(16, TinkHash.SHA256, 4096)
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = random.Random(5).randbytes(5 * 4080 + 3)
    for call in (1, 23, 4056, 4057, 4080, 4081, 9000, len(plaintext)):
        sealer = TinkSealer(keyset, b"ad")
        parts = [
            bytes(sealer.seal(plaintext[start : start + call])) for start in range(0, len(plaintext), call)
        ]
        parts.append(bytes(sealer.close()))
        assert tink_open(handle, b"".join(parts), b"ad") == plaintext, call
        with pytest.raises(StreamClosedError):
            sealer.seal(b"x")
        with pytest.raises(StreamClosedError):
            sealer.close()


def test_a_keyset_with_rotated_keys_reads_the_old_ciphertexts_and_seals_with_the_primary() -> None:
    manager = tink.new_keyset_handle(TEMPLATES.AES128_GCM_HKDF_4KB)
    old_json = keyset_json(manager)
    old = read_tink_keyset(old_json)
    old_ciphertext = tink_encrypt(old, b"old data" * 1000, b"")
    # a second key, made primary by editing the JSON as tinkey's promote does
    second = json.loads(keyset_json(tink.new_keyset_handle(TEMPLATES.AES256_GCM_HKDF_1MB)))
    document = json.loads(old_json)
    document["key"].append(second["key"][0])
    document["primaryKeyId"] = second["primaryKeyId"]
    rotated_json = json.dumps(document)
    rotated = read_tink_keyset(rotated_json)
    assert rotated.primary.key_id == second["primaryKeyId"]
    assert tink_decrypt(rotated, old_ciphertext, b"") == b"old data" * 1000
    opener = TinkOpener(rotated, b"")
    opener.receive_data(old_ciphertext)
    opener.receive_eof()
    assert opener.read() == b"old data" * 1000
    assert opener.key is not None and opener.key.key_id == old.primary.key_id
    rotated_handle = tink.json_proto_keyset_format.parse(rotated_json, secret_key_access.TOKEN)
    assert tink_open(rotated_handle, tink_encrypt(rotated, b"new", b""), b"") == b"new"
    with pytest.raises(MalformedHeaderError, match="no key of this keyset"):  # 32-byte key: 40-byte header
        tink_decrypt(old, tink_encrypt(rotated, b"new", b""), b"")


# -- the keyset file ---------------------------------------------------------------------------


def test_the_key_protobuf_reader_agrees_with_protobuf_itself() -> None:
    rng = random.Random(26)
    for _ in range(200):
        proto = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey()
        proto.params.derived_key_size = rng.choice((16, 32))
        proto.params.hkdf_hash_type = HASHES[rng.choice(list(TinkHash))]
        proto.params.ciphertext_segment_size = rng.randrange(proto.params.derived_key_size + 25, 1 << 31)
        proto.key_value = rng.randbytes(rng.randrange(proto.params.derived_key_size, 80))
        entry = {
            "keyData": {
                "typeUrl": "type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey",
                "value": base64.b64encode(proto.SerializeToString()).decode(),
                "keyMaterialType": "SYMMETRIC",
            },
            "status": "ENABLED",
            "keyId": 7,
            "outputPrefixType": "RAW",
        }
        key = read_tink_keyset(json.dumps({"primaryKeyId": 7, "key": [entry]})).primary
        assert key.key_value == proto.key_value
        assert key.derived_key_size == proto.params.derived_key_size
        assert key.ciphertext_segment_size == proto.params.ciphertext_segment_size
        assert HASHES[key.hkdf_hash] == proto.params.hkdf_hash_type


def _edited(change: Callable[[dict[str, Any]], None]) -> str:
    document = json.loads(keyset_json(tink.new_keyset_handle(TEMPLATES.AES128_GCM_HKDF_4KB)))
    change(document)
    return json.dumps(document)


def _set_value(document: dict[str, Any], raw: bytes) -> None:
    document["key"][0]["keyData"]["value"] = base64.b64encode(raw).decode()


# version 0, segment size 4096, derived key size 16, HKDF-SHA256, a 16-byte key value
GOOD_KEY_PROTOBUF = b"\x12\x07\x08\x80\x20\x10\x10\x18\x03\x1a\x10" + bytes(16)


KEYSET_FAULTS: dict[str, tuple[Callable[[], str | bytes], str]] = {
    "not JSON": (lambda: "{not json", "not a Tink JSON keyset"),
    "a list": (lambda: "[]", "top level"),
    "an encrypted keyset": (lambda: json.dumps({"encryptedKeyset": "AAAA", "keysetInfo": {}}), "KMS"),
    "an AEAD keyset": (
        lambda: keyset_json(tink.new_keyset_handle(aead.aead_key_templates.AES128_GCM)),
        "AesGcmKey",
    ),
    "a CTR-HMAC streaming keyset": (
        lambda: keyset_json(tink.new_keyset_handle(TEMPLATES.AES128_CTR_HMAC_SHA256_4KB)),
        "AesCtrHmacStreamingKey",
    ),
    "no keys": (lambda: json.dumps({"primaryKeyId": 1, "key": []}), "no 'key' list"),
    "two keys with the primary's ID": (
        lambda: _edited(lambda d: d["key"].append(dict(d["key"][0]))),
        "two enabled keys with the primary's ID",
    ),
    "an entry not an object": (lambda: json.dumps({"primaryKeyId": 1, "key": [1]}), "entry is not an object"),
    "the primary disabled": (lambda: _edited(lambda d: d["key"][0].update(status="DISABLED")), "primary key"),
    "an unknown status": (lambda: _edited(lambda d: d["key"][0].update(status="MAYBE")), "unknown status"),
    "a TINK output prefix": (lambda: _edited(lambda d: d["key"][0].update(outputPrefixType="TINK")), "RAW"),
    "an entry without keyData": (lambda: _edited(lambda d: d["key"][0].pop("keyData")), "lacks its keyId"),
    "an entry without a value": (
        lambda: _edited(lambda d: d["key"][0]["keyData"].pop("value")),
        "has no value",
    ),
    "parameters as a varint": (
        lambda: _edited(lambda d: _set_value(d, b"\x10\x05")),
        "malformed key protobuf",
    ),
    "a segment size as bytes": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x02\x0a\x00\x1a\x10" + bytes(16))),
        "malformed key parameters",
    ),
    "no segment size": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x04\x10\x10\x18\x03\x1a\x10" + bytes(16))),
        "ciphertext_segment_size .* got 0",
    ),
    "no derived key size": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x05\x08\x80\x20\x18\x03\x1a\x10" + bytes(16))),
        "derived_key_size must be 16 or 32, got 0",
    ),
    # Tink's protobuf parser refuses both; gcmstream's must not read the fields before them
    "a field number 0": (
        lambda: _edited(lambda d: _set_value(d, b"\x00\x00" + GOOD_KEY_PROTOBUF)),
        "field number 0",
    ),
    "a cut fixed field": (
        lambda: _edited(lambda d: _set_value(d, GOOD_KEY_PROTOBUF + b"\x21" + bytes(3))),
        "fixed field past the end",
    ),
    "a wire type 3": (lambda: _edited(lambda d: _set_value(d, GOOD_KEY_PROTOBUF + b"\x23")), "wire type 3"),
    "a cut varint": (
        lambda: _edited(lambda d: _set_value(d, GOOD_KEY_PROTOBUF + b"\x20\x80")),
        "varint past the end",
    ),
    "an 11-byte varint": (
        lambda: _edited(lambda d: _set_value(d, GOOD_KEY_PROTOBUF + b"\x20" + b"\x80" * 10 + b"\x00")),
        "varint over 10 bytes",
    ),
    "a value not base64": (lambda: _edited(lambda d: d["key"][0]["keyData"].update(value="!!")), "base64"),
    "a truncated protobuf": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x07\x08\x80\x20")),
        "past the end",
    ),
    "a varint over 10 bytes": (lambda: _edited(lambda d: _set_value(d, b"\x08" + b"\xff" * 11)), "varint"),
    "version 1": (lambda: _edited(lambda d: _set_value(d, b"\x08\x01")), "version"),
    "a key too short": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x07\x08\x80\x20\x10\x10\x18\x03\x1a\x08" + bytes(8))),
        "at least 16 bytes",
    ),
    "a segment too small": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x06\x08\x28\x10\x10\x18\x03\x1a\x10" + bytes(16))),
        "ciphertext_segment_size",
    ),
    "an MD5 hash type": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x07\x08\x80\x20\x10\x10\x18\x02\x1a\x10" + bytes(16))),
        "HKDF hash type 2",
    ),
    "over 1 MiB": (lambda: " " * ((1 << 20) + 1), "at most"),
    # a missing field reads as protobuf's default (empty), and the check it then fails names
    # what was found (mutation run of 2026-12-04, branch mtink)
    "no parameters": (lambda: _edited(lambda d: _set_value(d, b"\x1a\x10" + bytes(16))), "HKDF hash type 0"),
    "no key value": (
        lambda: _edited(lambda d: _set_value(d, b"\x12\x07\x08\x80\x20\x10\x10\x18\x03")),
        "at least 16 bytes .* got 0",
    ),
}


@pytest.mark.parametrize("fault", KEYSET_FAULTS)
def test_a_keyset_gcmstream_cannot_use_is_refused_with_its_reason(fault: str) -> None:
    make, reason = KEYSET_FAULTS[fault]
    text = make()
    with pytest.raises(KeyFileError, match=reason) as caught:
        read_tink_keyset(text)
    if fault not in (
        "a key too short",
        "a segment too small",
        "an MD5 hash type",
        "version 1",
        "a truncated protobuf",
    ):
        return
    # the message never shows the key value
    assert base64.b64encode(bytes(16)).decode() not in str(caught.value)


def test_unknown_fields_of_every_wire_type_are_skipped_as_protobuf_skips_them() -> None:
    """Fields the reader does not know (a varint, 64-bit, length-delimited and 32-bit one,
    before and after the known ones, and inside the parameters) are skipped, as protobuf
    itself skips them: the key read is the key protobuf reads."""
    unknown = b"\x20\x05" + b"\x29" + bytes(range(8)) + b"\x32\x02ab" + b"\x3d" + bytes(range(4))
    params = b"\x08\x80\x20\x10\x20\x18\x04" + unknown
    raw = unknown + b"\x12" + bytes([len(params)]) + params + b"\x1a\x20" + bytes(range(32)) + unknown
    proto = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey.FromString(raw)
    key = read_tink_keyset(_edited(lambda d: _set_value(d, raw))).primary
    assert key.key_value == proto.key_value == bytes(range(32))
    assert key.derived_key_size == proto.params.derived_key_size == 32
    assert key.ciphertext_segment_size == proto.params.ciphertext_segment_size == 4096
    assert HASHES[key.hkdf_hash] == proto.params.hkdf_hash_type == common_pb2.SHA512


def test_a_keyset_file_of_exactly_1_mib_is_read() -> None:
    text = _edited(lambda d: None)
    text += " " * ((1 << 20) - len(text))
    assert len(text) == 1 << 20
    assert read_tink_keyset(text).primary.key_id == json.loads(text)["primaryKeyId"]


@pytest.mark.parametrize("key_id", [0, (1 << 32) - 1, 1 << 32, -1])
def test_key_ids_are_uint32_from_0_to_2_to_the_32_less_1(key_id: int) -> None:
    def set_id(document: dict[str, Any]) -> None:
        document["primaryKeyId"] = document["key"][0]["keyId"] = key_id

    text = _edited(set_id)
    if 0 <= key_id < 1 << 32:
        assert read_tink_keyset(text).primary.key_id == key_id
    else:
        with pytest.raises(KeyFileError, match="not a key ID"):
            read_tink_keyset(text)


@pytest.mark.parametrize("status", ["DISABLED", "DESTROYED"])
def test_a_disabled_key_beside_an_enabled_primary_is_left_out(status: str) -> None:
    def add_disabled(document: dict[str, Any]) -> None:
        # one before the primary (reading goes on past it), one after
        document["key"].insert(0, dict(document["key"][0], keyId=98, status=status))
        document["key"].append(dict(document["key"][0], keyId=99, status=status))

    keyset = read_tink_keyset(_edited(add_disabled))
    assert [key.key_id for key in keyset.keys] == [keyset.primary.key_id]


def test_no_repr_shows_key_material() -> None:
    key = TinkStreamingKey(bytes(range(32)), derived_key_size=32, key_id=5)
    for text in (repr(key), repr(TinkKeyset([key])), repr(TinkSealer(key)), repr(TinkOpener(key))):
        assert bytes(range(32)).hex() not in text and "\\x00\\x01" not in text


# Each parameter one step inside and one outside Tink's bounds (header 24 or 40 bytes, tag 16):
# (keyword arguments, the error, the exact message) -- None where the key is accepted.
KEY_PARAMETERS: list[tuple[dict[str, Any], type[Exception] | None, str]] = [
    ({"key_value": bytes(16)}, None, ""),
    ({"key_value": bytes(32), "derived_key_size": 32}, None, ""),
    ({"key_value": bytearray(16)}, TypeError, "key_value must be bytes, got bytearray"),
    ({"key_value": "k" * 16}, TypeError, "key_value must be bytes, got str"),
    (
        {"key_value": bytes(32), "derived_key_size": 24},
        ValueError,
        "derived_key_size must be 16 or 32, got 24",
    ),
    (
        {"key_value": bytes(15)},
        ValueError,
        "key_value must be at least 16 bytes for derived_key_size 16, got 15",
    ),
    (
        {"key_value": bytes(31), "derived_key_size": 32},
        ValueError,
        "key_value must be at least 32 bytes for derived_key_size 32, got 31",
    ),
    ({"key_value": bytes(16), "ciphertext_segment_size": 41}, None, ""),
    ({"key_value": bytes(32), "derived_key_size": 32, "ciphertext_segment_size": 57}, None, ""),
    ({"key_value": bytes(16), "ciphertext_segment_size": (1 << 31) - 1}, None, ""),
    (
        {"key_value": bytes(16), "ciphertext_segment_size": 40},
        ValueError,
        "ciphertext_segment_size must be above 40 (header and tag) and below 2^31, got 40",
    ),
    (
        {"key_value": bytes(32), "derived_key_size": 32, "ciphertext_segment_size": 56},
        ValueError,
        "ciphertext_segment_size must be above 56 (header and tag) and below 2^31, got 56",
    ),
    (
        {"key_value": bytes(16), "ciphertext_segment_size": 1 << 31},
        ValueError,
        "ciphertext_segment_size must be above 40 (header and tag) and below 2^31, got 2147483648",
    ),
    *(
        (
            {"key_value": bytes(16), "ciphertext_segment_size": size},
            TypeError,
            "ciphertext_segment_size must be an int",
        )
        for size in (True, 4096.0)
    ),
    ({"key_value": bytes(16), "hkdf_hash": 2}, ValueError, "2 is not a valid TinkHash"),
]


def test_a_keyset_of_no_key_and_a_keyset_of_something_else_are_refused() -> None:
    """TinkKeyset needs a key (the hand-made removal of its check went unnoticed: mtink2);
    the surfaces take a keyset or a key, nothing else."""
    with pytest.raises(ValueError, match=r"^a keyset needs at least one key$"):
        TinkKeyset([])
    for wrong, found in ((b"k" * 16, "bytes"), (None, "NoneType")):  # the message names what came
        with pytest.raises(TypeError, match=rf"^expected a TinkKeyset or TinkStreamingKey, got {found}$"):
            TinkOpener(wrong)  # type: ignore[arg-type]


def test_flush_seals_nothing_and_is_refused_after_close() -> None:
    """Tink's middle segments are full: flush returns nothing and holds the bytes back; after
    close() it is a StreamClosedError (its removal went unnoticed: mtink2)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    sealer = TinkSealer(key)
    head = bytes(sealer.seal(b"x" * 10))
    assert bytes(sealer.flush()) == b"" and sealer.pending == 10
    ciphertext = head + bytes(sealer.close())
    with pytest.raises(StreamClosedError, match="after close"):
        sealer.flush()
    assert tink_decrypt(key, ciphertext) == b"x" * 10


@pytest.mark.parametrize(("arguments", "error", "message"), KEY_PARAMETERS)
def test_a_key_is_checked_as_tink_checks_it_at_each_bound(
    arguments: dict[str, Any], error: type[Exception] | None, message: str
) -> None:
    """Each bound of TinkStreamingKey's parameters, with the message naming what was given
    (hand-made removals and mutmut run of 2026-12-04, mtink2: the bytes check went unnoticed)."""
    if error is None:
        key = TinkStreamingKey(**arguments)
        size = key.ciphertext_segment_size
        if size < 1 << 20:  # a sealed stream of two segments under it opens again
            plaintext = bytes(range(256)) * (size // 128)
            assert tink_decrypt(key, tink_encrypt(key, plaintext)) == plaintext
        return
    with pytest.raises(error) as raised:
        TinkStreamingKey(**arguments)
    assert str(raised.value) == message


# -- refusals ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tampering() -> tuple[Any, TinkKeyset, bytes, bytes]:
    """A small-segment Tink ciphertext (64-byte segments, five of them) to tamper with."""
    handle = tink_handle(16, TinkHash.SHA256, 64)
    keyset = read_tink_keyset(keyset_json(handle))
    plaintext = random.Random(64).randbytes(24 + 48 * 3 + 10)
    return handle, keyset, plaintext, tink_seal(handle, plaintext, b"ad")


def tink_refuses(handle: Any, ciphertext: bytes) -> bool:
    try:
        tink_open(handle, ciphertext, b"ad")
    except tink.TinkError:
        return True
    return False


def released(keyset: TinkKeyset, ciphertext: bytes, piece: int) -> tuple[bytes, BaseException | None]:
    """The plaintext gcmstream releases before it raises, and what it raised."""
    opener = TinkOpener(keyset, b"ad")
    got = bytearray()
    try:
        for start in range(0, len(ciphertext), piece):
            opener.receive_data(ciphertext[start : start + piece])
            while chunk := opener.read(17):
                got += chunk
        opener.receive_eof()
        while chunk := opener.read(17):
            got += chunk
    except ProtocolError as exc:
        with pytest.raises(StreamBrokenError):  # every later read raises again
            opener.read()
        return bytes(got), exc
    return bytes(got), None


def segment_starts(ciphertext: bytes) -> list[int]:
    """Where each segment of the 64-byte-segment ciphertext starts: after the 24-byte header,
    the first (40 bytes: with the header it fills one segment size), then every 64 bytes."""
    return [24, *range(64, len(ciphertext), 64)]


def tamperings(ciphertext: bytes) -> Iterator[tuple[str, bytes]]:
    for position in range(len(ciphertext)):
        flipped = bytearray(ciphertext)
        flipped[position] ^= 0x01
        yield f"flip {position}", bytes(flipped)
    for cut in range(len(ciphertext)):
        yield f"cut {cut}", ciphertext[:cut]
    starts = segment_starts(ciphertext)
    segments = [
        ciphertext[start:end] for start, end in zip(starts, [*starts[1:], len(ciphertext)], strict=True)
    ]
    header = ciphertext[:24]
    for index in range(len(segments) - 1):
        swapped = list(segments)
        swapped[index], swapped[index + 1] = swapped[index + 1], swapped[index]
        yield f"swap {index}", header + b"".join(swapped)
        yield f"drop {index}", header + b"".join(segments[:index] + segments[index + 1 :])
        yield f"repeat {index}", header + b"".join(segments[: index + 1] + segments[index:])
    for extra in (b"\x00", bytes(16), bytes(64), ciphertext[64:128]):
        yield f"extend {len(extra)}", ciphertext + extra
    yield "header length 40", b"\x28" + ciphertext[1:]
    yield "header length 0", b"\x00" + ciphertext[1:]


def test_every_tampering_is_refused_by_both_and_nothing_unauthenticated_is_released(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    handle, keyset, plaintext, ciphertext = tampering
    checked = 0
    for name, bad in tamperings(ciphertext):
        assert tink_refuses(handle, bad), name
        for piece in (len(bad) or 1, 13):
            got, error = released(keyset, bad, piece)
            assert error is not None, name
            assert isinstance(error, AuthenticationError | TruncatedStreamError | MalformedHeaderError), name
            # only whole segments that authenticated, in order: a prefix of the plaintext on
            # a segment boundary (the first segment holds 24 bytes, the others 48)
            assert plaintext.startswith(got), name
            assert len(got) == 0 or (len(got) - 24) % 48 == 0, (name, len(got))
            checked += 1
    assert checked > 2 * 400


def test_a_cut_on_a_segment_boundary_is_a_truncation(tampering: tuple[Any, TinkKeyset, bytes, bytes]) -> None:
    _, keyset, plaintext, ciphertext = tampering
    for end in segment_starts(ciphertext)[1:]:
        with pytest.raises(TruncatedStreamError, match="not its last segment"):
            tink_decrypt(keyset, ciphertext[:end], b"ad")
    with pytest.raises(TruncatedStreamError, match="empty"):
        tink_decrypt(keyset, b"", b"ad")
    with pytest.raises(TruncatedStreamError):
        tink_decrypt(keyset, ciphertext[:30], b"ad")


def test_a_wrong_key_or_associated_data_fails_on_segment_0(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    _, keyset, _, ciphertext = tampering
    other = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    for keys, associated_data in ((other, b"ad"), (keyset, b"other")):
        with pytest.raises(AuthenticationError) as caught:
            tink_decrypt(keys, ciphertext, associated_data)
        assert caught.value.record_number == 0


def test_plaintext_of_good_segments_is_returned_before_the_error_of_a_later_one(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    _, keyset, plaintext, ciphertext = tampering
    bad = bytearray(ciphertext)
    bad[64 * 2 + 5] ^= 0x80  # segment 2
    opener = TinkOpener(keyset, b"ad")
    opener.receive_data(bytes(bad))
    opener.receive_eof()
    buffer = bytearray(1000)
    count = opener.readinto(buffer)  # segments 0 and 1 opened in one call
    assert count == 24 + 48 and buffer[:count] == plaintext[:count]
    with pytest.raises(AuthenticationError) as caught:
        opener.readinto(buffer)
    assert caught.value.record_number == 2
    with pytest.raises(StreamBrokenError):
        opener.readinto(buffer)
    assert opener.phase is TinkPhase.FAILED


def test_receive_data_after_eof_is_a_usage_error() -> None:
    opener = TinkOpener(TinkStreamingKey(bytes(16)))
    opener.receive_eof()
    with pytest.raises(StreamClosedError) as closed:
        opener.receive_data(b"x")
    assert str(closed.value) == "receive_data() after receive_eof()"  # (None went unnoticed: mtink3)


def test_header_verified_raises_the_streams_error_once_then_stream_broken() -> None:
    """A segment 0 that no key opens: header_verified() raises AuthenticationError, and from
    then on it and every read raise StreamBrokenError (never True, never False)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    ciphertext = tink_encrypt(TinkStreamingKey(bytes(range(16)), ciphertext_segment_size=64), b"x" * 10)
    opener = TinkOpener(key)
    opener.receive_data(ciphertext)
    opener.receive_eof()
    with pytest.raises(AuthenticationError):
        opener.header_verified()
    assert opener.broken
    with pytest.raises(StreamBrokenError):
        opener.header_verified()
    with pytest.raises(StreamBrokenError):
        opener.read()


def test_buffer_updated_and_consume_refuse_counts_outside_what_they_were_given() -> None:
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    opener = TinkOpener(key)
    with pytest.raises(OutOfRangeError):
        opener.buffer_updated(1)  # no get_buffer() yet
    buffer = opener.get_buffer()
    for count in (-1, len(buffer) + 1):
        with pytest.raises(OutOfRangeError):
            opener.buffer_updated(count)
    ciphertext = tink_encrypt(key, b"0123456789")
    buffer[: len(ciphertext)] = ciphertext
    opener.buffer_updated(len(ciphertext))
    opener.receive_eof()
    assert bytes(opener.peek() or b"") == b"0123456789"
    for count in (-1, 11):
        with pytest.raises(OutOfRangeError):
            opener.consume(count)
    opener.consume(4)
    assert opener.read() == b"456789"


def test_find_searches_only_the_plaintext_peek_returned() -> None:
    """find() gives the index in what peek() returns (after consume, from its new start),
    the first occurrence, -1 when absent or nothing is ready; consume(0) is allowed.
    (mutmut run of 2026-12-04, mtink2: find() was never called by a test.)"""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    opener = TinkOpener(key)
    assert opener.find(b"a") == -1  # nothing opened yet
    opener.receive_data(tink_encrypt(key, b"xab-ab-c"))
    opener.receive_eof()
    assert bytes(opener.peek() or b"") == b"xab-ab-c"
    assert opener.find(b"x") == 0 and opener.find(b"ab") == 1 and opener.find(b"c") == 7
    assert opener.find(b"zz") == -1
    opener.consume(0)
    opener.consume(2)  # "b-ab-c" is left
    with pytest.raises(OutOfRangeError, match=r"^cannot consume 7 bytes: 6 available$"):
        opener.consume(7)
    assert opener.find(b"x") == -1  # consumed bytes are not searched
    assert opener.find(b"b") == 0 and opener.find(b"ab") == 2 and opener.find(b"-c") == 4
    opener.consume(6)
    end = opener.peek()
    assert opener.find(b"c") == -1 and end is not None and bytes(end) == b""
    # two segments opened into a buffer larger than their plaintext: what lies past it (zeros)
    # is not searched
    opener = TinkOpener(key)
    opener.receive_data(tink_encrypt(key, b"A" * 24 + b"B" * 30))  # segment 0 holds 24 bytes
    opener.receive_eof()
    assert bytes(opener.peek() or b"") == b"A" * 24 + b"B" * 30
    assert opener.find(b"\0") == -1 and opener.find(b"B\0") == -1 and opener.find(b"AB") == 23


def test_a_tampered_segment_is_named_by_its_index_in_every_reading_style(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    """AuthenticationError.record_number is the segment that failed, whichever path opened it
    (a run of middle segments, one segment, the last one). (mutmut run of 2026-12-04, mtink2:
    the one-segment path's index became None unnoticed.)"""
    _, keyset, plaintext, ciphertext = tampering
    starts = segment_starts(ciphertext)
    for index, start in enumerate(starts):
        bad = bytearray(ciphertext)
        bad[start + 3] ^= 0x01
        for read_size in (17, 1000):
            opener = TinkOpener(keyset, b"ad")
            opener.receive_data(bytes(bad))
            opener.receive_eof()
            got = bytearray()
            with pytest.raises(AuthenticationError) as caught:
                for _ in range(len(bad)):
                    chunk = opener.read(read_size)
                    assert chunk is not None and chunk
                    got += chunk
            assert caught.value.record_number == index, (index, read_size)
            assert plaintext.startswith(bytes(got))


def test_segment_0s_plaintext_is_returned_before_segment_1s_error(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    """The first readinto opens segment 0 with the header and goes on to segment 1 in the
    same call: segment 1's error waits for the next call, after segment 0's authenticated
    bytes are returned. (mutmut run of 2026-12-04, mtink2: without ``already`` the error was
    raised at once and segment 0's plaintext, already copied out, was never counted.)"""
    _, keyset, plaintext, ciphertext = tampering
    bad = bytearray(ciphertext)
    bad[segment_starts(ciphertext)[1] + 3] ^= 0x01
    opener = TinkOpener(keyset, b"ad")
    opener.receive_data(bytes(bad))
    opener.receive_eof()
    buffer = bytearray(1000)
    assert opener.readinto(buffer) == 24 and buffer[:24] == plaintext[:24]
    with pytest.raises(AuthenticationError) as caught:
        opener.readinto(buffer)
    assert caught.value.record_number == 1
    with pytest.raises(StreamBrokenError) as broken:  # names the first error
        opener.readinto(buffer)
    assert broken.value.original is caught.value and broken.value.__cause__ is caught.value
    opener = TinkOpener(keyset, b"ad")  # the same through read(), which opens into its buffer
    opener.receive_data(bytes(bad))
    opener.receive_eof()
    assert opener.read() == plaintext[:24]
    with pytest.raises(AuthenticationError):
        opener.read()


def test_an_empty_last_segment_after_a_full_one_is_read_as_tink_reads_it() -> None:
    """A writer may end a stream with an empty last segment (its tag alone, 16 bytes): Tink
    reads it, and so does gcmstream; 15 bytes there are a truncation, named with where it
    ends. (mutmut run of 2026-12-04, mtink2: ``<=`` TAG_SIZE refused the empty last segment.)"""
    handle = tink_handle(16, TinkHash.SHA256, 64)
    keyset = read_tink_keyset(keyset_json(handle))
    salt, prefix = bytes(range(16)), bytes(range(7))
    segments = keyset.primary.segments(salt, prefix, b"ad")
    first, last = bytearray(64 - 24), bytearray(16)
    segments.seal(0, False, b"A" * 24, memoryview(first))
    segments.seal(1, True, b"", memoryview(last))
    ciphertext = bytes([24]) + salt + prefix + bytes(first) + bytes(last)
    assert tink_open(handle, ciphertext, b"ad") == b"A" * 24
    for piece in (1, 7, len(ciphertext)):
        assert feed(TinkOpener(keyset, b"ad"), ciphertext, piece) == b"A" * 24
    with pytest.raises(TruncatedStreamError, match=r"ends 15 bytes into segment 1, before its tag"):
        tink_decrypt(keyset, ciphertext[:-1], b"ad")


def test_input_in_large_pieces_kept_by_reference_opens_across_their_joins() -> None:
    """Pieces of 64 KiB or more are kept as they are: runs of middle segments are opened
    within a piece, and a segment that spans two pieces is joined. (mutmut run of 2026-12-04,
    mtink2: a run not bounded by its piece went unnoticed, every test's pieces being small.)"""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=4096)
    plaintext = random.Random(4096).randbytes(300_000)
    ciphertext = tink_encrypt(key, plaintext)
    for cuts in ((70_001,), (65_536, 140_000), (100_000, 170_003, 240_000)):
        opener = TinkOpener(key)
        for start, end in itertools.pairwise((0, *cuts, len(ciphertext))):
            opener.receive_data(ciphertext[start:end])  # bytes of 64 KiB or more: by reference
        opener.receive_eof()
        got = bytearray()
        buffer = bytearray(1 << 20)
        for _ in range(len(ciphertext)):
            count = opener.readinto(buffer)
            if not count:
                break
            got += buffer[:count]
        assert bytes(got) == plaintext, cuts
        # the statistics count what was authenticated: every byte, every segment
        assert opener.bytes_opened == len(plaintext) and opener.records_opened == -(-len(ciphertext) // 4096)


def test_a_key_that_failed_segment_0_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream under the larger-segment key of a keyset, fed a byte at a time: the smaller
    key is tried on segment 0 once (one HKDF), not again with each byte that arrives after.
    (mutmut run of 2026-12-04, mtink2: a failed key left unmarked was retried on every read.)"""
    small = TinkStreamingKey(bytes(16), ciphertext_segment_size=64, key_id=1)
    large = TinkStreamingKey(bytes(range(16)), ciphertext_segment_size=256, key_id=2)
    plaintext = bytes(range(200))
    ciphertext = tink_encrypt(large, plaintext)
    derivations: list[int | None] = []
    derive = TinkStreamingKey.segments

    def counted(self: TinkStreamingKey, *args: bytes) -> Any:
        derivations.append(self.key_id)
        return derive(self, *args)

    monkeypatch.setattr(TinkStreamingKey, "segments", counted)
    assert feed(TinkOpener(TinkKeyset([small, large])), ciphertext, 1, read_size=17) == plaintext
    assert derivations == [1, 2]


def test_after_a_failure_nothing_is_left_to_consume_or_find(
    tampering: tuple[Any, TinkKeyset, bytes, bytes],
) -> None:
    """The failed opener's plaintext is gone: consume(0) is all it allows, find finds nothing."""
    _, keyset, _, ciphertext = tampering
    opener = TinkOpener(keyset, b"wrong associated data")
    opener.receive_data(ciphertext)
    opener.receive_eof()
    with pytest.raises(AuthenticationError):
        opener.peek()
    opener.consume(0)
    with pytest.raises(OutOfRangeError, match=r"^cannot consume 1 bytes: 0 available$"):
        opener.consume(1)
    assert opener.find(b"") == -1


def test_readinto_refuses_a_read_only_buffer_and_fills_nothing_for_an_empty_one() -> None:
    """A read-only buffer is refused before anything is read (also with no input yet); an
    empty buffer reads 0 bytes. The receive buffer is a segment or 64 KiB, whichever is larger.
    (mutmut run of 2026-12-04, mtink2.)"""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    opener = TinkOpener(key)
    with pytest.raises(UnsupportedBufferError, match="read-only"):
        opener.readinto(bytes(10))
    assert len(opener.get_buffer()) == 1 << 16
    large = TinkOpener(TinkStreamingKey(bytes(16), ciphertext_segment_size=100_000))
    assert len(large.get_buffer()) == 100_000
    opener.receive_data(tink_encrypt(key, b"0123456789"))
    opener.receive_eof()
    assert opener.readinto(bytearray(0)) == 0
    with pytest.raises(UnsupportedBufferError, match="read-only"):
        opener.readinto(bytes(10))
    buffer = bytearray(20)
    assert opener.readinto(buffer) == 10 and buffer[:10] == b"0123456789"


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps])
@pytest.mark.parametrize("kind", [TinkSealer, TinkOpener])
def test_neither_a_sealer_nor_an_opener_can_be_copied_or_pickled(
    kind: type[TinkSealer | TinkOpener], duplicate: Callable[[Any], Any]
) -> None:
    """A sealer's copy would reuse its segment nonces; an opener's would release a stream twice."""
    with pytest.raises(TypeError, match="cannot be"):
        duplicate(kind(TinkStreamingKey(bytes(16))))


# -- the stored cases (tests/vectors/tink.json) ------------------------------------------------

VECTORS = Path(__file__).resolve().parent / "vectors" / "tink.json"


def stored_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    document = json.loads(VECTORS.read_text())
    return [(group, test) for group in document["testGroups"] for test in group["tests"]]


@pytest.mark.parametrize(
    ("group", "case"), stored_cases(), ids=lambda value: str(value.get("tcId", "")) if "tcId" in value else ""
)
def test_the_stored_tink_cases_in_every_feeding_style(group: dict[str, Any], case: dict[str, Any]) -> None:
    """Each case as Tink wrote or a test altered it: Tink's verdict, then gcmstream's in pieces
    of 1, 7 and 64 bytes and whole: the same plaintext or the same error, releasing only whole
    segments that authenticated (a prefix no longer than the case allows)."""
    keyset_json_text = json.dumps(group["keyset"])
    keyset = read_tink_keyset(keyset_json_text)
    handle = tink.json_proto_keyset_format.parse(keyset_json_text, secret_key_access.TOKEN)
    ciphertext, associated_data = bytes.fromhex(case["ct"]), bytes.fromhex(case["aad"])
    plaintext = bytes.fromhex(case.get("msg", group["invalidMsg"]))
    if case["result"] == "valid":
        assert tink_open(handle, ciphertext, associated_data) == plaintext
    else:
        with pytest.raises(tink.TinkError):
            tink_open(handle, ciphertext, associated_data)
    for piece in (1, 7, 64, len(ciphertext) or 1):
        opener = TinkOpener(keyset, associated_data)
        got = bytearray()
        error: ProtocolError | None = None
        try:
            got += feed(opener, ciphertext, piece, read_size=50)
        except ProtocolError as exc:
            error = exc
        if case["result"] == "valid":
            assert error is None and bytes(got) == plaintext
            continue
        assert type(error).__name__ == case["expect"], (piece, error)
        assert len(got) <= case["released"] and plaintext.startswith(bytes(got))


def test_the_tink_vector_generator_check_passes() -> None:
    """``generate_tink.py --check`` replays the stored file through Tink and gcmstream."""
    result = subprocess.run(
        [sys.executable, str(VECTORS.parent / "generate_tink.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_segment_index_never_wraps() -> None:
    """2^32 segments at most (the nonce's 4-byte index): sealing past it is refused with nothing
    sealed, and a reader never opens a segment past it."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from gcmstream import LimitReachedError, MalformedRecordError
    from gcmstream.records import TinkSegments

    segments = TinkSegments(AESGCM(bytes(16)), bytes(7))
    with pytest.raises(LimitReachedError):
        segments.seal(1 << 32, True, b"", memoryview(bytearray(16)))
    with pytest.raises(MalformedRecordError):
        segments.open(1 << 32, True, memoryview(bytes(16)), memoryview(bytearray(0)))
    sealer = TinkSealer(TinkStreamingKey(bytes(16), ciphertext_segment_size=64), b"")
    sealer._index = (1 << 32) - 2  # as if 2^32 - 2 segments had been sealed
    first = bytes(sealer.seal(b"x" * 48))  # the header; one segment held back
    with pytest.raises(LimitReachedError):
        sealer.seal(b"y" * 96)  # would seal 2^32 - 2 and 2^32 - 1 and leave no index for the last
    assert sealer.segments_sealed == (1 << 32) - 2 and len(first) == 24
    assert len(sealer.close()) == 48 + 16  # the held segment, as the last, at index 2^32 - 2


# -- the sealer's figures, call by call (mutation run of 2026-12-04, mtink3) --------------------


@pytest.mark.parametrize(("key_size", "segment"), [(16, 64), (32, 100)])
def test_the_sealer_seals_each_segment_once_it_is_known_not_to_be_the_last(
    key_size: int, segment: int
) -> None:
    """After every call the output holds exactly the segments that later input proved not to
    be the last (header first), and the figures say so: ``records_sealed``, ``bytes_sealed``,
    ``pending``; ``close()`` seals the rest as the last. Computed here from the key's sizes
    alone, and the whole read back by Tink itself."""
    handle = tink_handle(key_size, TinkHash.SHA256, segment)
    keyset = read_tink_keyset(keyset_json(handle))
    key = keyset.primary
    header, middle = key.header_size, segment - 16
    first = middle - header
    rng = random.Random(key_size)
    calls = [0, 1, first - 1, 1, 1, middle - 1, 1, 2 * middle, 0, 3, middle + 5, 7 * middle + 1]
    calls += [rng.randrange(0, 4 * middle) for _ in range(20)]
    sealer = TinkSealer(keyset, b"ad")
    assert sealer.record_size == middle
    assert sealer.suite.name == ("AES_128_GCM" if key_size == 16 else "AES_256_GCM")
    plaintext, parts = bytearray(), list[bytes]()
    for size in calls:
        data = rng.randbytes(size)
        got = bytes(sealer.seal(data))
        before = len(plaintext)
        plaintext += data

        def sealed(total: int) -> int:  # segments ``total`` bytes complete, one byte kept back
            return 0 if total <= first else 1 + (total - first - 1) // middle

        count = sealed(len(plaintext))
        # segment 0 is shorter by the header: n segments and the header are n x segment bytes
        wire = count * segment if count else header
        assert len(got) == wire - sum(map(len, parts)), (size, before)
        parts.append(got)
        done = 0 if count == 0 else first + (count - 1) * middle
        assert (sealer.records_sealed, sealer.segments_sealed) == (count, count)
        assert (sealer.bytes_sealed, sealer.pending) == (done, len(plaintext) - done)
        assert sealer.closed is False
    last = bytes(sealer.close())
    assert len(last) == len(plaintext) - done + 16
    assert sealer.closed and sealer.records_sealed == count + 1
    assert (sealer.bytes_sealed, sealer.pending) == (len(plaintext), 0)
    assert tink_open(handle, b"".join(parts) + last, b"ad") == plaintext


def test_each_sealer_draws_its_own_salt_and_nonce_prefix() -> None:
    """The header is the length byte, a fresh salt and a fresh nonce prefix: two streams under
    one key never share a segment key and nonce. An empty stream is the header and one empty
    last segment, in one call of close()."""
    key = TinkStreamingKey(bytes(range(32)), derived_key_size=32, ciphertext_segment_size=100)
    headers = set()
    for _ in range(4):
        ciphertext = bytes(TinkSealer(key).close())
        assert len(ciphertext) == 40 + 16 and ciphertext[0] == 40
        assert tink_decrypt(key, ciphertext) == b""
        headers.add(ciphertext[1:40])
    assert len(headers) == 4
    assert len({header[:32] for header in headers}) == len({header[32:] for header in headers}) == 4


def test_a_detached_output_is_not_written_again() -> None:
    """After ``detach_output()`` the sealer writes its next output into fresh memory: the view
    returned before keeps its bytes; without it the next call reuses the memory (documented:
    valid until the next call)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    sealer = TinkSealer(key)
    held = sealer.seal(b"a" * 200)
    kept = bytes(held)
    sealer.detach_output()
    second = sealer.seal(b"b" * 200)
    assert bytes(held) == kept and second.obj is not held.obj
    rest = bytes(second)
    third = sealer.seal(b"c" * 200)
    assert third.obj is second.obj  # no detach: the same memory, written again
    ciphertext = kept + rest + bytes(third) + bytes(sealer.close())
    assert tink_decrypt(key, ciphertext) == b"a" * 200 + b"b" * 200 + b"c" * 200


def test_a_closed_or_copied_sealer_says_why_it_refuses() -> None:
    """Each refusal of the sealer names the call and the reason (mutmut, mtink3: a message of
    None went unnoticed for each)."""
    sealer = TinkSealer(TinkStreamingKey(bytes(16), ciphertext_segment_size=64))
    nonces = "the copy would reuse its segment nonces"
    for duplicate, verb in ((copy.copy, "copied"), (copy.deepcopy, "copied"), (pickle.dumps, "pickled")):
        with pytest.raises(TypeError) as refused:
            duplicate(sealer)
        assert str(refused.value) == f"a TinkSealer cannot be {verb}: {nonces}"
    sealer.close()
    calls: tuple[tuple[Callable[[], object], str], ...] = (
        (lambda: sealer.seal(b"x"), "seal() after close(): the Tink stream is ended"),
        (lambda: sealer.seal(b"", final=True), "seal() after close(): the Tink stream is ended"),
        (sealer.close, "close() twice: the Tink stream is ended"),
        (sealer.flush, "flush() after close(): the Tink stream is ended"),
    )
    for call, message in calls:
        with pytest.raises(StreamClosedError) as closed:
            call()
        assert str(closed.value) == message


# -- the opener's input (mutation run of 2026-12-04, mtink3) ------------------------------------


def _drain(opener: TinkOpener) -> bytes:
    """Every plaintext byte ready now (``read`` opens at most a buffer's worth at a time)."""
    got = bytearray()
    for _ in range(10_000):
        part = opener.read()
        if not part:
            return bytes(got)
        got += part
    raise AssertionError("the opener never ran out of plaintext")


def test_unread_input_is_bounded_at_twice_the_largest_segment_the_stream_may_use() -> None:
    """The bound (class docstring): 2 x the largest segment of the keyset until segment 0 chose
    the key, then 2 x the chosen key's, and at least 1 MiB. ``receive_data`` raises while the
    bound is reached, naming what is held, and takes nothing: the stream still opens whole."""
    from gcmstream import BufferFullError

    mib = 1 << 20
    small = TinkStreamingKey(bytes(range(16)), ciphertext_segment_size=4096, key_id=1)
    large = TinkStreamingKey(bytes(range(1, 17)), ciphertext_segment_size=mib, key_id=2)
    plaintext = random.Random(3).randbytes(3 * mib)
    ciphertext = tink_encrypt(small, plaintext)

    def refused(opener: TinkOpener, held: int) -> None:
        with pytest.raises(BufferFullError) as full:
            opener.receive_data(b"x")
        assert str(full.value) == f"{held} bytes of unread input are held: read before feeding more"

    # one key of 4 KiB segments: the 1 MiB floor, reached exactly
    opener = TinkOpener(small)
    opener.receive_data(ciphertext[: mib - 1])
    opener.receive_data(ciphertext[mib - 1 : mib])  # 1 MiB - 1 held: taken
    refused(opener, mib)
    got = _drain(opener)
    opener.receive_data(ciphertext[mib:])
    opener.receive_eof()
    assert got + _drain(opener) == plaintext

    # beside a key of 1 MiB segments: 2 MiB until segment 0 is read, then the chosen key's 1 MiB
    opener = TinkOpener(TinkKeyset([small, large], small))
    fed = 2 * mib
    opener.receive_data(ciphertext[: mib + 1])
    opener.receive_data(ciphertext[mib + 1 : fed])  # over 1 MiB: taken, no key chosen yet
    refused(opener, fed)
    got = _drain(opener)
    assert opener.key is small
    held = fed - opener.records_opened * 4096  # the header and segment 0 are one segment size
    assert 0 < held <= 4096
    opener.receive_data(ciphertext[fed : fed + mib - held])  # 1 MiB held
    refused(opener, mib)
    got += _drain(opener)
    opener.receive_data(ciphertext[fed + mib - held :])
    opener.receive_eof()
    assert got + _drain(opener) == plaintext


def test_input_is_copied_unless_it_is_bytes_of_64_kib_or_more_and_dropped_after_a_failure() -> None:
    """A bytearray of any size is copied (the caller may reuse it at once), as are bytes under
    64 KiB; bytes of 64 KiB and more are kept by reference. After a failure input is taken and
    dropped: a failed opener never raises BufferFullError, however much more comes."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=4096)
    plaintext = random.Random(8).randbytes(300_000)
    ciphertext = tink_encrypt(key, plaintext)
    for cut in (1 << 16, 100_000):
        opener = TinkOpener(key)
        scratch = bytearray(ciphertext[:cut])
        opener.receive_data(scratch)  # a reused receive buffer, overwritten after the call
        scratch[:] = bytes(len(scratch))
        opener.receive_data(ciphertext[cut:])
        opener.receive_eof()
        assert _drain(opener) == plaintext, cut
    opener = TinkOpener(key, b"not the associated data")
    opener.receive_data(ciphertext[:5000])
    with pytest.raises(AuthenticationError):
        opener.read()
    chunk = bytes(1 << 20)
    for _ in range(4):  # 4 MiB after the failure, over any bound
        opener.receive_data(chunk)
    with pytest.raises(StreamBrokenError):
        opener.read()


LIMIT_CASES = [
    # (segments sealed before, bytes sealed in one call, segments that call seals; None: refused)
    ((1 << 32) - 1, 10, 0),  # held for the last segment, index 2^32 - 1: taken
    ((1 << 32) - 1, 49, None),  # would seal 2^32 - 1 and leave no index for the last
    ((1 << 32) - 2, 49, 1),
    ((1 << 32) - 2, 73, 1),
    ((1 << 32) - 2, 96, 1),  # 48 sealed, 48 held for the last
    ((1 << 32) - 2, 97, None),
]


@pytest.mark.parametrize(("before", "size", "sealed"), LIMIT_CASES)
def test_the_sealer_uses_every_segment_index_up_to_2_to_the_32_less_1(
    before: int, size: int, sealed: int | None
) -> None:
    """The count of segments a call completes decides the limit: exactly the indexes up to
    2^32 - 1 are used, the last for the last segment; a call that would pass it seals nothing
    and names the limit (mutmut, mtink3: the bound one early and counts one too many went
    unnoticed)."""
    from gcmstream import LimitReachedError

    sealer = TinkSealer(TinkStreamingKey(bytes(16), ciphertext_segment_size=64), b"")
    sealer._index = before  # as if that many segments had been sealed (48 plaintext bytes each)
    if sealed is None:
        with pytest.raises(LimitReachedError) as limit:
            sealer.seal(b"x" * size)
        assert str(limit.value) == (
            "a Tink stream holds at most 2^32 segments: nothing of this call was sealed; close() it"
        )
        assert (sealer.segments_sealed, sealer.pending) == (before, 0)
        return
    assert len(sealer.seal(b"x" * size)) == 24 + sealed * 64  # the header, then the segments
    assert sealer.segments_sealed == before + sealed
    assert len(sealer.close()) == size - 48 * sealed + 16
    assert sealer.segments_sealed == 1 << 32


def test_sealing_a_byte_at_a_time_holds_constant_memory() -> None:
    """The held segment is filled in place: 20,000 one-byte calls leave 96 bytes more traced
    (measured, 2026-12-05); writing past the held bytes instead grew the buffer a byte a call
    (21,219 bytes: mutmut, mtink3)."""
    import tracemalloc

    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    sealer = TinkSealer(key)
    sealer.seal(b"x" * 30)
    tracemalloc.start()
    try:
        for _ in range(20_000):
            sealer.seal(b"y")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 4096, f"{held} bytes more after 20,000 one-byte calls"
    sealer.close()
    assert sealer.bytes_sealed == 20_030


def test_a_second_caller_inside_a_call_is_refused_naming_the_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call made while another is inside (here: from the AEAD, re-entering) raises
    ConcurrencyError naming the sealer or opener (mutmut, mtink3: the name None went
    unnoticed)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from gcmstream import ConcurrencyError

    inside: list[Callable[[], object]] = []
    refusals: list[str] = []

    class Reentering:
        def __init__(self, key: bytes) -> None:
            self.real = AESGCM(key)

        def _again(self) -> None:
            for call in inside:
                try:
                    call()
                except ConcurrencyError as exc:
                    refusals.append(str(exc))

        def encrypt_into(self, *args: Any) -> Any:
            self._again()
            return self.real.encrypt_into(*args)

        def decrypt_into(self, *args: Any) -> Any:
            self._again()
            return self.real.decrypt_into(*args)

    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    ciphertext = tink_encrypt(key, b"x" * 100)
    monkeypatch.setattr("gcmstream.tinkstream.AESGCM", Reentering)
    sealer = TinkSealer(key)
    inside[:] = [lambda: sealer.seal(b"y")]
    sealer.seal(b"x" * 100)
    opener = TinkOpener(key)
    opener.receive_data(ciphertext)
    inside[:] = [opener.read]
    assert opener.read() == b"x" * 72  # segments 0 and 1; the last waits for the end
    busy = "is in use by another thread: use one per thread, or hand it over between calls"
    assert refusals[0] == f"this TinkSealer {busy}"
    assert refusals[-1] == f"this TinkOpener {busy}"


def test_a_keys_defaults_are_tinks_aes128_gcm_hkdf_4kb_template() -> None:
    """``TinkStreamingKey(value)`` has the parameters of Tink's AES128_GCM_HKDF_4KB template
    (mutmut, mtink3: a default segment size of 4097 went unnoticed)."""
    template = TEMPLATES.AES128_GCM_HKDF_4KB
    params = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKeyFormat.FromString(template.value).params
    key = TinkStreamingKey(bytes(16))
    assert (key.derived_key_size, key.hkdf_hash, key.ciphertext_segment_size, key.key_id) == (
        params.derived_key_size,
        TinkHash(params.hkdf_hash_type),
        params.ciphertext_segment_size,
        None,
    )


def test_read_takes_at_most_max_bytes_and_read_0_takes_nothing() -> None:
    """``read(n)``/``read_view(n)`` return at most ``n`` authenticated bytes and consume just
    those; ``read(0)`` returns ``b""`` and consumes nothing, whatever is ready; -1 is what is
    ready (mutmut, mtink3)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    plaintext = bytes(range(100))
    opener = TinkOpener(key)
    assert opener.read(0) == b"" and opener.read() is None  # nothing in yet
    opener.receive_data(tink_encrypt(key, plaintext))
    opener.receive_eof()
    nothing = opener.read_view(0)
    assert opener.read(0) == b"" and nothing is not None and bytes(nothing) == b""
    assert opener.read(1) == plaintext[:1]
    two = opener.read_view(2)
    assert two is not None and bytes(two) == plaintext[1:3]
    assert opener.read(0) == b""
    assert opener.read(21) == plaintext[3:24]  # the rest of segment 0
    assert opener.read(30) == plaintext[24:54]
    assert opener.read(-1) == plaintext[54:]
    assert opener.read() == b"" and opener.read(5) == b""


def test_a_fresh_opener_reports_nothing_and_takes_an_empty_or_a_full_receive_buffer() -> None:
    """Before any input: no segment, no byte, no key, the header phase, wanting data. The
    receive buffer may be filled with 0 bytes or to its end; a count without a buffer names
    itself. Once read: every segment and byte counted (mutmut, mtink3)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    opener = TinkOpener(key)
    assert (opener.records_opened, opener.segments_opened, opener.bytes_opened) == (0, 0, 0)
    assert (opener.key, opener.header, opener.phase) == (None, None, TinkPhase.HEADER)
    assert (opener.failed, opener.broken, opener.wants_data, opener.at_eof) == (False, False, True, False)
    assert opener.record_missing == 0 and opener.read() is None
    with pytest.raises(OutOfRangeError) as refused:
        opener.buffer_updated(1)
    assert str(refused.value) == "buffer_updated(1) without a buffer that large"
    plaintext = random.Random(9).randbytes(70_000)
    ciphertext = tink_encrypt(key, plaintext)
    buffer = opener.get_buffer()
    opener.buffer_updated(0)
    buffer[:] = ciphertext[: len(buffer)]
    opener.buffer_updated(len(buffer))
    opener.receive_data(ciphertext[len(buffer) :])
    opener.receive_eof()
    assert _drain(opener) == plaintext
    segments = 1 + -(-(len(plaintext) - 24) // 48)
    assert (opener.records_opened, opener.bytes_opened, opener.at_eof) == (segments, len(plaintext), True)


def test_an_empty_or_cut_header_is_named_exactly() -> None:
    """The truncations found before segment 0 name what was there (mutmut, mtink3)."""
    key = TinkStreamingKey(bytes(16), ciphertext_segment_size=64)
    ciphertext = tink_encrypt(key, b"x" * 10)
    for given, message in (
        (b"", "the Tink stream is empty: no header"),
        (ciphertext[:39], "the Tink stream ends after 39 bytes, inside its header or first segment"),
    ):
        opener = TinkOpener(key)
        opener.receive_data(given)
        opener.receive_eof()
        with pytest.raises(TruncatedStreamError) as cut:
            opener.read()
        assert str(cut.value) == message
    opener = TinkOpener(key)
    opener.receive_data(bytes([40]) + ciphertext[1:])
    with pytest.raises(MalformedHeaderError) as malformed:
        opener.read()
    assert str(malformed.value) == (
        "the Tink header's length byte is 40, and no key of this keyset makes such a header "
        "(theirs are [24] bytes): sealed with another key, or damaged"
    )
