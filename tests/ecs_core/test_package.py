"""The ecs_core package: standard library only, explicit public names in every module."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ecs_core

PACKAGE = Path(ecs_core.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_every_module_declares_all(module: str) -> None:
    """Each module lists its public names in __all__, and each listed name exists."""
    mod = importlib.import_module(f"ecs_core.{module}")
    assert isinstance(mod.__all__, list)
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_package_reexports_every_public_name_explicitly() -> None:
    """ecs_core.__all__ is the union of the modules' __all__, and each name resolves."""
    exported: set[str] = set()
    for module in MODULES:
        exported |= set(importlib.import_module(f"ecs_core.{module}").__all__)
    assert set(ecs_core.__all__) == exported
    assert all(hasattr(ecs_core, name) for name in ecs_core.__all__)


def test_only_the_standard_library_is_imported() -> None:
    """ecs_core imports nothing outside the standard library and itself (no structlog)."""
    allowed = set(sys.stdlib_module_names) | {"ecs_core"}
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"


def test_importing_ecs_core_loads_no_third_party_logging() -> None:
    """A fresh interpreter importing ecs_core has not loaded structlog or pes_agent."""
    code = "import sys, ecs_core; print(sorted({'structlog', 'pes_agent'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_package_ships_py_typed() -> None:
    """The py.typed marker is present so type checkers use ecs_core's annotations."""
    assert (PACKAGE / "py.typed").exists()
