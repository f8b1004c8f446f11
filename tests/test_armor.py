"""gcmstream.armor: the text form, against Python's own base64 and RFC 7468's strict grammar,
at sizes around every line boundary, in every chunking; every malformation refused."""

from __future__ import annotations

import base64
import os
import random
import re

import pytest

from gcmstream.armor import (
    BEGIN_LINE,
    END_LINE,
    LINE_LENGTH,
    MAX_LEADING_TEXT,
    MAX_TRAILING_WHITESPACE,
    ArmorDecoder,
    ArmorEncoder,
    armor,
    dearmor,
    dearmoring_reader,
    is_armored,
)
from gcmstream.errors import (
    ArmoredInputError,
    ArmorError,
    ProtocolError,
    StreamClosedError,
    TruncatedArmorError,
    TruncatedStreamError,
)
from gcmstream.files import new_opener

from .helpers import KEY

# Around every boundary: a line holds 48 bytes (64 characters), padding by len % 3.
SIZES = sorted({0, 1, 2, 3, 4, 5, *(48 * n + d for n in (1, 2, 3, 21, 22) for d in (-2, -1, 0, 1, 2))})


def reference(data: bytes, eol: bytes = b"\n") -> bytes:
    """RFC 7468's strict form built independently: Python's base64, cut at 64 columns."""
    text = base64.b64encode(data)
    lines = [BEGIN_LINE, *(text[at : at + LINE_LENGTH] for at in range(0, len(text), LINE_LENGTH)), END_LINE]
    return eol.join(lines) + eol


def chunked(data: bytes, step: int) -> list[bytes]:
    return [data[at : at + step] for at in range(0, len(data), step)] or [b""]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_matches_the_reference_at_every_boundary(size: int) -> None:
    data = random.Random(size).randbytes(size)
    text = armor(data)
    assert text == reference(data)
    assert dearmor(text) == data
    assert dearmor(reference(data, b"\r\n")) == data  # CRLF on every line is read too
    for step in (1, 3, 47, 48, 49, 64, 65, 66, 1000):
        encoder = ArmorEncoder()
        assert b"".join(encoder.encode(part) for part in chunked(data, step)) + encoder.finish() == text
        decoder = ArmorDecoder()
        assert b"".join(decoder.feed(part) for part in chunked(text, step)) == data
        decoder.finish()
        assert decoder.done


@pytest.mark.parametrize("lines", [1023, 1024, 1025, 2048, 2049])
def test_the_encoders_batches_of_lines_match_the_reference(lines: int) -> None:
    """The encoder cuts lines a thousand and twenty-four at a time: around those batches."""
    for size in (48 * lines - 1, 48 * lines, 48 * lines + 1):
        data = random.Random(size).randbytes(size)
        assert armor(data) == reference(data)
        for step in (47, 4096, 65536):
            encoder = ArmorEncoder()
            text = b"".join(encoder.encode(part) for part in chunked(data, step)) + encoder.finish()
            assert text == reference(data)
        assert dearmor(reference(data)) == data


def test_every_line_but_the_last_has_64_columns() -> None:
    lines = armor(os.urandom(48 * 5 + 7)).split(b"\n")
    assert lines[0] == BEGIN_LINE and lines[-2] == END_LINE and lines[-1] == b""
    assert [len(line) for line in lines[1:-2]] == [64] * 5 + [12]


def test_whitespace_after_the_end_line_is_allowed_up_to_its_bound() -> None:
    text = armor(b"data")
    assert dearmor(text[:-1]) == b"data"  # pasted without its last newline
    assert dearmor(armor(b"")[:-1]) == b""
    assert dearmor(text + b" \t\r\n" * (MAX_TRAILING_WHITESPACE // 4)) == b"data"
    with pytest.raises(ArmorError, match="whitespace"):
        dearmor(text + b"\n" * (MAX_TRAILING_WHITESPACE + 1))


def malformations() -> dict[str, bytes]:
    data = random.Random(7).randbytes(48 * 3 + 1)  # three full lines and a padded one
    good = armor(data)
    lines = good.split(b"\n")
    return {
        "leading space": b" " + good,
        "leading newline": b"\n" + good,
        "other label": good.replace(b"GCMSTREAM ENCRYPTED FILE", b"AGE ENCRYPTED FILE"),
        "space after the begin line": good.replace(BEGIN_LINE, BEGIN_LINE + b" ", 1),
        "line of 65": b"\n".join([*lines[:1], lines[1] + lines[2][:1], lines[2][1:], *lines[3:]]),
        "line of 63 before the last": b"\n".join([*lines[:1], lines[1][:-4], *lines[2:]]),
        "very long line": b"\n".join([lines[0], lines[1] * 3, *lines[4:]]),
        "empty line": b"\n".join([*lines[:2], b"", *lines[2:]]),
        "last line not a multiple of 4": good.replace(lines[4], lines[4][:-1]),
        "non-canonical padding bits": good.replace(lines[4], lines[4][:1] + b"B" + lines[4][2:]),
        "padding in a full line": good.replace(lines[2], lines[2][:-2] + b"=="),
        "three padding characters": good.replace(lines[4], lines[4][:1] + b"==="),
        "data after padding": good.replace(lines[4], lines[4][:2] + b"=A"),
        "not base64 (URL alphabet)": good.replace(lines[1], lines[1][:10] + b"-" + lines[1][11:]),
        "not base64 (space)": good.replace(lines[1], lines[1][:10] + b" " + lines[1][11:]),
        # four at once: a lenient decoder would drop them and still find whole groups
        "four characters not base64": good.replace(lines[1], lines[1][:10] + b"-_.!" + lines[1][14:]),
        "a line of 60, then one of 68": b"\n".join(
            [lines[0], lines[1][:60], lines[1][60:] + lines[2], *lines[3:]]
        ),
        # "XX\nXX" where a full line's ending falls: refused as the line of 66 it is
        "a line of 66 ending XX, then one of 62": b"\n".join(
            [lines[0], b"A" * 64 + b"XX", b"XX" + b"A" * 60, *lines[-2:]]
        ),
        # lines of 30 and 33 characters, their endings where four full lines' would fall:
        # 252 base64 characters in all, whole groups of 4
        "lines of 30 and 33 in the place of four full lines": b"\n".join(
            [lines[0], *[b"A" * 30 + b"\n" + b"A" * 33] * 4, *lines[-2:]]
        ),
        "space after the end line, no final LF": good[:-1] + b" ",
        "a letter after the end line, no final LF": good[:-1] + b"X",
        "a line after the last": b"\n".join([*lines[:5], lines[1], *lines[5:]]),
        "missing end line": b"\n".join(lines[:5]) + b"\n",
        "missing end line, no final LF": b"\n".join(lines[:5]),
        "end line cut": good[:-5],
        "other end label": good.replace(END_LINE, END_LINE.replace(b"END", b"STOP")),
        "trailing garbage": good + b"x",
        "trailing garbage after whitespace": good + b"\n\nx",
        # whitespace to bytes.strip() but not to the armor rules (only space, tab, CR, LF)
        "vertical tab after the end line": good + b"\x0b",
        "form feed after the end line": good + b"\n\x0c",
        "a second armored file": good + good,
        "mixed line endings": good.replace(b"\n", b"\r\n", 2),
        "CR alone": good.replace(lines[1] + b"\n", lines[1] + b"\r", 1),
        "empty": b"",
        "begin line only": BEGIN_LINE + b"\n",
    }


CUT = {
    "missing end line",
    "missing end line, no final LF",
    "end line cut",
    # the end line's own line ending may be missing, but not replaced by other bytes: the text
    # ends inside a line that is not yet the end line
    "space after the end line, no final LF",
    "a letter after the end line, no final LF",
    "empty",
    "begin line only",
}


@pytest.mark.parametrize("name", sorted(malformations()))
def test_every_malformation_is_refused_in_every_chunking(name: str) -> None:
    text = malformations()[name]
    for step in (1, 5, 64, 65, 66, 4096):
        decoder = ArmorDecoder()
        with pytest.raises(ArmorError) as raised:
            for part in chunked(text, step):
                decoder.feed(part)
            decoder.finish()
        assert isinstance(raised.value, ProtocolError) and isinstance(raised.value, ValueError)
        cut = name in CUT  # ended before the end line: also a TruncatedStreamError
        assert isinstance(raised.value, TruncatedArmorError) == cut, raised.value
        assert isinstance(raised.value, TruncatedStreamError) == cut
        with pytest.raises(ArmorError) as again:  # failed for good, with the same error
            decoder.feed(b"")
        assert again.value is raised.value
        with pytest.raises(ArmorError) as again:
            decoder.finish()
        assert again.value is raised.value


def test_each_line_fault_is_named_in_every_chunking() -> None:
    """The rule a line breaks is the one named, though a later check would refuse it too
    (hand-made removals of these raises went unnoticed: mutation run of 2026-12-04, mtink)."""
    faults = malformations()
    lines = armor(random.Random(7).randbytes(48 * 3 + 1)).split(b"\n")
    crlf_line_after_lf = b"\n".join([lines[0], lines[1] + b"\r", *lines[2:]])
    cases = {
        faults["mixed line endings"]: "line 3 ends with LF where the begin line ends with CRLF",
        crlf_line_after_lf: "line 2 ends with CRLF where the begin line ends with LF",
        faults["line of 65"]: "line 2 is longer than 64 characters",
        faults["last line not a multiple of 4"]: "line 5 has 3 characters: a last line has 4 to 64",
        faults["empty line"]: "line 3 has 0 characters",
        # line endings where full lines put them but other bytes beside them, the lengths made
        # up by a line ending inside a later line: the fault is the first line's, fed whole too
        # (mutation run of 2026-12-04, mtink2: the batch of full lines let them through to
        # the base64 decoder, which named another fault)
        b"\n".join(
            [lines[0], b"A" * 64 + b" " + b"A" * 30, b"A" * 33, *lines[3:]]
        ): "line 2 is longer than 64",
        b"\r\n".join([lines[0], b"A" * 64 + b"\n\n" + b"A" * 30, b"A" * 32, *lines[3:]]): (
            "line 2 ends with LF where the begin line ends with CRLF"
        ),
        b"\r\n".join(
            [lines[0], b"A" * 64 + b"\rX" + b"A" * 29, b"A" * 33, *lines[3:]]
        ): "line 2 is longer than 64",
        faults["a line of 60, then one of 68"]: "line 3 is longer than 64 characters",
        b"\r\n".join(
            [lines[0], b"A" * 64 + b"\r " + b"A" * 29, b"A" * 33, *lines[3:]]
        ): "line 2 is longer than 64",
        b"\r\n".join(
            [lines[0], b"A" * 30, b"A" * 31 + b"\n\rA" + b"A" * 63, *lines[3:]]
        ): "line 2 has 30 characters",
        # a first line longer than a line may be is refused for its length, not read as a begin line
        b"-" * 66 + b"\n" + faults["empty"]: "line 1 is longer than 64 characters",
        b"-" * 100 + b"\n" + faults["empty"]: "line 1 is longer than 64 characters",
    }
    for text, message in cases.items():
        for step in (1, 5, 64, 65, 66, 4096):
            decoder = ArmorDecoder()
            with pytest.raises(ArmorError, match=re.escape(message)):
                for part in chunked(text, step):
                    decoder.feed(part)
                decoder.finish()


def test_no_bytes_of_a_bad_line_are_returned() -> None:
    """Each feed returns only lines that passed: the bytes returned before the error are a
    prefix of the file, and the faulty line's are not among them."""
    data = random.Random(3).randbytes(48 * 4 + 2)
    lines = armor(data).split(b"\n")
    bad = b"\n".join([*lines[:3], lines[3][:-1] + b"!", *lines[3:]])
    decoder = ArmorDecoder()
    returned = bytearray()
    with pytest.raises(ArmorError) as raised:
        for byte in range(len(bad)):
            returned += decoder.feed(bad[byte : byte + 1])
    assert bytes(returned) == data[: 48 * 2] and raised.value.line == 4


def test_lengths_are_bounded_before_buffering() -> None:
    """A line that never ends is refused after one line's worth, not kept growing: 65
    characters are held (64 and a CR), the 66th is refused."""
    decoder = ArmorDecoder()
    assert decoder.feed(BEGIN_LINE + b"\n" + b"A" * 65) == b""
    with pytest.raises(ArmorError, match="line 2 is longer than 64"):
        decoder.feed(b"A")
    decoder = ArmorDecoder()
    decoder.feed(BEGIN_LINE + b"\n")
    with pytest.raises(ArmorError, match="longer than 64"):
        for _ in range(100):
            decoder.feed(b"A" * 16)
    assert is_armored(armor(b"")) and not is_armored(b"GCMS\x02") and not is_armored(BEGIN_LINE[:10])


class Source:
    """A readinto over ``data`` that hands out at most ``most`` bytes a call."""

    def __init__(self, data: bytes, most: int) -> None:
        self.data, self.most = data, most

    def readinto(self, buffer: bytearray | memoryview) -> int:
        count = min(len(buffer), self.most, len(self.data))
        buffer[:count] = self.data[:count]
        self.data = self.data[count:]
        return count


def read_through(data: bytes, most: int, size: int = 1000) -> bytes:
    readinto = dearmoring_reader(Source(data, most).readinto)
    out, buffer = bytearray(), bytearray(size)
    for _ in range(len(data) + 10):
        got = readinto(memoryview(buffer))
        if not got:
            return bytes(out)
        out += buffer[:got]
    raise AssertionError("the reader never reached the end")


@pytest.mark.parametrize("most", [1, 7, 40, 4096])
def test_the_reader_tells_the_form_and_reads_either(most: int) -> None:
    data = b"GCMS" + os.urandom(5000)
    assert read_through(data, most) == data  # binary passes untouched
    assert read_through(armor(data), most) == data
    assert read_through(b"-----BEGIN-", most) == b"-----BEGIN-"  # not the begin line: binary
    with pytest.raises(TruncatedArmorError):  # armor cut inside its begin line
        read_through(b"-----BEGIN", most)
    with pytest.raises(ArmorError):
        read_through(armor(data) + b"x", most)
    with pytest.raises(ArmorError):
        read_through(armor(data)[:-20], most)


@pytest.mark.parametrize("most", [1, 7, 40, 4096])
def test_text_before_the_armor_is_refused_and_said_to_be_there(most: int) -> None:
    """A new user's finding: armor pasted after a line of mail ("Hi, here is the file:") was
    called "not a gcmstream stream". It stays refused (strict, as age's armor: nothing before
    the begin line), and the message says that text precedes the armor, on which line the
    begin line is, and what to remove. Text with no begin line in its first MAX_LEADING_TEXT
    bytes is passed on untouched (the binary reader refuses it as another format)."""
    armored = armor(b"GCMS" + os.urandom(300))
    for before, line in ((b"Hi, here is the file:\n", 2), (b"Hi,\r\n\r\nhere:\r\n", 4), (b"\n", 2)):
        with pytest.raises(ArmorError) as refused:
            read_through(before + armored, most)
        assert refused.value.line == line
        assert f"text precedes the armor: its begin line is line {line}" in str(refused.value)
        assert "remove the lines before '-----BEGIN GCMSTREAM ENCRYPTED FILE-----'" in str(refused.value)
    far = b"x" * MAX_LEADING_TEXT + b"\n" + armored  # past the bound: not looked for
    assert read_through(far, most) == far
    assert read_through(b"just text\n", most) == b"just text\n"
    once = CountingSource(b"just text\n", most)  # read to its end once: a terminal's end
    reader = dearmoring_reader(once.readinto)
    assert reader(memoryview(bytearray(100))) == 10 and reader(memoryview(bytearray(100))) == 0


def test_a_binary_reader_names_armored_input() -> None:
    opener = new_opener(KEY)
    opener.receive_data(armor(b"GCMS\x02" + bytes(100)))
    with pytest.raises(ArmoredInputError, match="armored text") as raised:
        opener.read(10)
    assert raised.value.rule == "H1"


def test_an_encoder_is_done_after_finish() -> None:
    encoder = ArmorEncoder()
    assert encoder.finish() == BEGIN_LINE + b"\n" + END_LINE + b"\n"
    with pytest.raises(StreamClosedError, match=r"^ArmorEncoder\.encode after finish$"):
        encoder.encode(b"more")
    with pytest.raises(StreamClosedError, match=r"^ArmorEncoder\.finish called twice$"):
        encoder.finish()


def test_an_encoder_gives_each_line_as_soon_as_its_48_bytes_are_there() -> None:
    """Fewer than 48 bytes are held: the 48th completes a line, returned by that call."""
    data = random.Random(48).randbytes(96)
    encoder = ArmorEncoder()
    assert encoder.encode(data[:47]) == BEGIN_LINE + b"\n"
    assert encoder.encode(data[47:48]) == base64.b64encode(data[:48]) + b"\n"
    assert encoder.encode(data[48:]) == base64.b64encode(data[48:]) + b"\n"
    assert encoder.finish() == END_LINE + b"\n"


# full lines, then a last line of 4, 16 or 24 characters (no padding)
@pytest.mark.parametrize("size", [*SIZES, 48 + 3, 48 * 2 + 12, 48 * 3 + 18])
def test_whitespace_after_the_end_line_leaves_every_size_readable_in_every_chunking(size: int) -> None:
    """Newlines after the end line may put a line ending where a full line's ending would
    fall (a last line of k characters, the end line, then 25 - k newlines): read as the file
    all the same. (Mutation run of 2026-12-04, mtink2: with every 64-character line taken as
    the last one, such a file was refused when it came in one piece.)"""
    data = random.Random(size).randbytes(size)
    # (spaces: a batch cut past a padded last line took the end line and them for base64)
    for trailer in (b"\n", b"\n" * 30, b" \t\r\n" * 3, b" " * 64):
        text = armor(data) + trailer
        assert dearmor(text) == data
        for step in (1, 65, 4096):
            decoder = ArmorDecoder()
            assert b"".join(decoder.feed(part) for part in chunked(text, step)) == data
            decoder.finish()


def test_whitespace_after_the_end_line_is_bounded_across_feeds() -> None:
    """The bound counts every byte after the end line, however it is cut into feeds."""
    decoder = ArmorDecoder()
    assert decoder.feed(armor(b"data")) == b"data"
    assert decoder.feed(b"\n" * MAX_TRAILING_WHITESPACE) == b""  # exactly the bound, in one feed
    with pytest.raises(ArmorError, match="more than 1024 bytes of whitespace follow the end line"):
        decoder.feed(b"\n")
    decoder = ArmorDecoder()
    decoder.feed(armor(b"data"))
    with pytest.raises(ArmorError, match="whitespace"):
        for _ in range(MAX_TRAILING_WHITESPACE // 100 + 1):  # 11 feeds of 100: 1,100 bytes
            decoder.feed(b" " * 100)


def test_each_fault_names_what_was_found_and_its_line() -> None:
    """The message and the ``line`` attribute say what was found where (a fault raised
    without its own line number takes the decoder's)."""
    good = armor(random.Random(7).randbytes(48 * 3 + 1))
    lines = good.split(b"\n")
    cases = [
        (good + b"x", ArmorError, "data follows the end line", 6),
        (good[:-5], TruncatedArmorError, "armored text ends before the end line (5 lines read)", 5),
        (b"", TruncatedArmorError, "armored text ends before the begin line (0 lines read)", 0),
        (good.replace(b"\n", b"\r\n", 2), ArmorError, "line 3 ends with LF where", 3),
        (
            good.replace(lines[4], b"!" + lines[4][1:]),
            ArmorError,
            "line 5 (or a line after it) is not standard",
            5,
        ),
        (
            good.replace(lines[4], lines[4][:1] + b"B" + lines[4][2:]),
            ArmorError,
            "line 5 is not canonical base64",
            5,
        ),
        (
            b"\n".join([*lines[:5], lines[1], *lines[5:]]),
            ArmorError,
            "line 6: the end line must follow the last, short line",
            6,
        ),
        (
            good.replace(b"GCMSTREAM", b"AGE", 1),
            ArmorError,
            f"armored text starts with {BEGIN_LINE.decode()!r}",
            1,
        ),
    ]
    for text, kind, message, line in cases:
        decoder = ArmorDecoder()
        with pytest.raises(kind, match=re.escape(message)) as raised:
            decoder.feed(text)
            decoder.finish()
        assert isinstance(raised.value, ArmorError) and raised.value.line == line, message


class CountingSource(Source):
    """A Source that records the size of every buffer it is asked to fill, and fails if it
    is read again after it reported the end (a terminal would wait for a second end)."""

    def __init__(self, data: bytes, most: int) -> None:
        super().__init__(data, most)
        self.asked: list[int] = []
        self.ended = False

    def readinto(self, buffer: bytearray | memoryview) -> int:
        assert not self.ended, "read again after the end"
        self.asked.append(len(buffer))
        got = super().readinto(buffer)
        self.ended = not got
        return got


def test_the_form_is_told_from_no_more_than_the_begin_line() -> None:
    """The reader asks for the begin line's bytes only, as they come, and stops at the first
    byte that is not the begin line's: a binary stream is not waited on beyond it."""
    binary = CountingSource(b"GCMS" + bytes(100), 1)
    dearmoring_reader(binary.readinto)
    assert binary.asked == [len(BEGIN_LINE)]
    text = armor(b"data")
    for most, asked in ((4096, [40]), (10, [40, 30, 20, 10])):  # len(BEGIN_LINE) == 40
        source = CountingSource(text, most)
        dearmoring_reader(source.readinto)
        assert source.asked == asked


@pytest.mark.parametrize("most", [1, 40, 4096])
def test_the_reader_hands_out_what_it_read_ahead_in_small_reads_and_ends_once(most: int) -> None:
    """Bytes read to tell the form reach a reader of small buffers in order; once armored
    text's end was returned its source is not read again (each later read returns 0; binary
    input passes every read through)."""
    data = b"GCMS" + os.urandom(300)
    for text in (data, armor(data)):
        source = CountingSource(text, most) if text is not data else Source(text, most)
        readinto = dearmoring_reader(source.readinto)
        out, buffer = bytearray(), bytearray(5)
        for _ in range(len(text) + 10):
            got = readinto(memoryview(buffer))
            if not got:
                break
            out += buffer[:got]
        assert bytes(out) == data
        assert readinto(memoryview(buffer)) == 0 and readinto(memoryview(buffer)) == 0


def test_crlf_text_without_its_last_line_ending_is_read() -> None:
    """The end line may lack its line ending in CRLF text too, CR and all or the LF only."""
    data = random.Random(5).randbytes(48 * 2 + 7)
    text = armor(data).replace(b"\n", b"\r\n")
    for cut in (text[:-1], text[:-2]):
        for step in (1, 4096):
            decoder = ArmorDecoder()
            assert b"".join(decoder.feed(part) for part in chunked(cut, step)) == data
            decoder.finish()
            assert decoder.done


def test_every_malformation_is_refused_at_every_cut_into_two_feeds() -> None:
    """Each malformed text fed as two pieces, cut at every byte: refused at every cut, with
    the fault the whole text gets (the decoder's batch of full lines sees the buffer as each
    cut leaves it; mutation run of 2026-12-04, mtink2: a batch that read its line endings
    at the wrong place let a line of 60 and one of 68 through at one cut)."""
    for name, text in malformations().items():
        whole = ArmorDecoder()
        with pytest.raises(ArmorError) as expected:
            whole.feed(text)
            whole.finish()
        for cut in range(len(text) + 1):
            decoder = ArmorDecoder()
            with pytest.raises(ArmorError) as raised:
                decoder.feed(text[:cut])
                decoder.feed(text[cut:])
                decoder.finish()
            assert type(raised.value) is type(expected.value), (name, cut)


def test_only_text_is_searched_for_a_later_begin_line_and_only_its_first_bytes() -> None:
    """The leading-text search (``_text_before_armor``, mutation run of 2026-12-05, mop5):
    binary input (a control byte) is passed on even if a begin line follows (``and 0x7F``
    made ``or``); a begin line that ends past the first MAX_LEADING_TEXT bytes is not looked
    for, however large the reads (the read size grown by what was read already); with two
    begin lines the first one's line is named."""
    armored = armor(b"GCMS" + bytes(40))
    binary = b"\x00\x01 binary\n" + armored
    assert read_through(binary, 1 << 16) == binary
    straddling = b"x" * (MAX_LEADING_TEXT - 10) + b"\n" + armored  # its begin line cut at the bound
    assert read_through(straddling, 1 << 16, size=1 << 16) == straddling
    with pytest.raises(ArmorError) as refused:
        read_through(b"a\n" + armored + b"b\n" + armored, 1 << 16)
    assert refused.value.line == 2


def test_text_may_hold_utf_8_but_not_a_delete_byte() -> None:
    """``_is_text``: UTF-8 (a continuation byte 0x80) is text, searched for a later begin line;
    DEL (0x7F) is not (mop5: the byte tested swapped)."""
    armored = armor(b"GCMS" + bytes(40))
    with pytest.raises(ArmorError):
        read_through("\u0100 text\n".encode() + armored, 1 << 16)
    deleted = b"\x7f text\n" + armored
    assert read_through(deleted, 1 << 16) == deleted
