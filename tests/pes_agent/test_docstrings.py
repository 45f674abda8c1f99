"""The public API documents its parameters and results, as `@tool` asks users to."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pes_agent
from pes_agent import evals, testing
from pes_agent.providers import registry
from pes_agent.testing import pytest_plugin


def _public(module: Any) -> Iterator[tuple[str, Any]]:
    for name in module.__all__:
        yield name, getattr(module, name)


def _documented() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public function, and every public method (and hand-written `__init__`) of a
    public class, of `pes_agent`, `pes_agent.testing`, its pytest plugin, `pes_agent.evals` and
    the provider registry."""
    modules = (pes_agent, testing, pytest_plugin, evals, registry)
    for name, obj in [item for module in modules for item in _public(module)]:
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attribute, value in vars(obj).items():
                if attribute.startswith("_") and attribute != "__init__":
                    continue
                func = getattr(value, "__func__", value)
                # Generated methods (dataclass and pydantic __init__) are documented by the class.
                if not inspect.isfunction(func) or func.__code__.co_filename.startswith("<"):
                    continue
                # A Protocol's __init__ is typing's own.
                if attribute == "__init__" and getattr(obj, "_is_protocol", False):
                    continue
                yield f"{name}.{attribute}", func


def _section(doc: str, title: str) -> str | None:
    """The text of a Google-style section (`Args:`), up to the next unindented line."""
    found = re.search(rf"^{title}:\n((?:[ \t]+.*\n?|\n)*)", doc, re.MULTILINE)
    return None if found is None else found.group(1)


def _problems(func: Callable[..., Any]) -> list[str]:
    doc = inspect.getdoc(func) or ""
    problems = [] if doc else ["no docstring"]
    signature = inspect.signature(func)
    parameters = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    args = _section(doc, "Args")
    if parameters and args is None:
        problems.append("no Args: section")
    for parameter in parameters if args is not None else []:
        star = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
        if not re.search(rf"^    {re.escape(star + parameter.name)}:", args or "", re.MULTILINE):
            problems.append(f"{star}{parameter.name} not in Args:")
    returns = signature.return_annotation
    gives = func.__name__ != "__init__" and returns not in ("None", None, inspect.Signature.empty)
    if gives and _section(doc, "Returns") is None and _section(doc, "Yields") is None:
        problems.append("no Returns: section")
    return problems


@pytest.mark.parametrize("func", [pytest.param(func, id=name) for name, func in _documented()])
def test_public_callables_document_their_arguments_and_result(func: Callable[..., Any]) -> None:
    """Each public callable names every parameter under Args: and says what it returns."""
    assert _problems(func) == []
