"""Checkpoints of ECS agents: `CheckpointSystem` [15] snapshots entities, `restore`/`undo` go back.

```python
from pes_agent.ecs import checkpoints

world.register_system(CheckpointSystem(), priority=15)
agent = world.create_entity(LLMComponent(model), ConversationComponent(), CheckpointComponent())
...
await checkpoints.undo(world, agent)            # back to the state one checkpoint earlier
await checkpoints.restore(world, agent, 3)      # or to the checkpoint announced with index 3
checkpoints.indices(world, agent)               # the indices that can be restored
```

A checkpoint holds copies of every component of the entity except its `CheckpointComponent`
(so snapshots never contain earlier snapshots, and restoring never rewinds the checkpoint
settings), its `ErrorComponent` (a failure report of one tick, not state) and its
`UsageSpentComponent` (a restore brings back the entity's `UsageLimitsComponent` but never
what it spent: the entity goes on counting from what it really used). Plain data —
scalars, lists, dicts, sets, dataclasses such as `ChatMessage`, pydantic models — is
deep-copied. Live objects are not: provider objects, tools and tool
registries, futures, embedding providers, vector stores, and any other object that is not plain
data. The checkpoint records each one by its place and name (a `LiveRef`) and restoring
re-attaches the entity's *current* object in that place — tools by tool name, so a restored
tool list keeps the tools it had, as they are now. A provider given as ``"openai:MODEL"`` or a
`ProviderConfig` is plain data, resolved by name through the world's provider pool as always.

A component class can name more fields that hold live objects in `__live_fields__`
(`LLMComponent.provider`, `ToolRegistryComponent.tools`, `EmbeddingComponent.provider` and
`VectorStoreComponent.store` are known): their objects are re-attached even when they are
dataclasses.

Indices: a checkpoint's index is the entity's checkpoint tick count when it was taken (1, 2, 3…
with `every_n_ticks=1`), announced by `CheckpointCreatedEvent`; an index never names two
checkpoints. Restoring checkpoint k forgets the checkpoints taken after k — the entity's
history goes on from k — so `undo` twice steps back two checkpoints.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs.components import (
    CheckpointComponent,
    EmbeddingComponent,
    LLMComponent,
    ToolRegistryComponent,
    UsageSpentComponent,
    VectorStoreComponent,
)
from pes_agent.ecs.events import CheckpointCreatedEvent, CheckpointRestoredEvent
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMProvider
from pes_agent.tools.base import Tool
from pes_agent.tools.registry import ToolRegistry

__all__ = [
    "Checkpoint",
    "CheckpointSystem",
    "LiveRef",
    "indices",
    "restore",
    "undo",
]

StepKind = Literal["attr", "key", "item", "named"]
Step = tuple[StepKind, Any]
"""One step from a component to a value: an attribute, a dict key, a list position, or the
element of a list whose live name is given."""


@dataclass(frozen=True, slots=True)
class LiveRef:
    """Stands in a checkpoint for a live object: where it was, and its name.

    `optional` objects (futures) may be gone when restoring: the place then becomes None, or
    the entry is left out of its list or dict. Any other missing object makes `restore` fail
    before it changes anything.
    """

    component: str
    path: tuple[Step, ...]
    name: str
    optional: bool = False

    def where(self) -> str:
        """The object's place, e.g. ``ToolRegistryComponent.tools['search']``."""
        text = self.component
        for kind, step in self.path:
            text += f".{step}" if kind == "attr" else f"[{step!r}]"
        return text


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One snapshot of an entity: copies of its components, live objects as `LiveRef`s."""

    index: int
    components: tuple[object, ...]
    live: tuple[LiveRef, ...] = ()

    @property
    def terminal(self) -> bool:
        """Whether the entity had finished (carried a `TerminalComponent`) when it was taken."""
        return any(isinstance(component, TerminalComponent) for component in self.components)


class CheckpointSystem:
    """Snapshots each entity with a `CheckpointComponent` every `every_n_ticks` ticks.

    Keeps the newest `keep` checkpoints in the component and publishes
    `CheckpointCreatedEvent(entity_id, index)`. A finished entity is snapshotted once more
    when it finishes, then left alone until it runs again, so its checkpoints are not all
    copies of the end state. Wrong settings (`every_n_ticks` or `keep` below 1) put an
    `ErrorComponent` on the entity.
    """

    async def process(self, world: World) -> None:
        """Take the checkpoints due this tick."""
        for entity, (checkpoints,) in world.query(CheckpointComponent):
            if checkpoints.every_n_ticks < 1 or checkpoints.keep < 1:
                error = UsageError(
                    "CheckpointComponent needs every_n_ticks >= 1 and keep >= 1, got "
                    f"every_n_ticks={checkpoints.every_n_ticks}, keep={checkpoints.keep}"
                )
                world.add_component(entity, ErrorComponent(error, type(self).__name__))
                continue
            newest = checkpoints.snapshots[-1] if checkpoints.snapshots else None
            if (
                isinstance(newest, Checkpoint)
                and newest.terminal
                and world.has_component(entity, TerminalComponent)
            ):
                continue
            checkpoints.ticks += 1
            if checkpoints.ticks % checkpoints.every_n_ticks:
                continue
            checkpoint = _snapshot(world, entity, checkpoints.ticks)
            checkpoints.snapshots.append(checkpoint)
            del checkpoints.snapshots[: -checkpoints.keep]
            await world.events.publish(CheckpointCreatedEvent(entity, checkpoint.index))


def indices(world: World, entity: EntityId) -> tuple[int, ...]:
    """The indices of the entity's checkpoints, oldest first (empty without any)."""
    component = world.get_component(entity, CheckpointComponent)
    if component is None:
        return ()
    return tuple(c.index for c in component.snapshots if isinstance(c, Checkpoint))


async def restore(world: World, entity: EntityId, index: int) -> int:
    """Bring the entity back to checkpoint `index` and forget the checkpoints after it.

    Components are replaced by copies of the checkpoint's (the checkpoint itself stays
    reusable), components added since are removed, live objects re-attached (module
    docstring). Publishes `CheckpointRestoredEvent`. Raises `UsageError` — changing nothing —
    when there is no such checkpoint or a live object it needs is gone. Returns `index`.
    """
    component = _checkpoints_of(world, entity)
    available = indices(world, entity)
    if index not in available:
        raise UsageError(
            f"entity {entity} has no checkpoint {index}; it can restore "
            f"{list(available) or 'none yet'} (CheckpointComponent keeps the newest "
            f"{component.keep}; use checkpoints.indices(world, entity) to list them)"
        )
    position, checkpoint = next(
        (position, c)
        for position, c in enumerate(component.snapshots)
        if isinstance(c, Checkpoint) and c.index == index
    )
    _apply(world, entity, checkpoint)
    del component.snapshots[position + 1 :]
    await world.events.publish(CheckpointRestoredEvent(entity, index))
    return index


async def undo(world: World, entity: EntityId) -> int:
    """Go back one checkpoint: restore the one before the newest and forget the newest.

    Calling it again steps back further. Raises `UsageError` when fewer than two checkpoints
    exist (there is no earlier state to go back to). Returns the restored index.
    """
    _checkpoints_of(world, entity)
    available = indices(world, entity)
    if len(available) < 2:
        raise UsageError(
            f"entity {entity} has nothing to undo: it has {len(available)} checkpoint(s) and "
            "undo restores the one before the newest; tick the world first, or call "
            "checkpoints.restore(world, entity, index)"
        )
    return await restore(world, entity, available[-2])


def _checkpoints_of(world: World, entity: EntityId) -> CheckpointComponent:
    component = world.get_component(entity, CheckpointComponent)
    if component is None:
        raise UsageError(
            f"entity {entity} has no CheckpointComponent, so it has no checkpoints; add "
            "CheckpointComponent() and register CheckpointSystem() at priority 15"
        )
    return component


# Taking a snapshot ----------------------------------------------------------------------------

_SCALARS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    Enum,
    datetime,
    date,
    time,
    timedelta,
    Decimal,
    UUID,
    PurePath,
    # Exceptions (in a user's component, say) are values: kept as they are, not copied.
    BaseException,
)

#: Fields of known components that hold live objects, even when those are dataclasses.
_LIVE_FIELDS: dict[type[Any], frozenset[str]] = {
    LLMComponent: frozenset({"provider"}),
    ToolRegistryComponent: frozenset({"tools"}),
    EmbeddingComponent: frozenset({"provider"}),
    VectorStoreComponent: frozenset({"store"}),
}


def _live_fields(cls: type[Any]) -> frozenset[str]:
    declared = getattr(cls, "__live_fields__", ())
    return _LIVE_FIELDS.get(cls, frozenset()) | frozenset(declared)


_live_types: dict[type[Any], bool] = {}


def _is_live_object(value: object) -> bool:
    """Objects that are live whatever their shape (futures, tools, registries, providers):
    they are never copied."""
    cls = type(value)
    live = _live_types.get(cls)
    if live is None:
        # Tool and LLMProvider are protocols checked member by member: once per class.
        live = isinstance(value, asyncio.Future | ToolRegistry | Tool | LLMProvider)
        _live_types[cls] = live
    return live


def _live_name(value: object) -> str:
    if isinstance(value, Tool):
        return value.schema.name
    if isinstance(value, ToolRegistry):
        return f"ToolRegistry{list(value.names)}"
    if isinstance(value, LLMProvider):
        return f"{value.name}:{value.model}"
    return type(value).__qualname__


class _Freezer:
    """Copies components into a checkpoint, recording live objects as `LiveRef`s."""

    def __init__(self) -> None:
        self.refs: list[LiveRef] = []
        self._memo: dict[int, Any] = {}
        self._component = ""

    def component(self, component: object) -> object:
        self._component = type(component).__name__
        return self.value(component, (), live=False)

    def value(self, value: Any, path: tuple[Step, ...], *, live: bool) -> Any:
        if isinstance(value, _SCALARS):
            return value
        key = id(value)
        if key in self._memo:  # shared within the entity: stays shared once restored
            return self._memo[key]
        if isinstance(value, list | deque):
            items = _empty_like(value, self._memo)
            items.extend(
                self.value(v, (*path, _item_step(i, v)), live=live) for i, v in enumerate(value)
            )
            return items
        if isinstance(value, tuple):
            frozen = [
                self.value(v, (*path, _item_step(i, v)), live=live) for i, v in enumerate(value)
            ]
            result: Any = _tuple_like(value, frozen)
            self._memo[key] = result
            return result
        if isinstance(value, dict):
            mapping = _empty_like(value, self._memo)
            for k, v in value.items():
                mapping[k] = self.value(v, (*path, ("key", k)), live=live)
            return mapping
        if isinstance(value, set | frozenset):
            result = copy.deepcopy(value)
            self._memo[key] = result
            return result
        if _is_live_object(value):
            return self._ref(value, path)
        if isinstance(value, BaseModel):
            result = value.model_copy(deep=True)
            self._memo[key] = result
            return result
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and not live:
            clone = copy.copy(value)
            self._memo[key] = clone
            live_fields = _live_fields(type(value))
            for f in dataclasses.fields(value):
                frozen_field = self.value(
                    getattr(value, f.name), (*path, ("attr", f.name)), live=f.name in live_fields
                )
                object.__setattr__(clone, f.name, frozen_field)
            return clone
        return self._ref(value, path)

    def _ref(self, value: object, path: tuple[Step, ...]) -> LiveRef:
        ref = LiveRef(
            self._component, path, _live_name(value), optional=isinstance(value, asyncio.Future)
        )
        self.refs.append(ref)
        return ref


def _empty_like(value: Any, memo: dict[int, Any]) -> Any:
    """An empty container of `value`'s type (a deque keeps its maxlen), memoised before it is
    filled, so a cycle back to `value` finds the copy."""
    empty = copy.copy(value)
    empty.clear()
    memo[id(value)] = empty
    return empty


def _tuple_like(value: tuple[Any, ...], items: list[Any]) -> tuple[Any, ...]:
    """A tuple of `value`'s type, a named tuple included, holding `items`."""
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


def _item_step(index: int, value: object) -> Step:
    # Live list elements (tools) are found again by name: the list may have been reordered.
    if not isinstance(value, _SCALARS) and _is_live_object(value):
        return ("named", _live_name(value))
    return ("item", index)


#: Never in a checkpoint, never removed by a restore: the checkpoints themselves (so snapshots
#: never nest), error reports, which `ErrorHandlingSystem` consumes in the tick they happen
#: (restoring one would report an old failure again), and what the entity spent against its
#: usage limits (tokens and calls spent after a checkpoint were spent all the same).
_NOT_SNAPSHOTTED: frozenset[type[Any]] = frozenset(
    {CheckpointComponent, ErrorComponent, UsageSpentComponent}
)


def _snapshot(world: World, entity: EntityId, index: int) -> Checkpoint:
    freezer = _Freezer()
    components = tuple(
        freezer.component(component)
        for ctype, component in world.components_of(entity).items()
        if ctype not in _NOT_SNAPSHOTTED
    )
    return Checkpoint(index, components, tuple(freezer.refs))


# Restoring ------------------------------------------------------------------------------------

_GONE = object()
"""An optional live object that no longer exists: left out of its container, None in a field."""


class _Thawer:
    """Copies a checkpoint's components back, re-attaching the entity's current live objects."""

    def __init__(self, checkpoint: Checkpoint, current: Mapping[type[Any], Any]) -> None:
        self._checkpoint = checkpoint
        self._current = current
        self._memo: dict[int, Any] = {}
        self._now: object = None

    def component(self, component: object) -> object:
        self._now = self._current.get(type(component))
        return self.value(component)

    def value(self, value: Any) -> Any:
        if isinstance(value, LiveRef):
            return self._resolve(value)
        if isinstance(value, _SCALARS):
            return value
        key = id(value)
        if key in self._memo:
            return self._memo[key]
        if isinstance(value, list | deque):
            items = _empty_like(value, self._memo)
            items.extend(v for v in map(self.value, value) if v is not _GONE)
            return items
        if isinstance(value, tuple):
            thawed = [v for v in map(self.value, value) if v is not _GONE]
            result: Any = _tuple_like(value, thawed)
            self._memo[key] = result
            return result
        if isinstance(value, dict):
            mapping = _empty_like(value, self._memo)
            for k, v in value.items():
                thawed_value = self.value(v)
                if thawed_value is not _GONE:
                    mapping[k] = thawed_value
            return mapping
        if isinstance(value, set | frozenset):
            result = copy.deepcopy(value)
        elif isinstance(value, BaseModel):
            result = value.model_copy(deep=True)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            result = copy.copy(value)
            self._memo[key] = result
            for f in dataclasses.fields(value):
                thawed_field = self.value(getattr(value, f.name))
                object.__setattr__(result, f.name, None if thawed_field is _GONE else thawed_field)
            return result
        else:  # pragma: no cover - a checkpoint holds nothing else
            raise TypeError(f"unexpected {type(value).__name__} in a checkpoint")
        self._memo[key] = result
        return result

    def _resolve(self, ref: LiveRef) -> Any:
        found = _follow(self._now, ref.path)
        if found is not _GONE and found is not None:
            return found
        if ref.optional:
            return _GONE
        raise UsageError(
            f"checkpoint {self._checkpoint.index} needs the live object {ref.name!r} at "
            f"{ref.where()}, which the entity no longer has; restoring re-attaches the current "
            "provider, tools and stores by name, so put it back on the entity first"
        )


def _follow(start: object, path: Iterable[Step]) -> object:
    """The object at `path` from `start`, or `_GONE`."""
    node = start
    for kind, step in path:
        if node is None or node is _GONE:
            return _GONE
        if kind == "attr":
            node = getattr(node, step, _GONE)
        elif kind == "key":
            node = node.get(step, _GONE) if isinstance(node, Mapping) else _GONE
        elif kind == "item":
            try:
                node = node[step]  # type: ignore[index]
            except (IndexError, KeyError, TypeError):
                return _GONE
        else:  # named: the element of a collection whose live name is `step`
            items = node if isinstance(node, list | tuple | deque | ToolRegistry) else ()
            node = next((item for item in items if _live_name(item) == step), _GONE)
    return node


def _apply(world: World, entity: EntityId, checkpoint: Checkpoint) -> None:
    current = dict(world.components_of(entity))
    thawer = _Thawer(checkpoint, current)
    # Everything is resolved before anything changes: a missing live object changes nothing.
    restored = [thawer.component(component) for component in checkpoint.components]
    restored_types = {type(component) for component in restored}
    for ctype in current:
        if ctype not in _NOT_SNAPSHOTTED and ctype not in restored_types:
            world.remove_component(entity, ctype)
    for component in restored:
        world.add_component(entity, component)
