"""Record/replay for the durable engines' activities: on DBOS (a SQLite file), a worker
process whose agent holds a `RecordingProvider` around the real OpenAI SDK records the model
calls its activities make; a fresh DBOS database and a worker holding a `ReplayProvider` on
that cassette, the server stopped, run the same run to the same end.

The worker processes are `tests/pes_agent/durable/dbos_worker.py`'s, so the cassette is also
written by one process and read back by another."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from pes_agent import AgentFinalResponse, AgentProps, create_agent
from pes_agent.core import AgentCore
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.observing.types import Observation
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from tests.pes_agent.durable.conftest import Workers
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .runs import comparable

pytestmark = pytest.mark.slow

# Three notes, each needing the one before (a chain: independent calls would run at once and
# finish in either order, on the recording as on the replay).
PLAN = plan_lines(
    plan_call(1, "note", text="a"),
    plan_call(2, "note", text="{step_1_result}-b"),
    plan_call(3, "note", text="{step_2_result}-c"),
    intent="three notes, each after the one before",
)
ANSWER = "Noted A, B and A+B."


@asynccontextmanager
async def dbos_on(folder: Path, env: dict[str, str]) -> AsyncIterator[tuple[AgentCore, Workers]]:
    """A worker process on a fresh DBOS SQLite database and agent store in `folder` (its
    environment extended by `env`), and a submitting agent with no model of its own."""
    await asyncio.to_thread(folder.mkdir)
    workers = Workers(
        f"sqlite:///{folder / 'runs.sqlite'}",
        f"sqlite:///{folder / 'agent.db'}",
        folder / "effects.log",
    )
    engine = DBOSEngine(workers.engine_db, poll_interval_s=0.05)
    try:
        await workers.start("w1", env=env)
        client = create_agent(provider=ScriptedProvider([]), storage=workers.storage, engine=engine)
        async with client:
            yield client, workers
    finally:
        await workers.stop_all()
        await engine.aclose()
        gc.collect()


async def _run(client: AgentCore, trace_id: str) -> tuple[AgentFinalResponse, list[Observation]]:
    result = await asyncio.wait_for(
        client.process(AgentProps("Take three notes", "t1", trace_id=trace_id)), 60
    )
    return result, await client.observations.get_observations("t1")


async def test_a_dbos_run_recorded_by_its_worker_replays_on_a_fresh_database_offline(
    tmp_path: Path,
) -> None:
    """The worker's model activities (planning, synthesis) are recorded through the real SDK;
    replayed from a fresh DBOS database with the server stopped, the run gives the same
    answer, usage, tool effects and observations."""
    cassette = tmp_path / "durable.jsonl"
    async with ModelServer() as server:
        server.script(
            Reply(PLAN, input_tokens=80, output_tokens=30),
            Reply(ANSWER, input_tokens=150, output_tokens=10),
        )
        env = {"PES_TEST_MODEL_URL": server.openai_base_url, "PES_TEST_CASSETTE": str(cassette)}
        async with dbos_on(tmp_path / "recording", env) as (client, workers):
            recorded, recorded_seen = await _run(client, "tr-record")
            recorded_effects = workers.effects_lines()
        assert len(server.requests) == 2
    assert recorded.metadata.status == "success", recorded.metadata.error
    assert recorded.response.content == ANSWER
    assert recorded_effects == ["note a", "note A-b", "note A-B-c"]
    usage = recorded.metadata.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, 230, 40)
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [(line["request"]["phase"], line["outcome"]) for line in lines] == [
        ("planning", "complete"),
        ("synthesis", "complete"),
    ]

    env = {"PES_TEST_CASSETTE": str(cassette), "PES_TEST_CASSETTE_MODE": "replay"}
    async with dbos_on(tmp_path / "replaying", env) as (client, workers):
        replayed, replayed_seen = await _run(client, "tr-replay")
        replayed_effects = workers.effects_lines()

    assert replayed.metadata.status == "success", replayed.metadata.error
    assert replayed.response.content == ANSWER
    assert replayed.metadata.usage == recorded.metadata.usage
    assert replayed.metadata.tool_calls == recorded.metadata.tool_calls == 3
    assert replayed_effects == recorded_effects
    assert [o.type for o in replayed_seen] == [o.type for o in recorded_seen]
    assert comparable(replayed_seen) == comparable(recorded_seen)
