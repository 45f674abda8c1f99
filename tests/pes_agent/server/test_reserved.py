"""The server's records in the agent's storage (thread owners, worker records) are no threads:
nothing that lists threads to a person shows them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2 as httpx
import pytest
from rich.console import Console

from pes_agent import AgentCore
from pes_agent.cli.errors import CLIError
from pes_agent.cli.paths import resolve_store
from pes_agent.cli.store_commands import history_command, threads_command
from pes_agent.server import create_app
from pes_agent.server.auth import OWNER_PREFIX
from pes_agent.threads.reserved import RESERVED_PREFIX

from .conftest import TOKENS


async def test_reserved_entries_are_listed_nowhere_a_person_lists_threads(
    agent: AgentCore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a scoped user's run the store holds an owner record and worker records; the API,
    `StateManager.list_threads` and `pes-agent threads` list the user's thread only, and the
    owner record was saved without a STATE_UPDATE observation."""
    app = create_app(agent, tokens=TOKENS)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        alice = {"Authorization": "Bearer alice-token"}
        ran = await client.post("/v1/threads/a1/runs", json={"query": "hi"}, headers=alice)
        assert ran.status_code == 200
        for _ in range(500):  # the worker record is written in the background
            if app.state.workers._task is None or app.state.workers._task.done():
                break
            await asyncio.sleep(0.01)
        admin = {"Authorization": "Bearer admin-token"}
        assert (await client.get("/v1/threads", headers=admin)).json() == {"threads": ["a1"]}

    everything = await agent.storage.list_threads()
    reserved = [t for t in everything if t.startswith(RESERVED_PREFIX)]
    assert OWNER_PREFIX + "a1" in reserved
    assert RESERVED_PREFIX + "worker:" + app.state.workers.worker_id in reserved
    assert await agent.state.list_threads() == ["a1"]
    assert await agent.storage.get_observations(OWNER_PREFIX + "a1") == []

    store = resolve_store(str(tmp_path / "api.db"))
    capsys.readouterr()
    await threads_command(store, console=Console(), as_json=True)
    listed = json.loads(capsys.readouterr().out)
    assert [row["thread_id"] for row in listed] == ["a1"]
    with pytest.raises(CLIError, match="no thread"):
        await history_command(
            store, OWNER_PREFIX + "a1", limit=None, console=Console(), as_json=True
        )
