"""Saving the turn: a transient failure is retried once; a failed save still returns the answer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pes_agent import (
    AgentFinalResponse,
    AgentProps,
    AgentState,
    ConversationMessage,
    ObservationType,
    SQLiteStorage,
    StorageError,
    create_agent,
)
from pes_agent.testing import ScriptedProvider

from .conftest import plan_json


class _FailingCommits(SQLiteStorage):
    """A real SQLite store whose first `failures` commits fail (after landing, if `landed`)."""

    def __init__(
        self, path: Path, *, failures: int, transient: bool = True, landed: bool = False
    ) -> None:
        super().__init__(path)
        self.failures = failures
        self.transient = transient
        self.landed = landed
        self.attempts: list[str | None] = []

    async def commit_turn(
        self,
        thread_id: str,
        messages: Sequence[ConversationMessage],
        state: AgentState | None,
        **options: Any,
    ) -> AgentState | None:
        self.attempts.append(options.get("trace_id"))
        if len(self.attempts) > self.failures:
            return await super().commit_turn(thread_id, messages, state, **options)
        if self.landed:
            await super().commit_turn(thread_id, messages, state, **options)
        raise StorageError("database is locked", transient=self.transient, thread_id=thread_id)


async def _run(storage: SQLiteStorage) -> tuple[AgentFinalResponse, list[str]]:
    agent = create_agent(provider=ScriptedProvider([plan_json(), "the answer"]), storage=storage)
    try:
        result = await agent.process(AgentProps("q", "t", trace_id="trace-1"))
        contents = [m.content for m in await storage.get_messages("t")]
    finally:
        await agent.aclose()
        await storage.aclose()
    return result, contents


async def test_a_transient_commit_failure_is_retried_once_and_the_turn_saved(
    tmp_path: Path,
) -> None:
    """A commit that fails once transiently is retried: the run succeeds with one turn saved."""
    storage = _FailingCommits(tmp_path / "agent.db", failures=1)
    result, contents = await _run(storage)
    assert result.metadata.status == "success", result.metadata.error
    assert contents == ["q", "the answer"]
    assert storage.attempts == ["trace-1", "trace-1"]


async def test_a_retried_commit_that_had_landed_is_not_saved_twice(tmp_path: Path) -> None:
    """A commit that landed but reported a transient error is retried without a second turn."""
    storage = _FailingCommits(tmp_path / "agent.db", failures=1, landed=True)
    result, contents = await _run(storage)
    assert result.metadata.status == "success", result.metadata.error
    assert contents == ["q", "the answer"]


@pytest.mark.parametrize(
    ("transient", "attempts"), [(True, 2), (False, 1)], ids=["transient", "permanent"]
)
async def test_a_failed_save_returns_the_answer_with_an_error_naming_the_save(
    tmp_path: Path, transient: bool, attempts: int
) -> None:
    """When the turn cannot be saved the run ends 'error', the answer returned, nothing saved."""
    storage = _FailingCommits(tmp_path / "agent.db", failures=99, transient=transient)
    agent = create_agent(provider=ScriptedProvider([plan_json(), "the answer"]), storage=storage)
    try:
        result = await agent.process(AgentProps("q", "t"))
        errors = await storage.get_observations("t", types=[ObservationType.ERROR])
        assert await storage.get_messages("t") == []
    finally:
        await agent.aclose()
        await storage.aclose()
    assert result.metadata.status == "error"
    assert result.response.content == "the answer"
    assert result.metadata.error is not None
    assert "saving the turn to storage failed" in result.metadata.error
    assert "database is locked" in result.metadata.error
    assert len(storage.attempts) == attempts
    assert [o.content["phase"] for o in errors] == ["finalization"]
