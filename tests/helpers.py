"""Helpers that tests in several directories share: agents closed after the test, a free port."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when an agent is built: ecs_core's tests need none of it
    from pes_agent import AgentCore

__all__ = ["AgentBuilder", "free_port"]


class AgentBuilder:
    """`create_agent` that keeps every agent it built, so `aclose()` can close them all.

    Tests get one from the `build_agent` fixture (tests/conftest.py), which closes the agents
    when the test ends, whether it passed or not.
    """

    def __init__(self) -> None:
        self._built: list[AgentCore] = []

    def __call__(self, **arguments: Any) -> AgentCore:
        """Build an agent exactly as `create_agent(**arguments)` does, and keep it."""
        from pes_agent import create_agent

        agent = create_agent(**arguments)
        self._built.append(agent)
        return agent

    async def aclose(self) -> None:
        """Close every agent built so far, in the order they were built."""
        built, self._built = self._built, []
        for agent in built:
            await agent.aclose()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
