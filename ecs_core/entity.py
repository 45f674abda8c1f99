"""Entity ids: an entity is nothing but an integer that components are attached to."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NewType, cast

__all__ = ["EntityId", "EntityIdGenerator"]

EntityId = NewType("EntityId", int)
"""The id of an entity. Ids are issued by a world and never reused by it."""


class EntityIdGenerator:
    """Issue increasing entity ids that are never reused, so a stale id can't alias a new entity.

    `next_id()` returns the next id. It is the C-level `__next__` of an `itertools.count`
    bound once here, because entity creation is a hot path and a Python-level method would
    add a frame per entity.
    """

    __slots__ = ("next_id",)

    next_id: Callable[[], EntityId]

    def __init__(self, start: int = 1) -> None:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(
                f"EntityIdGenerator(start={start!r}): start must be a non-negative int, "
                "e.g. EntityIdGenerator(1)."
            )
        self.next_id = cast("Callable[[], EntityId]", itertools.count(start).__next__)
