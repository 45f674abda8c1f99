"""ecs_core in one screen: two systems move projectiles and expire them; a Runner waits.

Run:  .venv/bin/python examples/ecs_quickstart.py
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ecs_core import ErrorOccurredEvent, Runner, TerminalComponent, World


@dataclass(slots=True)
class Position:
    x: float
    y: float


@dataclass(slots=True)
class Velocity:
    dx: float
    dy: float


@dataclass(slots=True)
class Lifetime:
    ticks_left: int


class MovementSystem:
    """Moves everything that has a position and a velocity and has not finished."""

    name = "movement"

    async def process(self, world: World) -> None:
        for _, (pos, vel) in world.query(Position, Velocity, exclude=(TerminalComponent,)):
            pos.x += vel.dx
            pos.y += vel.dy


class LifetimeSystem:
    """Counts lifetimes down; at zero the entity is marked finished with a reason."""

    name = "lifetime"

    async def process(self, world: World) -> None:
        for entity, (life,) in world.query(Lifetime, exclude=(TerminalComponent,)):
            life.ticks_left -= 1
            if life.ticks_left == 0:
                world.add_component(entity, TerminalComponent(reason="lifetime expired"))
                print(f"  tick {world.ticks + 1}: entity {entity} expired")


async def main() -> None:
    world = World()
    world.register_system(MovementSystem(), priority=0)
    world.register_system(LifetimeSystem(), priority=1)
    world.events.subscribe(ErrorOccurredEvent, lambda e: print(f"system {e.system_name} failed"))

    arrow = world.create_entity(Position(0, 0), Velocity(2, 1), Lifetime(3))
    rock = world.create_entity(Position(10, 0), Velocity(0, -1), Lifetime(5))
    world.create_entity(Position(5, 5))  # scenery: no velocity, no lifetime, never moves

    print("running until the arrow and the rock have expired:")
    result = await Runner().run(world, until=[arrow, rock], max_ticks=100)

    print(f"stopped after {result.ticks} ticks: {result.reason}")
    for entity, terminal in result.terminals.items():
        pos = world.require_component(entity, Position)
        print(f"  entity {entity} at ({pos.x:g}, {pos.y:g}): {terminal.reason}")


if __name__ == "__main__":
    asyncio.run(main())
