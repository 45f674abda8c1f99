"""Exceptions raised by ecs_core, all below one root so callers can catch the whole family.

```
ECSError
├── EntityNotFoundError      (also LookupError)  an id that is not alive in this world
├── ComponentNotFoundError   (also LookupError)  the entity lacks the component asked for
├── InvalidComponentError    (also TypeError)    a class, None or a repeated type as a component
├── InvalidSystemError       (also TypeError)    not a System, or a priority that is not an int
├── DuplicateSystemError     (also ValueError)   the same system instance registered twice
├── SystemNotFoundError      (also LookupError)  removing a system that is not registered
└── InvalidQueryError        (also ValueError)   an empty, malformed or contradictory query
```

Each message says what was wrong and how to fix it. Lookups that are expected to miss have
non-raising variants on `World` (`get_component`, `try_remove_component`).
"""

from __future__ import annotations

__all__ = [
    "ComponentNotFoundError",
    "DuplicateSystemError",
    "ECSError",
    "EntityNotFoundError",
    "InvalidComponentError",
    "InvalidQueryError",
    "InvalidSystemError",
    "SystemNotFoundError",
]


class ECSError(Exception):
    """Root of every exception ecs_core raises on purpose."""


class EntityNotFoundError(ECSError, LookupError):
    """The entity id is not alive in this world: it was deleted or never created here."""

    def __str__(self) -> str:
        # LookupError's str() is fine, but KeyError-style quoting must never creep in.
        return str(self.args[0]) if self.args else ""


class ComponentNotFoundError(ECSError, LookupError):
    """The entity is alive but does not carry the component type that was asked for."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidComponentError(ECSError, TypeError):
    """Something that cannot be a component was passed where a component instance belongs."""


class InvalidSystemError(ECSError, TypeError):
    """The object is not a System (no `async def process(self, world)`) or its priority is bad."""


class DuplicateSystemError(ECSError, ValueError):
    """The same system instance was registered twice."""


class SystemNotFoundError(ECSError, LookupError):
    """The system to remove is not registered with this world."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidQueryError(ECSError, ValueError):
    """The query has no component types, a non-type, a repeat, or requires what it excludes."""
