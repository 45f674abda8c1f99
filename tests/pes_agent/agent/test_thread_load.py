"""A new turn reads its thread (paused runs, config, state, history) in one read of the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pes_agent import AgentProps, ThreadAwaitingApprovalError, create_agent, testing
from pes_agent.config import AgentState, RunOptions, ThreadConfig
from pes_agent.providers.base import LLMRequest
from pes_agent.storage import InMemoryStorage, SQLiteStorage
from pes_agent.storage.sqlite import _DatabaseThread
from pes_agent.testing import ScriptedProvider

from ..storage.test_storage_contract import paused_run, user
from ..storage.test_storage_snapshot import SeparateReadsOnly


def db_thread_calls(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the calls made to every SQLite store's DB thread from now on."""
    calls = 0
    original = _DatabaseThread.call

    async def counting(self: _DatabaseThread, work: Callable[[], Any]) -> Any:
        nonlocal calls
        calls += 1
        return await original(self, work)

    monkeypatch.setattr(_DatabaseThread, "call", counting)
    return lambda: calls


def answering(seen: list[LLMRequest], on_call: Callable[[], None] = lambda: None) -> list[Any]:
    """A script for one run: a plan without calls, which notes the request it answers (and
    calls `on_call`), then the answer."""

    def plan(request: LLMRequest) -> str:
        seen.append(request)
        on_call()
        return testing.plan_json(title="A title")

    return [plan, "done"]


async def test_a_run_loads_its_thread_in_one_db_thread_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From taking the thread's lock to its first model call, a run on SQLite makes one call
    to the DB thread: the paused-run check, config, state and history read together."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.set_thread_config("t", ThreadConfig(history_limit=4))
    await storage.set_agent_state("t", AgentState(data={"step": 1}))
    await storage.add_messages("t", [user("t", "earlier")])
    calls = db_thread_calls(monkeypatch)
    at_model: list[int] = []
    seen: list[LLMRequest] = []
    agent = create_agent(
        provider=ScriptedProvider(answering(seen, lambda: at_model.append(calls()))),
        storage=storage,
    )

    await agent.process(AgentProps("q", "t"))

    assert at_model == [1]
    await agent.aclose()
    await storage.aclose()


async def test_a_run_sees_the_history_its_settings_ask_for(tmp_path: Path) -> None:
    """The history a run is given follows the call's limit, else the thread's, else the
    agent's, as before the reads were combined."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.add_messages("t", [user("t", str(n)) for n in range(6)])
    seen: list[LLMRequest] = []
    agent = create_agent(
        provider=ScriptedProvider(answering(seen), repeat=True),
        storage=storage,
        history_limit=5,
    )

    def history_of(request: LLMRequest) -> list[str]:
        return [m.content for m in request.messages[1:-1]]  # past the system prompt, the ask

    await agent.process(AgentProps("q", "t"))  # the agent's limit: 5
    await storage.set_thread_config("t", ThreadConfig(history_limit=3))
    await agent.process(AgentProps("q2", "t"))  # the thread's: 3
    await agent.process(AgentProps("q3", "t", options=RunOptions(history_limit=1)))  # the call's

    assert history_of(seen[0]) == ["1", "2", "3", "4", "5"]
    assert history_of(seen[1]) == ["5", "q", "done"]
    assert history_of(seen[2]) == ["done"]
    await agent.aclose()
    await storage.aclose()


async def test_a_waiting_run_is_raised_before_anything_else(tmp_path: Path) -> None:
    """A run waiting for approval on the thread makes `process` raise, and no model is called,
    even when the thread's saved config is damaged."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.save_paused_run(paused_run("t", "waiting"))
    await storage.initialize()
    with closing(sqlite3.connect(storage.path, isolation_level=None)) as conn:
        conn.execute("INSERT INTO thread_configs VALUES ('t', '{\"history_limit\": \"x\"}')")
    seen: list[LLMRequest] = []
    agent = create_agent(provider=ScriptedProvider(answering(seen)), storage=storage)

    with pytest.raises(ThreadAwaitingApprovalError) as raised:
        await agent.process(AgentProps("q", "t"))

    assert raised.value.trace_id == "waiting"
    assert seen == []
    await agent.aclose()
    await storage.aclose()


async def test_a_damaged_config_fails_the_run_as_data(tmp_path: Path) -> None:
    """A thread config that cannot be read ends the run with status error naming the table,
    not with an exception."""
    storage = SQLiteStorage(tmp_path / "agent.db")
    await storage.initialize()
    with closing(sqlite3.connect(storage.path, isolation_level=None)) as conn:
        conn.execute("INSERT INTO thread_configs VALUES ('t', '{\"history_limit\": \"x\"}')")
    agent = create_agent(provider=ScriptedProvider(["never"]), storage=storage)

    result = await agent.process(AgentProps("q", "t"))

    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert result.metadata.error.startswith("loading the thread failed")
    assert "'thread_configs'" in result.metadata.error
    await agent.aclose()
    await storage.aclose()


async def test_a_storage_without_snapshots_runs_through_the_separate_reads() -> None:
    """An agent on a Storage lacking `load_snapshot` loads its thread with the protocol's
    separate calls, and the run sees the same thread."""
    custom = SeparateReadsOnly()
    await custom.inner.set_thread_config("t", ThreadConfig(system_prompt="Be brief."))
    await custom.inner.add_messages("t", [user("t", "earlier")])
    seen: list[LLMRequest] = []
    agent = create_agent(provider=ScriptedProvider(answering(seen)), storage=custom)  # type: ignore[arg-type]

    result = await agent.process(AgentProps("q", "t"))

    assert result.metadata.status == "success"
    assert {"get_paused_runs", "get_thread_config", "get_agent_state"} <= set(custom.called)
    assert "earlier" in [m.content for m in seen[0].messages]
    assert any("Be brief." in m.content for m in seen[0].messages)
    await custom.inner.save_paused_run(paused_run("t", "waiting"))
    with pytest.raises(ThreadAwaitingApprovalError):
        await agent.process(AgentProps("again", "t"))
    await agent.aclose()


def test_an_in_memory_store_is_one_too() -> None:
    """The default store reads snapshots itself (no fallback on the common path)."""
    assert callable(getattr(InMemoryStorage(), "load_snapshot", None))
