"""Pipelines: encrypt or decrypt a whole byte source into a byte sink, in constant memory.

Three layers, one loop each way:

* ``encrypt_iter`` / ``decrypt_iter``: an async iterable of bytes in, an async iterator of
  bytes out (an upload produced by an async generator, a body consumed by an HTTP client).
* ``encrypt_stream`` / ``decrypt_stream``: from an anyio ``ByteReceiveStream``, an asyncio
  ``StreamReader``, an anyio ``AsyncFile`` or an async iterable, to an anyio
  ``ByteSendStream``, an asyncio ``StreamWriter`` or an ``AsyncFile``. Neither end is closed.
  Anything else (a plain ``open()`` file: wrap it with ``anyio.wrap_file``) raises
  ``UnsupportedEndpointError``.
* ``encrypt_file_async`` / ``decrypt_file_async`` and the synchronous ``encrypt_file`` /
  ``decrypt_file``: path to path, with the file engine (``gcmstream.files``: one synchronous
  loop over file descriptors, in one worker thread per file for the async ones, in the
  calling thread for the others), never on the event loop.

Every function is keyed like ``Sealer``/``Opener``: ``key=``, or ``recipients=`` or
``passphrase=`` to encrypt and ``identities=`` or ``passphrase=`` to decrypt
(``gcmstream.recipients``); or ``config=``, a :class:`~gcmstream.Configuration` shared with
sockets, of which a file function uses what it has keywords for: the key (a KeyRing's primary
key seals, any of its keys opens), ``context``, ``record_size`` to encrypt,
``max_record_size`` to decrypt (and ``limits`` in ``gcmstream.files.encrypt_path``), never
the channel's options, timeouts or ``ring_size`` (the file engine sizes its own ring). An
option given beside ``config=`` is a TypeError naming it (:func:`file_keywords`).

Guarantees:

* Nothing unauthenticated is released. Decryption hands out plaintext record by record, each
  only after its tag verified; before waiting for more input, everything authenticated so far
  has been passed on (so a pipe consumer sees data as soon as it is safe). When a record fails,
  the plaintext before it has been written and the error is raised.
* One source holds one stream: bytes after the FINAL record raise ``TrailingDataError`` (the
  source is read to its end to check).
* File output is atomic: the data goes to a temporary file beside the target, which replaces
  the target (``os.replace``, after ``fsync``) only once the FINAL record authenticated; on any
  failure (or cancellation) the temporary file is removed and the target is left as it was. The
  output gets mode 0600 whatever was there before (``atomic_output`` takes another ``mode``); a
  symbolic link is followed only if this user or root owns it, so a link planted by someone
  else cannot redirect the output; a target that is not a regular file (``/dev/null``, a FIFO)
  is written in place, if this user or root owns it.
* A file function whose ``dst`` is ``src`` itself (the same regular file, FIFO or block device,
  by any path or link) raises ``SameFileError`` before anything is read or written: the
  command line's rule (``/dev/null`` and other character devices are never "the same file").
  It is applied again once ``src`` is open, to what ``dst`` leads to then and to the file at
  its name just before the rename: ``dst`` made to lead to ``src`` meanwhile is refused too.
* Memory does not grow with the size of the input: the opener's ring (4 records, at least
  64 KiB), one read buffer and one write buffer of ``CHUNK_SIZE`` each (the file functions:
  a 1 MiB ring and one output buffer of 1 MiB or two records, see ``gcmstream.files``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

from ._output import finished, open_output
from .errors import TrailingDataError, TruncatedStreamError, UnsupportedEndpointError
from .format import Buffer, Keys, byte_view
from .opener import Opener
from .recipients import Identity, Recipient
from .sealer import Sealer
from .tinkstream import TinkKeyset, TinkOpener, TinkSealer, TinkStreamingKey, refuse_beside_tink

if TYPE_CHECKING:
    import asyncio

    from anyio import AsyncFile
    from anyio.abc import ByteReceiveStream, ByteSendStream

    from .config import Configuration

    ByteSource: TypeAlias = (
        ByteReceiveStream | asyncio.StreamReader | AsyncFile[bytes] | AsyncIterable[Buffer]
    )
    ByteSink: TypeAlias = ByteSendStream | asyncio.StreamWriter | AsyncFile[bytes]

__all__ = (
    "CHUNK_SIZE",
    "ByteSink",
    "ByteSource",
    "atomic_output",
    "decrypt_file",
    "decrypt_file_async",
    "decrypt_iter",
    "decrypt_stream",
    "encrypt_file",
    "encrypt_file_async",
    "encrypt_iter",
    "encrypt_stream",
    "file_keywords",
    "opener_for",
    "sealer_for",
    "tink_associated_data",
)

# Bytes asked of a source per read, and gathered before a write to a file. At 1 MiB a GiB costs
# about 2048 thread hops for file I/O; smaller chunks made hops the bottleneck (256 KiB: 4x as many).
CHUNK_SIZE = 1024 * 1024


if not TYPE_CHECKING:  # (mypy reads the aliases above, not a module __getattr__ typed Any)

    def __getattr__(name: str) -> Any:
        """``ByteSource`` and ``ByteSink``, made on first use (PEP 562): they name asyncio's and
        anyio's classes, which the file engine and the CLI's file commands never load."""
        if name not in ("ByteSource", "ByteSink"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import asyncio

        from anyio import AsyncFile
        from anyio.abc import ByteReceiveStream, ByteSendStream

        aliases = {
            "ByteSource": ByteReceiveStream | asyncio.StreamReader | AsyncFile[bytes] | AsyncIterable[Buffer],
            "ByteSink": ByteSendStream | asyncio.StreamWriter | AsyncFile[bytes],
        }
        globals().update(aliases)
        return aliases[name]


_KEYING = ("recipients", "identities", "passphrase")  # what a Configuration never holds


def file_keywords(config: Configuration | None, /, **options: Any) -> dict[str, Any]:
    """The one place a file or pipeline function's options become its Sealer's or Opener's
    keywords. ``options`` are the function's keying and size keywords as the caller passed
    them (None where not given: None is no value any of them takes). Without ``config``, those
    given (the Sealer or Opener checks them and applies its defaults); with it, the
    configuration's values of the same options, and any given beside it is a TypeError
    naming it (``gcmstream.config.configure``'s rule). The configuration module is imported
    only then: a file command starts without the channel's."""
    given = {name: value for name, value in options.items() if value is not None}
    if config is None:
        return given
    from .config import configure

    configure(config, **given)  # raises, naming what was given beside config=
    return {name: getattr(config, name) for name in options if name not in _KEYING}


def tink_associated_data(context: Buffer | None, /, **others: object) -> bytes:
    """A function given ``tink=`` (Tink's format, docs/TINK.md): its associated data (the
    context, empty if not given); any other keying or size option given beside it (None: not
    given) is a TypeError naming it (``tinkstream.refuse_beside_tink``)."""
    refuse_beside_tink([name for name, value in others.items() if value is not None])
    return b"" if context is None else bytes(context)


StrPath: TypeAlias = str | os.PathLike[str]
Progress: TypeAlias = Callable[[int], object]
TinkKeys: TypeAlias = TinkKeyset | TinkStreamingKey


def sealer_for(
    config: Configuration | None,
    tink: TinkKeys | None,
    /,
    *,
    context: Buffer | None,
    make: Callable[..., Sealer] = Sealer,
    **options: Any,
) -> Sealer | TinkSealer:
    """The one rule of every writer of the pipelines and the file functions: Tink's format when
    ``tink`` is given (its keyset alone, ``context`` as Tink's associated data:
    ``tink_associated_data``), else gcmstream's, made by ``make`` (the file engine's adds its
    fixed layout) from ``config`` or the keywords (``file_keywords``)."""
    if tink is not None:
        return TinkSealer(tink, tink_associated_data(context, config=config, **options))
    return make(**file_keywords(config, context=context, **options))


def opener_for(
    config: Configuration | None,
    tink: TinkKeys | None,
    /,
    *,
    context: Buffer | None,
    make: Callable[..., Opener] = Opener,
    **options: Any,
) -> Opener | TinkOpener:
    """``sealer_for``'s rule for every reader of the pipelines and the file functions."""
    if tink is not None:
        return TinkOpener(tink, tink_associated_data(context, config=config, **options))
    return make(**file_keywords(config, context=context, **options))


# A Reader returns the next bytes of a source (empty at its end), valid until the next call.
# A Writer writes all of a view and does not keep it after returning.
_Reader: TypeAlias = Callable[[], Awaitable[Buffer]]
_Writer: TypeAlias = Callable[[memoryview], Awaitable[None]]

_FLUSH = memoryview(b"")  # yielded by the opening loop right before it waits for input


# -- the two loops ----------------------------------------------------------------------------


async def _sealed(read: _Reader, sealer: Sealer | TinkSealer) -> AsyncIterator[memoryview]:
    """Ciphertext views (each valid until the next iteration) of everything ``read`` returns."""
    while True:
        chunk = await read()
        if not len(chunk):
            break
        out = sealer.seal(chunk)
        if out:
            yield out
    yield sealer.close()


async def _opened(read: _Reader, opener: Opener | TinkOpener) -> AsyncIterator[memoryview]:
    """Authenticated plaintext views, one record at a time (each valid until the next
    iteration); an empty view (``_FLUSH``) right before waiting for input. Raises the
    opener's ProtocolError once everything authenticated before it has been yielded."""
    rest = memoryview(b"")
    eof = False
    while True:
        view = opener.read_view()
        if view is not None:
            if not view:
                break  # FINAL authenticated and read
            yield view
            continue
        if rest:
            rest = _fed(opener, rest)
            continue
        if eof:  # the opener reports truncation itself; this guards against a silent stall
            raise TruncatedStreamError("input ended without a FINAL record")
        yield _FLUSH
        chunk = await read()
        if not len(chunk):
            eof = True
            opener.receive_eof()
            continue
        view = byte_view(chunk)
        rest = view[opener.receive_some(view) :]
    if rest:
        raise TrailingDataError("data follows the FINAL record")
    if not eof:
        yield _FLUSH  # the last record goes out before waiting for the source to end
        if len(await read()):
            raise TrailingDataError("data follows the FINAL record")


def _fed(opener: Opener | TinkOpener, rest: memoryview) -> memoryview:
    """What is left of ``rest`` once the opener has taken what it can; taking nothing here
    (with no record to release) would stall the loop, so it is a bug."""
    taken = opener.receive_some(rest)
    if not taken:  # the opener neither took input nor released a record
        raise RuntimeError("gcmstream bug: the opener stalled with input waiting")
    return rest[taken:]


# -- sources and sinks --------------------------------------------------------------------------


def _reader(source: ByteSource, chunk_size: int, progress: Progress | None) -> _Reader:
    """One way to read every kind of source; streams first (they are async iterables too)."""
    import asyncio

    from anyio import AsyncFile
    from anyio.abc import ByteReceiveStream

    read: _Reader
    if isinstance(source, ByteReceiveStream):
        read = _stream_reader(source, chunk_size)
    elif isinstance(source, asyncio.StreamReader):
        read = partial(source.read, chunk_size)
    elif isinstance(source, AsyncFile):
        read = _file_reader(source, chunk_size)
    elif isinstance(source, AsyncIterable):
        read = _iterable_reader(source)
    else:
        raise UnsupportedEndpointError(f"cannot read from {_endpoint_hint(source)}")
    return read if progress is None else _counted(read, progress)


def _stream_reader(stream: ByteReceiveStream, chunk_size: int) -> _Reader:
    from anyio import EndOfStream

    async def read() -> Buffer:
        try:
            return await stream.receive(chunk_size)
        except EndOfStream:
            return b""

    return read


def _file_reader(file: AsyncFile[bytes], chunk_size: int) -> _Reader:
    buf = bytearray(chunk_size)
    view = memoryview(buf)

    async def read() -> Buffer:
        return view[: await file.readinto(buf)]

    return read


def _iterable_reader(source: AsyncIterable[Buffer]) -> _Reader:
    iterator = aiter(source)

    async def read() -> Buffer:
        async for chunk in iterator:
            if len(chunk):
                return chunk
        return b""

    return read


def _counted(inner: _Reader, report: Progress) -> _Reader:
    """``inner``, telling ``report`` how many bytes each non-empty read returned."""

    async def counted() -> Buffer:
        chunk = await inner()
        if len(chunk):
            report(len(chunk))
        return chunk

    return counted


def _writer(sink: ByteSink) -> _Writer:
    import asyncio

    from anyio import AsyncFile
    from anyio.abc import ByteSendStream

    if isinstance(sink, ByteSendStream):
        stream = sink

        async def write(view: memoryview) -> None:
            await stream.send(bytes(view))  # a transport may keep what it is given: copy

    elif isinstance(sink, asyncio.StreamWriter):
        writer = sink

        async def write(view: memoryview) -> None:
            writer.write(bytes(view))
            await writer.drain()

    elif isinstance(sink, AsyncFile):
        file = sink

        async def write(view: memoryview) -> None:
            while view:
                view = view[await file.write(view) :]

    else:
        raise UnsupportedEndpointError(f"cannot write to {_endpoint_hint(sink)}")
    return write


def _endpoint_hint(endpoint: object) -> str:
    kind = f"a {type(endpoint).__module__}.{type(endpoint).__qualname__}"
    if hasattr(endpoint, "read") or hasattr(endpoint, "write"):  # a plain, blocking file object
        return f"{kind}: wrap a file with anyio.wrap_file(), or open it with anyio.open_file()"
    return f"{kind}: give an anyio byte stream, an asyncio StreamReader/StreamWriter or an anyio AsyncFile"


class _Gather:
    """Gathers small plaintext views into one buffer so that a sink sees few large writes."""

    def __init__(self, write: _Writer, size: int) -> None:
        self._write = write
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._used = 0

    async def add(self, data: memoryview) -> None:
        if self._used + len(data) > len(self._buf):
            await self.flush()
        if len(data) >= len(self._buf):
            await self._write(data)
            return
        self._view[self._used : self._used + len(data)] = data
        self._used += len(data)

    async def flush(self) -> None:
        if self._used:
            used, self._used = self._used, 0
            await self._write(self._view[:used])


async def _encrypt(read: _Reader, write: _Writer, sealer: Sealer | TinkSealer) -> None:
    async for out in _sealed(read, sealer):
        await write(out)


async def _decrypt(read: _Reader, write: _Writer, opener: Opener | TinkOpener, *, eager: bool) -> None:
    """Eager: pass on what authenticated before waiting for input (streams, pipes); else
    gather CHUNK_SIZE bytes per write (files, where nobody sees the data before the end)."""
    gather = _Gather(write, CHUNK_SIZE)
    try:
        async for view in _opened(read, opener):
            if view:
                await gather.add(view)
            elif eager:
                await gather.flush()
    finally:
        await gather.flush()  # on failure too: what was gathered authenticated


# -- public API: iterables and streams --------------------------------------------------------


async def encrypt_iter(
    chunks: AsyncIterable[Buffer],
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    record_size: int | None = None,
    tink: TinkKeys | None = None,
) -> AsyncIterator[bytes]:
    """Encrypt an async iterable of plaintext chunks into the chunks of one gcmstream stream
    (header, records, FINAL). A partial record waits for more input; the last one goes out
    with FINAL when ``chunks`` ends."""
    sealer = sealer_for(
        config,
        tink,
        context=context,
        key=key,
        recipients=recipients,
        passphrase=passphrase,
        record_size=record_size,
    )
    read = _reader(chunks, CHUNK_SIZE, None)
    async for out in _sealed(read, sealer):
        yield bytes(out)


async def decrypt_iter(
    chunks: AsyncIterable[Buffer],
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
    tink: TinkKeys | None = None,
) -> AsyncIterator[bytes]:
    """Decrypt the chunks of one gcmstream stream, yielding each record's plaintext once it
    authenticated. Raises a ``ProtocolError`` (after yielding every good record before it)
    if the stream is tampered, truncated, for another key or context, or followed by data."""
    opener = opener_for(
        config,
        tink,
        context=context,
        key=key,
        identities=identities,
        passphrase=passphrase,
        max_record_size=max_record_size,
    )
    read = _reader(chunks, CHUNK_SIZE, None)
    async for view in _opened(read, opener):
        if view:
            yield bytes(view)


async def encrypt_stream(
    source: ByteSource,
    sink: ByteSink,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    record_size: int | None = None,
    progress: Progress | None = None,
    tink: TinkKeys | None = None,
) -> None:
    """Encrypt everything ``source`` delivers until its end into ``sink`` as one stream.
    Neither is closed. ``progress`` is called with the size of each chunk read."""
    sealer = sealer_for(
        config,
        tink,
        context=context,
        key=key,
        recipients=recipients,
        passphrase=passphrase,
        record_size=record_size,
    )
    await _encrypt(_reader(source, CHUNK_SIZE, progress), _writer(sink), sealer)


async def decrypt_stream(
    source: ByteSource,
    sink: ByteSink,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
    progress: Progress | None = None,
    tink: TinkKeys | None = None,
) -> None:
    """Decrypt the one stream ``source`` delivers into ``sink``, releasing only authenticated
    plaintext; on failure what authenticated before it is written, then the error is raised.
    Neither end is closed. ``progress`` is called with the size of each chunk read."""
    opener = opener_for(
        config,
        tink,
        context=context,
        key=key,
        identities=identities,
        passphrase=passphrase,
        max_record_size=max_record_size,
    )
    await _decrypt(_reader(source, CHUNK_SIZE, progress), _writer(sink), opener, eager=True)


# -- files --------------------------------------------------------------------------------------


@asynccontextmanager
async def atomic_output(path: StrPath, *, mode: int = 0o600) -> AsyncIterator[AsyncFile[bytes]]:
    """An ``AsyncFile`` whose content replaces ``path`` (with permissions ``mode``) only if
    the block exits normally. Symbolic links are followed, and a FIFO or device written in
    place, only when this user or root owns them (else PermissionError)."""
    from anyio import to_thread

    output = await to_thread.run_sync(open_output, path, mode)
    async with finished(output) as file:
        yield file


async def encrypt_file_async(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    record_size: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    tink: TinkKeys | None = None,
) -> None:
    """Encrypt the file ``src`` into ``dst`` (atomically: see the module docs), with the file
    engine (``gcmstream.files``) in one worker thread; ``progress`` is called there. When the
    task is cancelled the engine stops within one 1 MiB read, or within one short poll while a
    pipe or FIFO given as ``src`` is idle, and ``dst`` is left as it was. ``jobs``: threads
    that seal records at their places when ``src`` is a regular file (docs/FORMAT.md 4.3.1:
    the bytes one thread writes; default 1)."""
    from .files import encrypt_path, run_in_worker  # (files.py builds on this module)

    await run_in_worker(
        partial(
            encrypt_path,
            src,
            dst,
            config=config,
            key=key,
            recipients=recipients,
            passphrase=passphrase,
            context=context,
            record_size=record_size,
            progress=progress,
            jobs=jobs,
            tink=tink,
        )
    )


async def decrypt_file_async(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    tink: TinkKeys | None = None,
) -> None:
    """Decrypt the file ``src`` into ``dst``; ``dst`` appears only once every record, FINAL
    included, authenticated, and is left untouched on any error. The file engine runs in one
    worker thread (``progress`` is called there), as for ``encrypt_file_async``. ``jobs``:
    threads that open records at their places when ``src`` is a regular file with the fixed
    layout (docs/FORMAT.md 4.3.1: the same output and errors as one thread; default 1)."""
    from .files import decrypt_path, run_in_worker

    await run_in_worker(
        partial(
            decrypt_path,
            src,
            dst,
            config=config,
            key=key,
            identities=identities,
            passphrase=passphrase,
            context=context,
            max_record_size=max_record_size,
            progress=progress,
            jobs=jobs,
            tink=tink,
        )
    )


def encrypt_file(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    record_size: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    tink: TinkKeys | None = None,
) -> None:
    """Synchronous ``encrypt_file_async`` for scripts: the file engine in the calling thread
    and ``jobs - 1`` more (Ctrl-C stops them and leaves ``dst`` as it was)."""
    from .files import encrypt_path

    encrypt_path(
        src,
        dst,
        config=config,
        key=key,
        recipients=recipients,
        passphrase=passphrase,
        context=context,
        record_size=record_size,
        progress=progress,
        jobs=jobs,
        tink=tink,
    )


def decrypt_file(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    tink: TinkKeys | None = None,
) -> None:
    """Synchronous ``decrypt_file_async`` for scripts: the file engine in the calling thread
    and ``jobs - 1`` more."""
    from .files import decrypt_path

    decrypt_path(
        src,
        dst,
        config=config,
        key=key,
        identities=identities,
        passphrase=passphrase,
        context=context,
        max_record_size=max_record_size,
        progress=progress,
        jobs=jobs,
        tink=tink,
    )
