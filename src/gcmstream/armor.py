"""Armor: the text form of any gcmstream file (``gcmstream encrypt -a``), as age's armor.

The armored form is the strict PEM of RFC 7468 (section 3, figure 3) around the binary file::

    -----BEGIN GCMSTREAM ENCRYPTED FILE-----
    R0NNUwID...                       standard base64 (RFC 4648 section 4, with = padding),
    ...                               64 characters a line, the last line 4 to 64
    -----END GCMSTREAM ENCRYPTED FILE-----

Rules a reader holds the text to (docs/FORMAT.md 12, "Armor"); any other text raises
ArmorError, and nothing decoded from a line is returned before that line passed them:

* the text starts with the begin line itself (no whitespace before it); every line ends with
  LF, or every line with CRLF, as the begin line does. Text before the begin line (a mail's
  "here is the file:") is refused, never skipped, as age's armor refuses data before its PEM
  block (c2sp.org/age, "ASCII armor": text around it would be malleable): the reader looks
  for the begin line in the first ``MAX_LEADING_TEXT`` bytes of text only to say so;
* every base64 line but the last has exactly 64 characters; the last has 4 to 64, a multiple
  of 4; ``=`` padding appears only at the end of the last line; the base64 is canonical (the
  unused bits of the last group are zero), so one file has one armored form;
* the end line follows the last base64 line (its own line ending may be missing at the very
  end of the text); after it only spaces, tabs, CR and LF, at most
  ``MAX_TRAILING_WHITESPACE`` bytes of them; nothing else.

Sans-IO like the codec: ``ArmorEncoder.encode``/``finish`` return text for the bytes given,
``ArmorDecoder.feed``/``finish`` bytes for the text given; ``dearmoring_reader`` puts a decoder
under any ``readinto`` and lets binary input pass untouched (the file engine reads either form
through it). Memory is bounded by the chunks given: a decoder keeps at most one partial line
(64 characters and a line ending) between calls, an encoder fewer than 48 bytes.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Callable

from .errors import ArmorError, StreamClosedError, TruncatedArmorError

__all__ = (
    "BEGIN_LINE",
    "END_LINE",
    "LINE_LENGTH",
    "MAX_LEADING_TEXT",
    "MAX_TRAILING_WHITESPACE",
    "ArmorDecoder",
    "ArmorEncoder",
    "armor",
    "dearmor",
    "dearmoring_reader",
    "is_armored",
)

BEGIN_LINE = b"-----BEGIN GCMSTREAM ENCRYPTED FILE-----"
END_LINE = b"-----END GCMSTREAM ENCRYPTED FILE-----"
LINE_LENGTH = 64  # base64 characters a line (RFC 7468's strict form; age's too)
_GROUP = LINE_LENGTH * 3 // 4  # 48 bytes make one full line
# Whitespace an editor or a mail may add after the end line; age's reader allows 1024 too.
MAX_TRAILING_WHITESPACE = 1024
_WHITESPACE = b" \t\r\n"
# Text before a begin line that dearmoring_reader reads to say it is there (a mail's words): it
# is refused either way, only its message needs the begin line found
MAX_LEADING_TEXT = 4096
# Text read a time by dearmoring_reader: its decoded bytes (3/4 of it) are what it holds back.
_TEXT_CHUNK = 256 * 1024

_Bytes = bytes | bytearray | memoryview
_ReadInto = Callable[[bytearray | memoryview], int]  # io's readinto: 0 only at the end


def is_armored(start: _Bytes) -> bool:
    """Whether ``start``, the first bytes of a file (at least ``len(BEGIN_LINE)``), are the
    begin line of the armored form. A binary file starts with b"GCMS", never with this."""
    return bytes(start[: len(BEGIN_LINE)]) == BEGIN_LINE


def armor(data: _Bytes) -> bytes:
    """The armored form of the whole binary ``data`` (ArmorEncoder in one call)."""
    encoder = ArmorEncoder()
    return encoder.encode(data) + encoder.finish()


def dearmor(text: _Bytes) -> bytes:
    """The binary file of the whole armored ``text``; ArmorError if it breaks a rule."""
    decoder = ArmorDecoder()
    data = decoder.feed(text)
    decoder.finish()
    return data


class ArmorEncoder:
    """Binary to armored text, a chunk at a time: the begin line comes with the first
    ``encode``, full lines as soon as 48 bytes are there, the last line and the end line
    from ``finish``."""

    def __init__(self) -> None:
        self._started = False
        self._finished = False
        self._rest = b""  # fewer than 48 bytes, waiting to fill a line

    def encode(self, data: _Bytes) -> bytes:
        if self._finished:
            raise StreamClosedError("ArmorEncoder.encode after finish")
        head = b"" if self._started else BEGIN_LINE + b"\n"
        self._started = True
        if len(self._rest) + len(data) < _GROUP:
            self._rest += bytes(data)
            return head
        block = self._rest + bytes(data)
        whole = len(block) - len(block) % _GROUP
        self._rest = block[whole:]
        return head + _lines(block[:whole])

    def finish(self) -> bytes:
        """The last base64 line (if any bytes are left) and the end line."""
        if self._finished:
            raise StreamClosedError("ArmorEncoder.finish called twice")
        self._finished = True
        head = b"" if self._started else BEGIN_LINE + b"\n"
        last = binascii.b2a_base64(self._rest, newline=True) if self._rest else b""
        self._rest = b""
        return head + last + END_LINE + b"\n"


# Lines cut a thousand at a time by struct: each 64-character field packed with a pad byte
# after it, the pads then made LF (base64 text never holds a NUL). 1.75x faster than a
# b2a_base64 call a line: 0.34 s of CPU against 0.59 for 48 MiB, here.
_BATCH = 1024
_UNPACK_LINES = struct.Struct(f"{LINE_LENGTH}s" * _BATCH)
_PACK_LINES = struct.Struct(f"{LINE_LENGTH}sx" * _BATCH)


def _lines(block: bytes) -> bytes:
    """``block`` (a multiple of 48 bytes) as base64 lines of 64 characters, each with its LF."""
    text = binascii.b2a_base64(block, newline=False)
    batched = len(text) - len(text) % _UNPACK_LINES.size
    parts = [
        _PACK_LINES.pack(*_UNPACK_LINES.unpack_from(text, at)) for at in range(0, batched, _UNPACK_LINES.size)
    ]
    parts += [text[at : at + LINE_LENGTH] + b"\0" for at in range(batched, len(text), LINE_LENGTH)]
    return b"".join(parts).replace(b"\0", b"\n")


# The decoder's states, in order.
_BEGIN, _BODY, _END, _TRAILER, _FAILED = range(5)


class ArmorDecoder:
    """Armored text to binary, a chunk at a time, holding the text to the module's rules.
    ``feed`` returns the bytes of every whole line the text completed; ``finish`` (at the end
    of the text) raises ArmorError if the end line never came. After an ArmorError every
    later call raises it again."""

    def __init__(self) -> None:
        self._state = _BEGIN
        self._pending = b""  # an incomplete line, at most one line and its ending
        self._eol = b"\n"
        self._line = 0  # lines completed, for messages
        self._trailing = 0  # whitespace bytes after the end line
        self._error: ArmorError | None = None

    @property
    def done(self) -> bool:
        """Whether the end line was read (only whitespace may follow)."""
        return self._state == _TRAILER

    def feed(self, text: _Bytes) -> bytes:
        self._raise_if_failed()
        try:
            return self._feed(bytes(text))
        except ArmorError as exc:
            self._state, self._error = _FAILED, exc
            raise

    def finish(self) -> None:
        """The text ended: refused unless the end line was read (and only whitespace after).
        The end line may lack its line ending, as text pasted without a last newline does."""
        self._raise_if_failed()
        if self._state in (_BODY, _END) and self._pending.rstrip(b"\r") == END_LINE:
            self._state, self._pending = _TRAILER, b""
        if self._state != _TRAILER:
            what = "the begin line" if self._state == _BEGIN else "the end line"
            self._state = _FAILED
            self._error = self._fault(f"armored text ends before {what} ({self._line} lines read)", cut=True)
            raise self._error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _feed(self, text: bytes) -> bytes:
        if self._state == _TRAILER:
            self._trailer(text)
            return b""
        buf = self._pending + text if self._pending else text
        at, out = 0, list[bytes]()
        while self._state != _TRAILER:
            if self._state == _BODY:
                at = self._full_lines(buf, at, out)
            line_end = buf.find(b"\n", at, at + LINE_LENGTH + 2)
            if line_end < 0:
                if len(buf) - at > max(LINE_LENGTH, len(BEGIN_LINE)) + 1:
                    raise self._fault(f"line {self._line + 1} is longer than {LINE_LENGTH} characters")
                self._pending = buf[at:]
                return b"".join(out)
            self._one_line(buf[at:line_end], out)
            at = line_end + 1
        self._pending = b""
        self._trailer(buf[at:])
        return b"".join(out)

    def _full_lines(self, buf: bytes, at: int, out: list[bytes]) -> int:
        """Decode the run of full 64-character lines at ``at`` in one call; return where it
        ends. Lines are full when every line ending falls where a full line puts it, no padding
        is among them, and taking the line endings out leaves 64 characters a line (no other
        line ending inside); anything else is left to ``_one_line``. A stray CR or LF left
        inside a line is refused by the strict base64 decoder."""
        step = LINE_LENGTH + len(self._eol)
        count = (len(buf) - at) // step
        # CR (or LF) where each line's ending starts, and LF after the CR of a CRLF
        count = _leading(buf[at + LINE_LENGTH : at + count * step : step], self._eol[:1], count)
        if self._eol == b"\r\n":
            count = _leading(buf[at + LINE_LENGTH + 1 : at + count * step : step], b"\n", count)
        padding = buf.find(b"=", at, at + count * step)
        if padding >= 0:
            count = (padding - at) // step  # the padded line is the last: _one_line checks it
        if not count:
            return at
        body = buf[at : at + count * step].replace(self._eol, b"")
        if len(body) != count * LINE_LENGTH:
            return at  # a short line among them: one line at a time finds it
        out.append(self._decode(body, self._line + 1))
        self._line += count
        return at + count * step

    def _one_line(self, line: bytes, out: list[bytes]) -> None:
        self._line += 1
        if self._state == _BEGIN:
            self._begin(line)
            return
        line = self._without_eol(line)
        if line == END_LINE:
            self._state = _TRAILER
        elif self._state == _END:
            raise self._fault(f"line {self._line}: the end line must follow the last, short line")
        else:
            out.append(self._base64_line(line))

    def _begin(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            self._eol, line = b"\r\n", line[:-1]
        if line != BEGIN_LINE:
            raise self._fault(f"armored text starts with {BEGIN_LINE.decode()!r}")
        self._state = _BODY

    def _without_eol(self, line: bytes) -> bytes:
        """The line without the CR of a CRLF: every line ends as the begin line does."""
        if self._eol == b"\r\n":
            if not line.endswith(b"\r"):
                raise self._fault(f"line {self._line} ends with LF where the begin line ends with CRLF")
            return line[:-1]
        if line.endswith(b"\r"):
            raise self._fault(f"line {self._line} ends with CRLF where the begin line ends with LF")
        return line

    def _base64_line(self, line: bytes) -> bytes:
        if len(line) > LINE_LENGTH:
            raise self._fault(f"line {self._line} is longer than {LINE_LENGTH} characters")
        if len(line) < LINE_LENGTH or line.endswith(b"="):
            self._state = _END  # the last base64 line
            if not line or len(line) % 4:
                raise self._fault(
                    f"line {self._line} has {len(line)} characters: a last line has 4 to "
                    f"{LINE_LENGTH}, a multiple of 4, and only the last line is short"
                )
        data = self._decode(line, self._line)
        if self._state == _END and binascii.b2a_base64(data, newline=False) != line:
            raise self._fault(f"line {self._line} is not canonical base64 (nonzero padding bits)")
        return data

    def _decode(self, text: bytes, line: int) -> bytes:
        try:
            return binascii.a2b_base64(text, strict_mode=True)
        except binascii.Error:
            raise self._fault(f"line {line} (or a line after it) is not standard base64", line) from None

    def _trailer(self, text: bytes) -> None:
        self._trailing += len(text)
        if text.strip(_WHITESPACE):
            raise self._fault("data follows the end line")
        if self._trailing > MAX_TRAILING_WHITESPACE:
            raise self._fault(f"more than {MAX_TRAILING_WHITESPACE} bytes of whitespace follow the end line")

    def _fault(self, message: str, line: int | None = None, *, cut: bool = False) -> ArmorError:
        error = TruncatedArmorError(message) if cut else ArmorError(message)
        error.line = self._line if line is None else line
        return error


def _leading(ends: bytes, end: bytes, most: int) -> int:
    """How many of the first ``most`` bytes of ``ends`` are ``end``."""
    ends = ends[:most]
    return len(ends) - len(ends.lstrip(end))


def dearmoring_reader(readinto: _ReadInto) -> _ReadInto:
    """A ``readinto`` that reads the binary file under ``readinto``'s bytes whichever form they
    are in: armored text is decoded (ArmorError if it breaks a rule, raised by the read that
    finds it; 0, the end, only once the end line and what follows passed), a binary file
    passes through untouched. The form is told by the first bytes, read as they come."""
    start = bytearray()
    while len(start) < len(BEGIN_LINE) and BEGIN_LINE.startswith(start):
        chunk = bytearray(len(BEGIN_LINE) - len(start))
        got = readinto(memoryview(chunk))
        if not got:
            break
        start += chunk[:got]
    # the whole begin line, or input that ended inside it (armor cut short: a truncation)
    if start and BEGIN_LINE.startswith(start[: len(BEGIN_LINE)]):
        return _ArmoredReader(readinto, bytes(start)).readinto
    ended = False
    if _is_text(start) and not _BINARY_START.startswith(start[: len(_BINARY_START)]):
        start, ended = _text_before_armor(readinto, start)
    return _PrefixedReader(readinto, bytes(start), ended=ended).readinto


# A binary file's first bytes (format.MAGIC; this module sits below format.py): input that
# may still be one is not read ahead of the begin line's length
_BINARY_START = b"GCMS"


def _is_text(start: bytes | bytearray) -> bool:
    """Whether ``start`` is text: printable ASCII or UTF-8, tabs, line endings."""
    return bool(start) and all(byte >= 0x20 or byte in _WHITESPACE for byte in start) and 0x7F not in start


def _text_before_armor(readinto: _ReadInto, start: bytearray) -> tuple[bytearray, bool]:
    """Text read on, up to ``MAX_LEADING_TEXT`` bytes, to look for a begin line after it (a
    mail's "here is the file:"): found, ArmorError says text precedes the armor (which must
    start the input: strict, as age's armor, docs/FORMAT.md 12); else the bytes read, for the
    binary reader to refuse as another format, and whether the input ended."""
    ended = False
    while len(start) < MAX_LEADING_TEXT and not ended:
        chunk = bytearray(MAX_LEADING_TEXT - len(start))
        got = readinto(memoryview(chunk))
        ended = not got
        start += chunk[:got]
    at = start.find(b"\n" + BEGIN_LINE)
    if at < 0:
        return start, ended
    line = start.count(b"\n", 0, at + 1) + 1
    fault = ArmorError(
        f"text precedes the armor: its begin line is line {line}; armored text must start with "
        "the begin line (as age's armor: text around it could be changed unseen): remove the lines before "
        f"'{BEGIN_LINE.decode()}'"
    )
    fault.line = line
    raise fault


class _PrefixedReader:
    """The bytes read to tell the form, then the rest straight from ``readinto``."""

    def __init__(self, readinto: _ReadInto, start: bytes, *, ended: bool = False) -> None:
        self._raw, self._start, self._ended = readinto, start, ended

    def readinto(self, buffer: bytearray | memoryview) -> int:
        if not self._start:
            return 0 if self._ended else self._raw(buffer)  # (a terminal would wait for a second end)
        count = min(len(buffer), len(self._start))
        buffer[:count] = self._start[:count]
        self._start = self._start[count:]
        return count


class _ArmoredReader:
    def __init__(self, readinto: _ReadInto, start: bytes) -> None:
        self._raw = readinto
        self._decoder = ArmorDecoder()
        self._text = bytearray(_TEXT_CHUNK)
        self._ready = memoryview(self._decoder.feed(start))
        self._ended = False

    def readinto(self, buffer: bytearray | memoryview) -> int:
        while not self._ready:
            if self._ended:
                return 0
            got = self._raw(memoryview(self._text))
            if not got:
                self._decoder.finish()
                self._ended = True
                return 0
            self._ready = memoryview(self._decoder.feed(memoryview(self._text)[:got]))
        count = min(len(buffer), len(self._ready))
        buffer[:count] = self._ready[:count]
        self._ready = self._ready[count:]
        return count
