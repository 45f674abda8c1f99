"""The code a Temporal worker runs as workflow code does no I/O: the store, the model and the
tools are reached from activities only (a worker in this process, every call checked)."""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio import workflow

from pes_agent import AgentProps, Approve, LLMRequest, ToolContext, create_agent, tool
from pes_agent.providers.base import ProviderEvent
from pes_agent.storage.memory import InMemoryStorage
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

from .temporal_worker import engine

pytestmark = pytest.mark.slow

PLAN = plan_lines(
    plan_call(1, "note", text="a"),
    plan_call(2, "note", text="b"),
    plan_call(3, "note", text="{step_1_result}{step_2_result}"),
    plan_call(4, "pay", amount=3),
    intent="notes and a payment",
)

# What was reached from workflow code (it must stay empty), by the checks below.
reached: list[str] = []


def checked(what: str) -> None:
    if workflow.in_workflow():
        reached.append(what)


class CheckedStorage:
    """The memory store, each of its methods noting a call from workflow code."""

    def __init__(self) -> None:
        self._inner = InMemoryStorage()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            checked(f"storage.{name}")
            return value(*args, **kwargs)

        return call


class CheckedProvider(ScriptedProvider):
    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        checked(f"model.{request.phase}")
        return super().stream(request)


@tool
async def note(text: str, context: ToolContext) -> str:
    """Write a note; returns it in capitals."""
    checked("tool.note")
    return text.upper()


@tool
async def pay(amount: int) -> str:
    """Pay `amount` euros."""
    checked("tool.pay")
    return f"paid {amount}"


def respond(request: LLMRequest) -> str:
    return PLAN if request.phase == "planning" else "All done."


@pytest.fixture
async def worker_agent(temporal_server: str) -> AsyncIterator[Any]:
    """An agent that submits its runs and works them, in this process."""
    on = engine(temporal_server, f"pes-test-{uuid.uuid4().hex[:12]}")
    agent = create_agent(
        provider=CheckedProvider([respond], repeat=True),
        tools=[note, pay],
        require_approval=["pay"],
        storage=CheckedStorage(),  # type: ignore[arg-type]
        engine=on,
    )
    reached.clear()
    async with agent, on.worker(agent):
        yield agent
    await on.aclose()
    gc.collect()  # temporalio/sdk-python#300


async def test_a_run_paused_and_resumed_reaches_the_world_only_from_activities(
    worker_agent: Any,
) -> None:
    agent = worker_agent
    paused = await agent.process(AgentProps("Notes, then pay", "t1"))
    assert paused.metadata.status == "awaiting_approval", paused.metadata.error
    decisions = {p.call_id: Approve() for p in paused.metadata.pending_approvals}
    result = await agent.resume("t1", paused.metadata.trace_id, decisions)
    assert result.metadata.status == "success", result.metadata.error
    assert [m.content for m in await agent.conversation.get_messages("t1")] == [
        "Notes, then pay",
        "All done.",
    ]
    assert reached == []


def test_the_check_notices_workflow_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not blind: code on a workflow's loop is noticed."""
    monkeypatch.setattr(workflow, "in_workflow", lambda: True)
    reached.clear()
    checked("storage.anything")
    assert reached == ["storage.anything"]
    reached.clear()
