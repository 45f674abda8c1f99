"""The shared test helpers do what the tests using them rely on."""

from __future__ import annotations

import socket

import pytest

from pes_agent import AgentProps, UsageError
from pes_agent.testing import ScriptedProvider

from .helpers import AgentBuilder, free_port
from .pes_agent.server.sse import SSEEvent, numbered, parse_sse


async def test_the_agent_builder_closes_every_agent_it_built() -> None:
    """After `aclose()` each agent the builder made refuses new runs, as a closed agent does."""
    builder = AgentBuilder()
    agents = [builder(provider=ScriptedProvider(["x"])) for _ in range(2)]
    await builder.aclose()
    for agent in agents:
        with pytest.raises(UsageError, match="closed"):
            await agent.process(AgentProps("q", "t"))


def test_free_port_can_be_listened_on() -> None:
    """The port free_port names can be bound on 127.0.0.1 at once."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))


def test_parse_sse_reads_a_whole_body_as_the_stream_reader_does() -> None:
    """Comments are skipped, an event without an id keeps None, the last needs no blank line;
    numbered() gives ids as numbers, 0 for none."""
    body = ': ping\n\nid: 7\nevent: run\ndata: {"a": 1}\n\n: ping\nevent: token\ndata: {"t": "x"}'
    events = parse_sse(body)
    assert events == [SSEEvent("7", "run", {"a": 1}), SSEEvent(None, "token", {"t": "x"})]
    assert numbered(events) == [(7, "run", {"a": 1}), (0, "token", {"t": "x"})]
