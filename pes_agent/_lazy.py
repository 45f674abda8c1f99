"""Lazy re-exports: a package's public names, imported from their home modules on first use.

```python
if TYPE_CHECKING:                          # what type checkers and readers see
    from pes_agent.providers.openai import OpenAIProvider

_HOMES = {"OpenAIProvider": "pes_agent.providers.openai"}
if not TYPE_CHECKING:                      # what runs: the import waits for the first use
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
```

Kept out of type checkers' sight (`if not TYPE_CHECKING`) so that a misspelt name is still an
error there rather than `Any`; `tests/pes_agent/test_lazy_exports.py` checks that each package's
`TYPE_CHECKING` imports and its table name the same things.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, for the names in `homes` (name: module)."""
    home_of = dict(homes)
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups find it without coming here
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(home_of))

    return __getattr__, __dir__
