"""The Temporal engine's steps, turns and retries, with a worker in this process (its runs
started eagerly): a thread's turn lent to one run at a time and broken when its holder is
gone, a model call's retryable error tried again as one step, a refusal not, and `find`
following resumptions."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from pes_agent import AgentProps, Approve, LLMRequest, ProviderError, UsageError, create_agent, tool
from pes_agent.core import AgentCore
from pes_agent.durable.temporal import (
    MODEL_RETRY_POLICY,
    STEP_RETRY_POLICY,
    TemporalEngine,
    tool_retry_policy,
)
from pes_agent.storage import TurnLeases
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from tests.pes_agent.storage.conftest import wait_until

from .temporal_worker import HEARTBEAT_TIMEOUT_S, engine

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PAY_PLAN = plan_lines(plan_call(1, "pay", amount=5), intent="one payment")

# The calls the tools saw, and what `hold` waits for (set: it returns at once).
calls: list[str] = []
gates: dict[str, asyncio.Event] = {}


@tool
async def hold(key: str) -> str:
    """Return `key`, once the test lets the call go."""
    calls.append(f"hold {key}")
    gate = gates.get(key)
    if gate is not None:
        await gate.wait()
    return key


@tool
async def pay(amount: int) -> str:
    """Pay `amount` euros."""
    calls.append(f"pay {amount}")
    return f"paid {amount}"


def answer(request: LLMRequest) -> str:
    """Plan `hold(key=<the query>)` (or a payment, asked to pay), then answer "Done."."""
    if request.phase != "planning":
        return "Done."
    query = request.messages[-1].content
    assert isinstance(query, str)
    if query == "pay":
        return PAY_PLAN
    return plan_lines(plan_call(1, "hold", key=query), intent="one call")


@dataclass
class Here:
    """An agent that submits runs and works them, in this process, on a task queue of its own."""

    agent: AgentCore
    engine: TemporalEngine
    provider: ScriptedProvider
    address: str
    worker: AbstractAsyncContextManager[None]

    def run_id(self, trace_id: str) -> str:
        return f"pes-agent/{self.engine.task_queue}/run/{trace_id}"

    async def history(self, workflow_id: str) -> WorkflowHistory:
        connection = await Client.connect(self.address)
        try:
            return await connection.get_workflow_handle(workflow_id).fetch_history()
        finally:
            del connection
            gc.collect()  # temporalio/sdk-python#300

    async def status(self, workflow_id: str) -> WorkflowExecutionStatus | None:
        """The workflow's status; None when there is no such workflow (yet)."""
        connection = await Client.connect(self.address)
        try:
            return (await connection.get_workflow_handle(workflow_id).describe()).status
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        finally:
            del connection
            gc.collect()


@pytest.fixture
async def make_here(
    temporal_server: str, tmp_path: Path
) -> AsyncIterator[Callable[[ScriptedProvider], Any]]:
    """Start `Here` with the given model; stopped at the end."""
    stack: list[Here] = []
    calls.clear()
    gates.clear()

    async def start(provider: ScriptedProvider) -> Here:
        on = engine(temporal_server, f"pes-test-{uuid.uuid4().hex[:12]}")
        agent = create_agent(
            provider=provider,
            tools=[hold, pay],
            require_approval=["pay"],
            storage=f"sqlite:///{tmp_path / 'agent.db'}",
            engine=on,
        )
        here = Here(agent, on, provider, temporal_server, on.worker(agent))
        await agent.__aenter__()
        await here.worker.__aenter__()
        stack.append(here)
        return here

    yield start
    for here in stack:
        for gate in gates.values():
            gate.set()
        await here.worker.__aexit__(None, None, None)
        await here.agent.aclose()
        await here.engine.aclose()
    gc.collect()


def local_activities(history: WorkflowHistory) -> list[str]:
    """The local activities a run's history records, in order (each once, however many
    attempts it took)."""
    names = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
            names.append(json.loads(data)["activity_type"])
    return names


# -- retries -----------------------------------------------------------------------------------


async def test_a_model_call_failing_transiently_is_tried_again_as_one_step(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A retryable ProviderError (once) is tried again by Temporal: the run succeeds, its
    history records one planning step."""
    failures = [ProviderError("overloaded", provider="scripted", status_code=529, retryable=True)]

    def flaky(request: LLMRequest) -> str:
        if request.phase == "planning" and failures:
            raise failures.pop()
        return answer(request)

    here = await make_here(ScriptedProvider([flaky], repeat=True))
    result = await asyncio.wait_for(here.agent.process(AgentProps("go", "t1", trace_id="r1")), 60)
    assert result.metadata.status == "success", result.metadata.error
    assert here.provider.calls == 3  # planning twice, synthesis once
    steps = local_activities(await here.history(here.run_id("r1")))
    assert steps == [
        "pes_agent.load",
        "pes_agent.model.planning",
        "pes_agent.model.synthesis",
        "pes_agent.commit_turn",
    ]


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("too long", provider="scripted", refusal="context_length"),
        ProviderError("blocked", provider="scripted", status_code=400, refusal="content_filter"),
        UsageError("the provider was closed"),
    ],
    ids=["context-length", "content-filter", "usage-error"],
)
async def test_a_refusal_or_usage_error_is_not_tried_again(
    make_here: Callable[[ScriptedProvider], Any], error: Exception
) -> None:
    """A refusal or a usage error ends the run (status error) after one model call."""

    def refuse(request: LLMRequest) -> str:
        raise error

    here = await make_here(ScriptedProvider([refuse], repeat=True))
    result = await asyncio.wait_for(here.agent.process(AgentProps("go", "t1")), 60)
    assert result.metadata.status == "error"
    assert here.provider.calls == 1
    assert calls == []


async def test_a_retryable_error_that_persists_is_tried_as_often_as_the_policy_says(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A model that keeps failing retryably is called MODEL_RETRY_POLICY.maximum_attempts
    times, then the run ends with the error."""

    def down(request: LLMRequest) -> str:
        raise ProviderError("unavailable", provider="scripted", status_code=503, retryable=True)

    here = await make_here(ScriptedProvider([down], repeat=True))
    result = await asyncio.wait_for(here.agent.process(AgentProps("go", "t1")), 60)
    assert result.metadata.status == "error"
    assert "unavailable" in (result.metadata.error or "")
    assert here.provider.calls == MODEL_RETRY_POLICY.maximum_attempts == 3


async def test_each_activity_gets_the_retry_policy_the_readme_states(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A tool call's activity is scheduled with `tool_retry_policy` (retried only when its
    worker is lost: 0.1 s doubling to the heartbeat timeout, no attempt limit); the README
    states the policies of tool calls, model calls and the other steps as they are."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    result = await asyncio.wait_for(here.agent.process(AgentProps("go", "t1", trace_id="r1")), 60)
    assert result.metadata.status == "success", result.metadata.error
    history = await here.history(here.run_id("r1"))
    [scheduled] = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.activity_type.name == "pes_agent.tool.hold"
    policy = scheduled.retry_policy
    expected = tool_retry_policy(HEARTBEAT_TIMEOUT_S)
    assert policy.initial_interval.ToMilliseconds() == 100
    assert policy.maximum_interval.ToMilliseconds() == HEARTBEAT_TIMEOUT_S * 1000
    assert policy.maximum_attempts == expected.maximum_attempts == 0  # unlimited
    assert STEP_RETRY_POLICY.maximum_attempts == 1
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for stated in (
        "a model call's retryable `ProviderError`",
        f"tried {MODEL_RETRY_POLICY.maximum_attempts} times in all",
        "every other step is tried once",
        "0.1 s doubling up to `heartbeat_timeout_s`",
    ):
        assert stated in readme, stated


# -- one turn at a time per thread --------------------------------------------------------------


async def turn_holder(here: Here, thread_id: str) -> str:
    """Who holds the thread's turn ("" when no one): a probe claims it and lets go."""
    storage = here.agent.storage
    assert isinstance(storage, TurnLeases)
    holder = await storage.claim_turn(thread_id, "probe")
    await storage.release_turn(thread_id, "probe")
    return "" if holder == "probe" else holder


async def test_a_run_waits_for_the_thread_s_turn_and_takes_it_when_given_back(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A second run on a thread waits while the first holds its turn, then runs; the turn is
    given back after each; a run on another thread does not wait."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    gates["first"] = asyncio.Event()
    first = asyncio.create_task(here.agent.process(AgentProps("first", "t1", trace_id="r1")))
    await wait_until(lambda: calls == ["hold first"], "the first run's call")
    assert (await turn_holder(here, "t1")).startswith(here.run_id("r1") + "#")
    second = asyncio.create_task(here.agent.process(AgentProps("second", "t1", trace_id="r2")))
    other = await asyncio.wait_for(here.agent.process(AgentProps("other", "t2")), 60)
    assert other.metadata.status == "success"  # t2's turn was free
    await asyncio.sleep(1.0)
    assert calls == ["hold first", "hold other"]  # r2 still waits for t1's turn
    assert await here.status(here.run_id("r2")) == WorkflowExecutionStatus.RUNNING

    gates["first"].set()
    results = await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert [r.metadata.status for r in results] == ["success", "success"]
    messages = await here.agent.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["first", "Done.", "second", "Done."]
    assert await turn_holder(here, "t1") == ""


async def test_a_turn_held_by_a_workflow_that_no_longer_runs_is_broken(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A run whose workflow was terminated (no chance to give its turn back) and a lease named
    after a workflow that never existed both leave the turn to the next run."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    gates["stuck"] = asyncio.Event()
    stuck = asyncio.create_task(here.agent.process(AgentProps("stuck", "t1", trace_id="r1")))
    await wait_until(lambda: calls == ["hold stuck"], "the first run's call")
    connection = await Client.connect(here.address)
    await connection.get_workflow_handle(here.run_id("r1")).terminate("a test")
    del connection
    gc.collect()
    with pytest.raises(Exception, match="did not finish"):
        await asyncio.wait_for(stuck, 30)
    assert (await turn_holder(here, "t1")).startswith(here.run_id("r1") + "#")

    gates.clear()
    after = await asyncio.wait_for(here.agent.process(AgentProps("after", "t1")), 60)
    assert after.metadata.status == "success", after.metadata.error

    storage = here.agent.storage
    assert isinstance(storage, TurnLeases)
    ghost = f"{here.run_id('never-started')}#{uuid.uuid4()}#default"
    assert await storage.claim_turn("t2", ghost) == ghost
    later = await asyncio.wait_for(here.agent.process(AgentProps("later", "t2")), 60)
    assert later.metadata.status == "success", later.metadata.error
    assert await turn_holder(here, "t1") == await turn_holder(here, "t2") == ""


async def test_cancelling_a_run_that_waits_for_its_turn_ends_its_workflow(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """A run cancelled while it waits for its thread's turn ends CANCELED without running;
    the run holding the turn finishes."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    gates["first"] = asyncio.Event()
    first = asyncio.create_task(here.agent.process(AgentProps("first", "t1", trace_id="r1")))
    await wait_until(lambda: calls == ["hold first"], "the first run's call")
    second = asyncio.create_task(here.agent.process(AgentProps("second", "t1", trace_id="r2")))

    async def waiting() -> bool:
        return await here.status(here.run_id("r2")) == WorkflowExecutionStatus.RUNNING

    await wait_until(waiting, "the second run's workflow")
    await asyncio.sleep(0.5)  # it waits for the turn
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second

    async def cancelled() -> bool:
        return await here.status(here.run_id("r2")) == WorkflowExecutionStatus.CANCELED

    await wait_until(cancelled, "the second run cancelled")
    gates["first"].set()
    result = await asyncio.wait_for(first, 60)
    assert result.metadata.status == "success"
    assert calls == ["hold first"]
    assert await turn_holder(here, "t1") == ""


# -- observations --------------------------------------------------------------------------------


async def test_what_workflow_code_records_is_stored_while_the_run_waits_for_a_tool(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """The plan's and the call's observations, recorded by workflow code before the run waits
    on a slow tool call, are stored while the call still runs (not left for the next step);
    once the run ends, each of its observations is stored once, in the order recorded."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    gates["slow"] = asyncio.Event()
    run = asyncio.create_task(here.agent.process(AgentProps("slow", "t1", trace_id="r1")))
    await wait_until(lambda: calls == ["hold slow"], "the call")

    async def stored_before_the_step_ends() -> bool:
        titles = [o.title for o in await here.agent.observations.get_observations("t1")]
        return "Plan ready" in titles and "Calling hold" in titles

    await wait_until(stored_before_the_step_ends, "the plan's observations, the call running")
    assert not run.done()
    gates["slow"].set()
    result = await asyncio.wait_for(run, 60)
    assert result.metadata.status == "success"
    stored = await here.agent.observations.get_observations("t1", trace_id="r1")
    titles = [o.title for o in stored]
    assert len({o.id for o in stored}) == len(stored)
    assert titles.count("Calling hold") == titles.count("Plan ready") == 1
    assert titles.index("Plan ready") < titles.index("Calling hold") < titles.index("hold success")


# -- find ----------------------------------------------------------------------------------------


async def test_find_follows_a_run_s_resumptions(
    make_here: Callable[[ScriptedProvider], Any],
) -> None:
    """find gives a paused run's status, then its resumption's; a resumption refused (its
    decisions do not fit) is passed over; cancel on a finished resumption leaves it."""
    here = await make_here(ScriptedProvider([answer], repeat=True))
    paused = await asyncio.wait_for(here.agent.process(AgentProps("pay", "t1", trace_id="p1")), 60)
    assert paused.metadata.status == "awaiting_approval", paused.metadata.error
    found = await here.engine.find("p1")
    assert found is not None
    assert (found.status, found.thread_id) == ("awaiting_approval", "t1")

    with pytest.raises(UsageError):
        await here.agent.resume("t1", "p1", {"no-such-call": Approve()})
    found = await here.engine.find("p1")
    assert found is not None
    assert found.status == "awaiting_approval"  # the refused resumption is passed over

    decisions = {p.call_id: Approve() for p in paused.metadata.pending_approvals}
    result = await asyncio.wait_for(here.agent.resume("t1", "p1", decisions), 60)
    assert result.metadata.status == "success", result.metadata.error
    found = await here.engine.find("p1")
    assert found is not None
    assert (found.status, found.thread_id, found.running) == ("success", "t1", False)
    assert calls == ["pay 5"]
    assert await here.status(f"pes-agent/{here.engine.task_queue}/resume/p1/2") == (
        WorkflowExecutionStatus.COMPLETED
    )
    cancelled = await here.engine.cancel("p1")
    assert cancelled is not None
    assert cancelled.status == "success"


async def test_a_step_cancelled_while_it_writes_its_carried_observations_writes_them_all() -> None:
    """A step writes the observations recorded before it first; a cancel arriving meanwhile
    (the run cancelled) ends the step but not the batch, which is written whole and in order,
    and its `finished` future is set."""
    from pes_agent.durable.temporal import _write_carried
    from pes_agent.observing.types import Observation, ObservationType

    written: list[str] = []
    first_begun = asyncio.Event()

    async def write(observation: Observation) -> None:
        first_begun.set()
        await asyncio.sleep(0.01)
        written.append(observation.title)

    batch = [
        (Observation(thread_id="t", trace_id="r", type=ObservationType.PLAN, title=title), write)
        for title in ("one", "two", "three")
    ]
    finished: concurrent.futures.Future[None] = concurrent.futures.Future()
    step = asyncio.ensure_future(_write_carried(batch, None, finished))
    await first_begun.wait()
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    await asyncio.wait_for(asyncio.wrap_future(finished), 5)
    assert written == ["one", "two", "three"]
