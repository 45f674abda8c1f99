"""Entity ids: an entity is nothing but an integer that components are attached to."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NewType, cast

__all__ = ["EntityId", "EntityIdGenerator"]

EntityId = NewType("EntityId", int)
"""The id of an entity. Ids are issued by a world and never reused by it."""


class EntityIdGenerator:
    """Issue increasing entity ids that are never reused, so a stale id can't alias a new entity.

    `next_id()` returns the next id. Iterating the generator yields from the same counter —
    `World` holds that iterator and calls `next()` on it, which is cheaper than a method call
    on the hot entity-creation path. A generator may be shared by several worlds; each id is
    then issued once across all of them.
    """

    __slots__ = ("_counter",)

    def __init__(self, start: int = 1) -> None:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(
                f"EntityIdGenerator(start={start!r}): start must be a non-negative int, "
                "e.g. EntityIdGenerator(1)."
            )
        self._counter = cast("Iterator[EntityId]", itertools.count(start))

    def __iter__(self) -> Iterator[EntityId]:
        return self._counter

    def next_id(self) -> EntityId:
        """The next unused id."""
        return next(self._counter)
