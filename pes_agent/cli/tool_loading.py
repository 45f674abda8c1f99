"""`--tools module:attr`: import the tools a user names on the command line."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any

from pes_agent.cli.errors import CLIError

__all__ = ["load_tools"]


def load_tools(specs: Iterable[str]) -> list[Any]:
    """The tools named by `specs` (`"module:attr"`; `attr` may be dotted, and may hold one tool
    or a list/tuple of tools), in order.

    Raises `CLIError` naming the spec and what failed: the module's import (with the error it
    raised) or the attribute lookup. The current directory is importable, as with `python -m`,
    so `--tools mytools:search` finds `./mytools.py`.
    """
    specs = list(specs)
    if not specs:
        return []
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    tools: list[Any] = []
    for spec in specs:
        value = _resolve(spec)
        if isinstance(value, list | tuple):
            tools.extend(value)
        else:
            tools.append(value)
    return tools


def _resolve(spec: str) -> Any:
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise CLIError(
            f"--tools {spec!r}: write MODULE:ATTRIBUTE, e.g. --tools mytools:search "
            "or --tools mytools:TOOLS (a list)"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (
            module_name == error.name or module_name.startswith(error.name + ".")
        ):
            raise CLIError(
                f"--tools {spec!r}: cannot import module {module_name!r}: no module named "
                f"{error.name!r} (is it on PYTHONPATH or in the current directory?)"
            ) from None
        raise CLIError(
            f"--tools {spec!r}: importing module {module_name!r} failed: {error}"
        ) from None
    except Exception as error:
        raise CLIError(
            f"--tools {spec!r}: importing module {module_name!r} failed: "
            f"{type(error).__name__}: {error}"
        ) from None
    value: Any = module
    walked = module_name
    for part in attr_path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CLIError(f"--tools {spec!r}: {walked!r} has no attribute {part!r}") from None
        walked = f"{walked}:{part}" if walked == module_name else f"{walked}.{part}"
    return value
