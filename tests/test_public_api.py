"""The public surface: ``__all__`` lists are complete and the error tree is documented."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import gcmstream
import gcmstream.errors


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


def _exception_classes() -> list[type[BaseException]]:
    return [
        obj
        for obj in vars(gcmstream.errors).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "gcmstream.errors"
    ]


def test_errors_module_defines_exceptions() -> None:
    assert len(_exception_classes()) >= 10


@pytest.mark.parametrize("exc_type", _exception_classes(), ids=lambda t: t.__name__)
def test_exception_derives_from_root_and_is_documented(exc_type: type[BaseException]) -> None:
    assert issubclass(exc_type, gcmstream.GcmStreamError)
    doc = gcmstream.errors.__doc__ or ""
    assert re.search(rf"\b{exc_type.__name__}\b", doc), f"{exc_type.__name__} is not in the errors docstring"
    assert exc_type.__name__ in gcmstream.errors.__all__
    assert getattr(gcmstream, exc_type.__name__) is exc_type
