"""ecs_core: a small, fast, async Entity Component System (standard library only).

Entities are ids, components are plain data (idiomatically `@dataclass(slots=True)`), systems
are objects with `async def process(self, world)`. `World` is the façade: create entities,
attach components, run cached queries, register systems and tick them; `Runner` ticks a world
until the entities it watches carry a `TerminalComponent`.
"""

import logging

from ecs_core.components import ErrorComponent, TerminalComponent
from ecs_core.entity import EntityId, EntityIdGenerator
from ecs_core.events import ErrorOccurredEvent, EventBus, HandlerErrorEvent, Unsubscribe
from ecs_core.exceptions import (
    ComponentNotFoundError,
    DuplicateSystemError,
    ECSError,
    EntityNotFoundError,
    InvalidComponentError,
    InvalidQueryError,
    InvalidSystemError,
    SystemNotFoundError,
)
from ecs_core.query import Query, QueryCache, Row
from ecs_core.runner import Runner, RunResult, StopReason, Until
from ecs_core.store import ComponentStore
from ecs_core.system import System, SystemExecutor, system_name
from ecs_core.world import World

__all__ = [
    "ComponentNotFoundError",
    "ComponentStore",
    "DuplicateSystemError",
    "ECSError",
    "EntityId",
    "EntityIdGenerator",
    "EntityNotFoundError",
    "ErrorComponent",
    "ErrorOccurredEvent",
    "EventBus",
    "HandlerErrorEvent",
    "InvalidComponentError",
    "InvalidQueryError",
    "InvalidSystemError",
    "Query",
    "QueryCache",
    "Row",
    "RunResult",
    "Runner",
    "StopReason",
    "System",
    "SystemExecutor",
    "SystemNotFoundError",
    "TerminalComponent",
    "Unsubscribe",
    "Until",
    "World",
    "system_name",
]

# A library logs but never configures logging; the application decides where records go.
logging.getLogger(__name__).addHandler(logging.NullHandler())
