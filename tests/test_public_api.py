"""The public surface: ``__all__`` lists are complete, the top level re-exports what an
application calls (and nothing else), and every exception class is in the documented tree."""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path
from types import ModuleType

import pytest

import gcmstream
import gcmstream.errors
import gcmstream.format


def _public_modules() -> list[str]:
    names = [gcmstream.__name__]
    for info in pkgutil.walk_packages(gcmstream.__path__, prefix=f"{gcmstream.__name__}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


PUBLIC_MODULES = _public_modules()


def test_core_modules_are_public() -> None:
    for name in ("gcmstream.codec", "gcmstream.errors", "gcmstream.format", "gcmstream.ring"):
        assert name in PUBLIC_MODULES


def test_top_level_all_names_exist() -> None:
    assert len(set(gcmstream.__all__)) == len(gcmstream.__all__), "duplicate names in __all__"
    for name in gcmstream.__all__:
        assert hasattr(gcmstream, name), f"gcmstream.__all__ lists {name!r}, which does not exist"


def test_top_level_exports_every_exception() -> None:
    assert set(gcmstream.errors.__all__) <= set(gcmstream.__all__)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_module_all_is_complete(module_name: str) -> None:
    module: ModuleType = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, tuple | list), f"{module_name} has no __all__"
    assert len(set(exported)) == len(exported), f"duplicate names in {module_name}.__all__"
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ lists {name!r}, which does not exist"
    defined = {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == module_name
    }
    missing = sorted(defined - set(exported))
    assert not missing, f"{module_name}.__all__ is missing {missing}"


# What the top level re-exports: every name of these modules' __all__, except the ones listed
# here with why (websockets keeps a test of this kind). Other public modules are building
# blocks reached through their own name (gcmstream.format, gcmstream.ring, ...).
TOP_LEVEL_MODULES: dict[str, set[str]] = {
    # the policy is what an application passes; the rest is the servers' machinery
    "gcmstream.admission": {
        "DEFAULT_ADMISSION",
        "REPORT_INTERVAL",
        "Admission",
        "HandshakeInput",
        "admission_policy",
        "check_pending_limit",
        "fit_to_descriptors",
        "source_of",
    },
    "gcmstream.aio": set(),
    "gcmstream.anyio_stream": {
        # caught as their gcmstream.errors bases; they exist to also be anyio's resource errors
        "AnyioStreamBrokenError",
        "AnyioStreamClosedError",
        "AnyioTruncatedStreamError",
    },
    # handshake parts, and a property's type, read from the Channel
    "gcmstream.channel": {"ChannelPhase", "DEFAULT_HANDSHAKE", "HandshakeOptions", "check_key_exchange"},
    "gcmstream.codec": {"ChannelPhase", "Phase"},  # properties' types, read from the Opener and Channel
    "gcmstream.config": {  # the defaults and the parts every entry point calls
        "DEFAULT_HANDSHAKE_TIMEOUT",
        "DEFAULT_IDLE_TIMEOUT",
        "DEFAULT_RECORD_TIMEOUT",
        "UNSET",
        "Unset",
        "check_timeout",
        "configure",
    },
    "gcmstream.errors": set(),
    "gcmstream.keyfile": {"KEY_PREFIX", "format_key", "parse_key"},  # the text form, for tools
    "gcmstream.pipeline": {
        "ByteSink",
        "ByteSource",
        "CHUNK_SIZE",
        "atomic_output",
        "file_keywords",
        "opener_for",
        "sealer_for",
        "tink_associated_data",
    },  # types and parts
    "gcmstream.recipients": {  # limits and the parts Sealer and Opener build on
        "DEFAULT_WORK_FACTOR",
        "FILE_KEY_SIZE",
        "MAX_IDENTITIES",
        "MAX_SCRYPT_MEMORY",
        "MAX_SCRYPT_WORK",
        "MAX_STANZAS",
        "Unlocker",
        "check_recipients",
        "check_work_factor",
        "parse_identities",
        "parse_recipients",
        "parse_recipients_file",
        "seal_stanzas",
    },
    "gcmstream.seekable": {"open_regular"},  # the regular-file check random-access readers share
}
FROM_FORMAT = {
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_RECORD_SIZE",
    "HARD_MAX_RECORD_SIZE",
    "KeyExchange",
    "KeyLimits",
    "KeyRing",
    "Role",
    "Suite",
    "generate_key",
    "key_id",
}


@pytest.mark.parametrize("module_name", sorted(TOP_LEVEL_MODULES))
def test_top_level_re_exports_the_module(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in sorted(set(module.__all__) - TOP_LEVEL_MODULES[module_name]):
        assert name in gcmstream.__all__, f"{module_name}.{name} is not re-exported by gcmstream"
        assert getattr(gcmstream, name) is getattr(module, name), name
    for name in TOP_LEVEL_MODULES[module_name]:
        assert name not in gcmstream.__all__, f"{name} is listed as kept in {module_name}"


def test_top_level_holds_nothing_else() -> None:
    known = set(FROM_FORMAT)
    for module_name, kept in TOP_LEVEL_MODULES.items():
        known |= set(importlib.import_module(module_name).__all__) - kept
    assert set(gcmstream.__all__) == known
    for name in FROM_FORMAT:
        assert getattr(gcmstream, name) is getattr(gcmstream.format, name), name


def test_anyio_entry_points_are_top_level_like_the_asyncio_ones() -> None:
    for name in (
        "open_connection",
        "start_server",
        "connect_tcp",
        "create_tcp_listener",
        "GcmStreamAttribute",
    ):
        assert name in gcmstream.__all__, name


def _exception_classes() -> list[type[BaseException]]:
    """Every exception class a public module defines (errors.py and the anyio adapter's)."""
    found = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        found += [
            obj
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and obj.__module__ == module_name
        ]
    return found


def test_errors_module_defines_exceptions() -> None:
    assert len(_exception_classes()) >= 10
    assert gcmstream.KeyFileError.__module__ == "gcmstream.errors"


@pytest.mark.parametrize("exc_type", _exception_classes(), ids=lambda t: t.__name__)
def test_exception_derives_from_root_and_is_documented(exc_type: type[BaseException]) -> None:
    assert issubclass(exc_type, gcmstream.GcmStreamError)
    doc = gcmstream.errors.__doc__ or ""
    assert re.search(rf"\b{exc_type.__name__}\b", doc), f"{exc_type.__name__} is not in the errors docstring"
    module = importlib.import_module(exc_type.__module__)
    assert exc_type.__name__ in module.__all__
    if exc_type.__module__ == "gcmstream.errors":
        assert exc_type.__name__ in gcmstream.errors.__all__
        assert getattr(gcmstream, exc_type.__name__) is exc_type


def test_handshake_timeout_is_one_type_and_one_default_everywhere() -> None:
    """Every public callable that takes ``handshake_timeout`` types it ``float | None`` (None:
    no limit): Configuration with the one default (gcmstream.config.DEFAULT_HANDSHAKE_TIMEOUT),
    every entry point as its shorthand, UNSET (that default, or config='s value)."""
    from gcmstream.config import DEFAULT_HANDSHAKE_TIMEOUT, UNSET

    found = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            targets = [obj.wrap] if name == "SecureStream" else [obj]
            for target in targets:
                if not callable(target) or (isinstance(target, type) and issubclass(target, BaseException)):
                    continue
                try:
                    parameters = inspect.signature(target).parameters
                except (TypeError, ValueError):
                    continue
                parameter = parameters.get("handshake_timeout")
                if parameter is None:
                    continue
                found.append(f"{module_name}.{name}")
                if "config" in parameters:
                    assert parameter.annotation == "float | Unset | None", f"{module_name}.{name}"
                    assert parameter.default is UNSET, f"{module_name}.{name}"
                else:
                    assert parameter.annotation == "float | None", f"{module_name}.{name}"
                    assert parameter.default == DEFAULT_HANDSHAKE_TIMEOUT, f"{module_name}.{name}"
    assert {"gcmstream.aio.open_connection", "gcmstream.anyio_stream.create_tcp_listener"} <= set(found)
    assert {"gcmstream.anyio_stream.SecureListener", "gcmstream.config.Configuration"} <= set(found)


# Built-in exceptions the source may raise besides the tree (errors.py, "Rules that hold
# everywhere"): argument checks (ValueError, TypeError), OSError and its kin (a lost connection,
# as asyncio's StreamWriter), the iteration protocol, an abstract method, a conformance check's
# failure (testing.py's AssertionError) and a RuntimeError that names itself a gcmstream bug.
ALLOWED_BUILTIN_RAISES = {
    "ValueError",
    "TypeError",
    "OSError",
    "ConnectionResetError",
    "TimeoutError",  # an OSError: the handshake timeout, as anyio.fail_after raised it before issue 21
    "StopAsyncIteration",
    "NotImplementedError",
    "RuntimeError",
    "AttributeError",  # assigning to a frozen Configuration, as a frozen dataclass raises
}


def _builtin_raises() -> list[tuple[str, int, str, ast.expr | None]]:
    found = []
    for path in sorted(Path(gcmstream.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                call = node.exc if isinstance(node.exc, ast.Call) else None
                name = call.func if call is not None else node.exc
                if isinstance(name, ast.Name) and isinstance(getattr(builtins, name.id, None), type):
                    first = call.args[0] if call is not None and call.args else None
                    found.append((path.name, node.lineno, name.id, first))
    return found


def test_every_raise_outside_the_tree_is_one_the_rules_allow() -> None:
    raises = _builtin_raises()
    assert raises, "the scan found no raise at all"
    for module, line, name, first in raises:
        where = f"{module}:{line} raises {name}"
        if module == "testing.py":
            assert name == "AssertionError", where  # a check of the conformance suite failed
            continue
        assert name in ALLOWED_BUILTIN_RAISES, where
        if name == "RuntimeError":
            message = first.value if isinstance(first, ast.Constant) else ""
            assert isinstance(message, str) and message.startswith("gcmstream bug"), where


# What only the record layer touches: the AEAD of a key generation and its nonces. format.py
# defines them (TrafficKeys); every record is sealed or opened through records.py.
_RECORD_CRYPTO = {"aead", "decrypt_into", "encrypt_into", "nonce_into", "nonce_parts"}


def test_only_the_record_layer_seals_or_opens_records() -> None:
    """One copy of each record path (CONTRIBUTING.md's layer map): no module but
    ``records.py`` reaches a key generation's AEAD, its ``encrypt_into``/``decrypt_into`` or
    its nonces (``format.py`` defines them)."""
    src = Path(gcmstream.__file__).parent
    found = []
    for path in sorted(src.glob("*.py")):
        if path.name in ("records.py", "format.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in _RECORD_CRYPTO:
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert not found, found
    layer = (src / "records.py").read_text(encoding="utf-8")
    assert "decrypt_into" in layer and "encrypt_into" in layer  # (the check looks where they are)


# The one underscore name still borrowed across modules: the conformance suite (testing.py)
# refuses self-connections for its run with the channel's own guard.
_BORROWED = {"testing.py: channel._self_connections_refused"}


def test_no_module_imports_another_modules_underscore_name() -> None:
    """CONTRIBUTING.md: what one module lends another has a plain name (in an underscore module
    when it is no API); ``cli.py`` imported ``files._Stopped`` (a hostile review)."""
    src = Path(gcmstream.__file__).parent
    found = set()
    for path in sorted(src.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                names = [alias.name for alias in node.names if alias.name.startswith("_")]
                found |= {f"{path.name}: {node.module}.{name}" for name in names}
    assert found == _BORROWED


def _is_submodule(value: object) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__.startswith("gcmstream.")


def test_the_namespace_holds_only_the_api_and_submodules() -> None:
    """Issue 25: ``gcmstream.annotations`` (the __future__ import) and ``PackageNotFoundError``
    (the version's lookup) were public-looking names; every name is the API, a dunder or a
    submodule now, and every name of __all__ resolves (the lazy __getattr__)."""
    for name in gcmstream.__all__:
        getattr(gcmstream, name)
    stray = {
        name
        for name in vars(gcmstream)
        if not name.startswith("_")
        and name not in gcmstream.__all__
        and not _is_submodule(getattr(gcmstream, name))
    }
    assert stray == set(), stray  # (``importlib``, which __init__ used, was one)
    assert "annotations" not in dir(gcmstream) and "PackageNotFoundError" not in dir(gcmstream)


def _public_signatures() -> dict[str, inspect.Signature]:
    """Every signature an application sees: each name of ``gcmstream.__all__`` and of the public
    submodules' ``__all__``, and for a class its constructor and each public method (own or
    inherited; classmethods and staticmethods too). Builtins without a signature are left out."""
    found: dict[str, inspect.Signature] = {}

    def add(name: str, obj: object) -> None:
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        if not callable(obj):
            return
        with contextlib.suppress(TypeError, ValueError):  # a builtin that declares none
            found[name] = inspect.signature(obj)

    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            add(f"{module_name}.{name}", obj)
            if inspect.isclass(obj):
                for member in dir(obj):
                    if not member.startswith("_"):
                        add(f"{module_name}.{name}.{member}", inspect.getattr_static(obj, member))
    return found


def test_no_public_signature_has_a_private_parameter() -> None:
    """Issue 23: test-vector and channel seams are public, documented parameters (the Opener's
    ``header_reader``, the Sealer's ``header_spec``, ``Sealer.unkeyed``), never an ``_x=``
    keyword that a caller could pass by accident (SECURITY.md, "What the caller must do")."""
    signatures = _public_signatures()
    assert len(signatures) > 400, len(signatures)  # the walk still finds the API (481 now)
    assert "gcmstream.Sealer.install_secret" in signatures and "gcmstream.opener.Opener.read" in signatures
    private = {
        name: [parameter for parameter in signature.parameters if parameter.startswith("_")]
        for name, signature in signatures.items()
    }
    assert {name: found for name, found in private.items() if found} == {}
