"""The services a world's ECS agent systems share: one provider pool and where observations go.

```python
world = World()
services = attach_services(world, observations=ObservationManager(InMemoryStorage()))
world.register_system(ReasoningSystem(), priority=0)
...
await close_services(world)   # closes the SDK clients the pool created
```

They live in an `AgentServicesComponent` on one dedicated entity of the world, not on the
system objects: every system of the world (reasoning, tool execution, compaction, checkpoints
restoring providers by name) finds the same pool, so `"openai:gpt-4o-mini"` on a hundred
entities is one SDK client. A world never given services gets a default (a fresh pool, no
observations) the first time a system needs it; `close_services(world)` closes that pool too.

Observations are recorded only when `observations` is set. Each entity's thread and trace come
from its `AgentIdentityComponent`, or default to ``"entity-<id>"`` for both, so the CLI trace
and `ObservationManager.subscribe(thread_id=...)` work per entity.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecs_core import EntityId, World
from pes_agent.ecs.components import AgentIdentityComponent
from pes_agent.errors import UsageError
from pes_agent.protocols import ObservationRecorder
from pes_agent.providers.registry import ProviderPool

__all__ = [
    "AgentServicesComponent",
    "attach_services",
    "close_services",
    "identity_of",
    "services_of",
]


@dataclass(slots=True)
class AgentServicesComponent:
    """World-level (on one dedicated entity): the provider pool and the observation recorder.

    `owns_providers` says whether `close_services` closes the pool: True for a pool the
    services created, False for one passed in (its owner closes it).
    """

    providers: ProviderPool
    observations: ObservationRecorder | None = None
    owns_providers: bool = True


def attach_services(
    world: World,
    *,
    providers: ProviderPool | None = None,
    observations: ObservationRecorder | None = None,
) -> AgentServicesComponent:
    """Give `world`'s agent systems their provider pool and observation recorder.

    Call it once, before the first tick. Without `providers` a new pool is created and
    `close_services(world)` closes it; a pool passed in stays open for its owner.
    """
    if _find(world) is not None:
        raise UsageError(
            "this world already has agent services; attach_services(world, ...) once, before "
            "the first tick (a system that needed them first attached the defaults)"
        )
    services = AgentServicesComponent(
        providers=providers if providers is not None else ProviderPool(),
        observations=observations,
        owns_providers=providers is None,
    )
    world.create_entity(services)
    return services


def services_of(world: World) -> AgentServicesComponent:
    """The world's agent services, attaching the defaults (a new pool, no observations) if none."""
    services = _find(world)
    if services is None:
        services = AgentServicesComponent(providers=ProviderPool())
        world.create_entity(services)
    return services


async def close_services(world: World) -> None:
    """Close the provider pool the world's services created, and remove the services.

    Safe to call when the world has none. A pool passed to `attach_services` is left open.
    """
    for entity, (services,) in world.query(AgentServicesComponent):
        world.delete_entity(entity)
        if services.owns_providers:
            await services.providers.aclose()


def identity_of(world: World, entity: EntityId) -> tuple[str, str]:
    """`(thread_id, trace_id)` the entity's observations and model calls are filed under.

    From its `AgentIdentityComponent` (a missing trace id is the thread id), else
    ``"entity-<id>"`` for both.
    """
    identity = world.get_component(entity, AgentIdentityComponent)
    if identity is None:
        name = f"entity-{entity}"
        return name, name
    return identity.thread_id, identity.trace_id or identity.thread_id


def _find(world: World) -> AgentServicesComponent | None:
    for _, (services,) in world.query(AgentServicesComponent):
        return services
    return None
