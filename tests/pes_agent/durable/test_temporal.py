"""Runs on Temporal survive their worker: one dev server, real worker processes, SIGKILLed
mid-run."""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from pes_agent import (
    AgentProps,
    Approve,
    Deny,
    NotAwaitingApprovalError,
    ObservationType,
    StreamEvent,
    ThreadAwaitingApprovalError,
    create_agent,
)
from pes_agent.core import AgentCore
from pes_agent.durable.effects import EngineRun
from pes_agent.durable.temporal import TemporalEngine
from pes_agent.testing import ScriptedProvider
from tests.pes_agent.storage.conftest import wait_until

from .conftest import (
    Workers,
    check_notes_run,
    check_spans_of_a_taken_over_run,
    finished_calls,
    kept_steps,
)
from .temporal_worker import HEARTBEAT_TIMEOUT_S, TASK_TIMEOUT_S, build_agent, engine

pytestmark = pytest.mark.slow


def engine_of(workers: Workers) -> TemporalEngine:
    return engine(workers.engine_db, workers.queue)


@pytest.fixture
async def client(temporal_workers: Workers) -> AsyncIterator[AgentCore]:
    """A thin submitting agent: no tools, no model; the workers hold both."""
    engine = engine_of(temporal_workers)
    agent = create_agent(
        provider=ScriptedProvider([]), storage=temporal_workers.storage, engine=engine
    )
    async with agent:
        yield agent
    await engine.aclose()


async def wait_for_status(workers: Workers, trace_id: str, status: WorkflowExecutionStatus) -> None:
    """Wait until the run's workflow has `status`."""
    connection = await Client.connect(workers.engine_db)
    handle = connection.get_workflow_handle(f"pes-agent/{workers.queue}/run/{trace_id}")
    try:
        for _ in range(300):
            if (await handle.describe()).status == status:
                return
            await asyncio.sleep(0.1)
        pytest.fail(f"the run's workflow is {(await handle.describe()).status}, not {status}")
    finally:
        del connection, handle
        gc.collect()  # temporalio/sdk-python#300


async def test_a_run_completes_on_a_worker_in_another_process(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """Dependent and independent calls run on the worker; the answer, the turn and the
    observations reach the submitting process."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=0.2)
    result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)

    await check_notes_run(workers, client, result)
    finals = await client.observations.get_observations(
        "t1", types=[ObservationType.FINAL_RESPONSE]
    )
    assert len(finals) == 1


@pytest.mark.parametrize("plan", ["notes", "fan"])
async def test_a_finished_run_replays_from_its_history(
    temporal_workers: Workers, client: AgentCore, plan: str
) -> None:
    """Replaying a finished run's history raises nothing, its calls having finished in
    another order than they started (fan: in the reverse of it); no tool runs again."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=0.2, plan=plan)
    result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)
    assert result.metadata.status == "success", result.metadata.error
    lines = workers.effects_lines()
    if plan == "fan":
        done = [line for line in lines if line.startswith("slow-done")]
        assert done == [f"slow-done f{n}" for n in range(5, 0, -1)]
        assert lines[-1] == "note F1F3F5"
    connection = await Client.connect(workers.engine_db)
    run_id = f"pes-agent/{workers.queue}/run/{result.metadata.trace_id}"
    history = await connection.get_workflow_handle(run_id).fetch_history()
    del connection
    gc.collect()

    engine = engine_of(workers)
    async with build_agent(engine, workers.storage) as agent, engine.replayer(agent) as replayer:
        replayed = await replayer.replay_workflow(history)
    assert replayed.replay_failure is None
    assert workers.effects_lines() == lines  # no tool ran again


async def test_a_run_whose_worker_is_killed_mid_tool_is_finished_by_the_next(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """SIGKILL during the slow call: a new worker takes the run over, every finished call
    done once, the turn saved once."""
    workers = temporal_workers
    first = await workers.start(workers.queue, slow_s=2.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    # Both quick calls have finished (their results recorded) while the slow one runs.
    await finished_calls(client, "t1", 2)
    await kept_steps(workers, client, "t1", "pes_agent.tool.", 2)  # both held by the engine
    await workers.kill(first)  # no cleanup, the slow call half done
    killed = time.perf_counter()
    assert "slow-done b" not in workers.effects_lines()

    await workers.start(workers.queue, slow_s=2.0)  # another worker on the queue
    await wait_until(
        lambda: workers.effects_lines().count("slow-start b") == 2, "the slow call again"
    )
    takeover_s = time.perf_counter() - killed
    result = await asyncio.wait_for(run, 90)

    assert result.metadata.status == "success", result.metadata.error
    effects = Counter(workers.effects_lines())
    # Every call that had finished ran once; the one cut off ran again, once to the end.
    assert effects["note a"] == 1
    assert effects["note A-c"] == 1
    assert effects["slow-start b"] == 2
    assert effects["slow-done b"] == 1
    assert effects["note B-d"] == 1
    # The turn was saved once.
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["Take notes", "All done."]
    assert takeover_s < HEARTBEAT_TIMEOUT_S + 10, takeover_s
    print(f"takeover after SIGKILL: {takeover_s:.2f} s")


async def test_a_tools_state_changes_are_saved_with_the_turn(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """A tool's change to `context.state` on the worker is saved with the turn (implicit)."""
    workers = temporal_workers
    await workers.start(workers.queue, plan="state")
    result = await asyncio.wait_for(client.process(AgentProps("Remember green", "t1")), 60)
    assert result.metadata.status == "success", result.metadata.error
    state = await client.state.get_agent_state("t1")
    assert state is not None
    assert state.data == {"colour": "green"}


async def test_a_run_whose_worker_dies_mid_model_call_is_finished_by_the_next(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """SIGKILL during the synthesis call (a local activity: the workflow task is held by the
    dead worker): after the task's timeout another worker makes the call again and saves
    the turn once; no tool runs again."""
    workers = temporal_workers
    first = await workers.start(workers.queue, slow_s=0.1, model_s=1.5)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))

    async def synthesis_calls() -> int:
        started = await client.observations.get_observations(
            "t1", types=[ObservationType.LLM_STREAM_START]
        )
        return sum(1 for o in started if o.content.get("phase") == "synthesis")

    async def synthesising(count: int) -> bool:
        return await synthesis_calls() >= count

    await wait_until(lambda: synthesising(1), "the synthesis call")
    await workers.kill(first)
    killed = time.perf_counter()
    await workers.start(workers.queue, slow_s=0.1, model_s=1.5)
    await wait_until(lambda: synthesising(2), "the synthesis call again")
    takeover_s = time.perf_counter() - killed
    result = await asyncio.wait_for(run, 90)

    assert result.metadata.status == "success", result.metadata.error
    assert Counter(workers.effects_lines()) == Counter(
        ["note a", "slow-start b", "slow-done b", "note A-c", "note B-d"]
    )
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["Take notes", "All done."]
    assert takeover_s < TASK_TIMEOUT_S + 10, takeover_s
    print(f"workflow task takeover after SIGKILL: {takeover_s:.2f} s")


async def test_cancelling_a_turn_that_waits_for_its_thread_drops_it(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """A run cancelled while an earlier run holds its thread never starts; the earlier one
    finishes."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=1.5)
    first = asyncio.create_task(client.process(AgentProps("First", "t1")))
    await workers.wait_for_effect("slow-start b")
    second = asyncio.create_task(client.process(AgentProps("Second", "t1", trace_id="s2")))
    await asyncio.sleep(0.5)  # the second run waits for the thread's turn
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    result = await asyncio.wait_for(first, 60)
    assert result.metadata.status == "success", result.metadata.error
    await asyncio.sleep(2.0)  # time the second run would have needed to start
    assert workers.effects_lines().count("note a") == 1
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["First", "All done."]


async def test_cancelling_the_caller_cancels_the_run_and_its_slow_tool(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """The run's workflow ends CANCELED and the slow tool never completes."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=4.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1", trace_id="c1")))
    await workers.wait_for_effect("slow-start b")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    await wait_for_status(workers, "c1", WorkflowExecutionStatus.CANCELED)
    await asyncio.sleep(5.0)  # past the time the slow tool would have finished
    assert "slow-done b" not in workers.effects_lines()
    assert await client.conversation.get_messages("t1") == []


async def test_a_run_cancelled_from_another_process_stops_and_its_caller_gets_cancelled(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """engine.cancel(trace_id) from another client finds the run on its thread, stops it on
    its worker, and the submitting caller's process() answers `cancelled`."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=4.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1", trace_id="x1")))
    await workers.wait_for_effect("slow-start b")
    elsewhere = engine_of(workers)
    try:
        found = await elsewhere.find("x1")
        assert found is not None
        assert (found.thread_id, found.status, found.running) == ("t1", "running", True)
        assert await elsewhere.find("no-such-run") is None
        assert await elsewhere.cancel("no-such-run") is None
        # The thread's runs that go on, as the server's visibility store lists them.
        listed = [EngineRun(trace_id="x1", thread_id="t1", status="running")]

        async def running_is(expected: list[EngineRun]) -> bool:
            return await elsewhere.running("t1") == expected

        await wait_until(lambda: running_is(listed), "the run listed as running on t1")
        assert await elsewhere.running("t2") == []

        cancelled = await elsewhere.cancel("x1")
        assert cancelled is not None
        assert cancelled.running
        result = await asyncio.wait_for(run, 30)
        assert (result.metadata.status, result.metadata.trace_id) == ("cancelled", "x1")
        after = await elsewhere.find("x1")
        assert after is not None
        assert after.status == "cancelled"
        await wait_until(lambda: running_is([]), "no run listed as running on t1")

        async def recorded() -> bool:  # as an in-process run records its cancellation
            errors = await client.observations.get_observations("t1", types=[ObservationType.ERROR])
            return [(o.trace_id, o.content["phase"]) for o in errors] == [("x1", "cancelled")]

        await wait_until(recorded, "the worker to record the run's cancellation")
    finally:
        await elsewhere.aclose()
        gc.collect()  # temporalio/sdk-python#300
    await asyncio.sleep(5.0)  # past the time the slow tool would have finished
    assert "slow-done b" not in workers.effects_lines()
    assert await client.conversation.get_messages("t1") == []


async def test_find_gives_a_finished_runs_response_status(
    temporal_workers: Workers, client: AgentCore
) -> None:
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=0.1)
    result = await asyncio.wait_for(
        client.process(AgentProps("Take notes", "t1", trace_id="x2")), 60
    )
    assert result.metadata.status == "success"
    engine = client.engine
    assert isinstance(engine, TemporalEngine)
    found = await engine.find("x2")
    assert found is not None
    assert (found.status, found.thread_id) == ("success", "t1")


async def test_runs_on_one_thread_take_turns_across_two_workers(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """Three runs submitted at once on one thread run one after another."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=0.5)
    await workers.start(workers.queue, slow_s=0.5)
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(client.process(AgentProps(f"Run {n}", "t1")) for n in range(3))), 120
    )
    assert [r.metadata.status for r in results] == ["success"] * 3
    assert time.perf_counter() - started >= 1.5  # three slow calls, one after another
    # Each run's slow call finished before the next run's started.
    order = [line for line in workers.effects_lines() if line.startswith("slow-")]
    assert order == ["slow-start b", "slow-done b"] * 3
    messages = await client.conversation.get_messages("t1")
    assert len(messages) == 6


async def test_a_worker_stops_cleanly_on_sigterm(temporal_workers: Workers) -> None:
    """A worker that ran a run exits 0 on SIGTERM (no abort at interpreter exit)."""
    workers = temporal_workers
    process = await workers.start(workers.queue, slow_s=0.1)
    engine = engine_of(workers)
    agent = create_agent(provider=ScriptedProvider([]), storage=workers.storage, engine=engine)
    async with agent:
        result = await asyncio.wait_for(agent.process(AgentProps("Take notes", "t1")), 60)
    await engine.aclose()
    assert result.metadata.status == "success", result.metadata.error
    process.terminate()
    assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_a_worker_stopped_mid_tool_exits_0_and_its_run_is_finished_by_another(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """SIGTERM during the slow call: the worker exits 0 at once (its call cancelled), another
    worker makes the call again and finishes the run."""
    workers = temporal_workers
    first = await workers.start(workers.queue, slow_s=3.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    await workers.start(workers.queue, slow_s=0.5)
    first.terminate()
    assert await asyncio.wait_for(first.wait(), 30) == 0
    result = await asyncio.wait_for(run, 60)
    assert result.metadata.status == "success", result.metadata.error
    effects = Counter(workers.effects_lines())
    assert effects["slow-start b"] == 2
    assert effects["slow-done b"] == 1
    assert effects["note a"] == 1
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["Take notes", "All done."]


async def test_a_paused_run_waits_with_no_worker_and_a_new_one_resumes_it(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """A paused run holds no worker; another worker resumes it: approved paid once, denied
    never."""
    workers = temporal_workers
    first = await workers.start(workers.queue, plan="pay")
    paused = await asyncio.wait_for(client.process(AgentProps("Pay both", "t1")), 60)
    assert paused.metadata.status == "awaiting_approval", paused.metadata.error
    pending = {
        p.tool_name + str(p.arguments["amount"]): p.call_id
        for p in paused.metadata.pending_approvals
    }
    assert set(pending) == {"pay5", "pay7"}
    await workers.kill(first)  # no process holds the paused run

    (waiting,) = await client.pending_runs("t1")  # the storage answers without any worker
    assert waiting.trace_id == paused.metadata.trace_id
    assert workers.effects_lines() == ["note x"]

    await workers.start(workers.queue, plan="pay")
    # A new turn on the thread is refused on the worker, the error raised here.
    with pytest.raises(ThreadAwaitingApprovalError):
        await asyncio.wait_for(client.process(AgentProps("Another", "t1")), 60)
    result = await asyncio.wait_for(
        client.resume(
            "t1",
            paused.metadata.trace_id,
            {pending["pay5"]: Approve(), pending["pay7"]: Deny("too much")},
        ),
        60,
    )
    assert result.metadata.status == "partial", result.metadata.error  # the denied call
    assert Counter(workers.effects_lines()) == Counter(["note x", "pay 5"])  # 7 never paid
    assert await client.pending_runs("t1") == []
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["Pay both", "All done."]
    # A second resume is refused on the worker and raised here.
    with pytest.raises(NotAwaitingApprovalError):
        await asyncio.wait_for(client.resume("t1", paused.metadata.trace_id, {}), 60)


# An answer of many tokens, with text JSON must escape and characters UTF-8 writes in several
# bytes (the store's feed carries them from the worker's process to the submitting one).
LONG_ANSWER = "\n".join(f'Line {n}: "quoted" \\ back, tab\t, été ✓ 日本語.' for n in range(300))


async def test_a_subscriber_of_the_submitting_agent_gets_the_tokens_a_worker_streams(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """Tokens reach subscribers through the store's feed: a stream subscriber on the
    submitting agent gets the synthesis tokens the worker in another process streams, in
    order and all of them before process() returns, joined equal to the answer."""
    workers = temporal_workers
    await workers.start(workers.queue, slow_s=0.1, env={"PES_TEST_ANSWER": LONG_ANSWER})
    tokens: list[str] = []
    kinds: list[str] = []

    def on_event(event: StreamEvent) -> None:
        kinds.append(event.kind)
        if event.kind == "token":
            tokens.append(event.text)

    stop = client.stream.subscribe(on_event, thread_id="t1", phases="synthesis")
    result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)
    stop()
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == LONG_ANSWER
    assert "".join(tokens) == LONG_ANSWER
    assert kinds[-1] == "end"


async def test_an_in_run_approval_is_a_step_the_worker_taking_over_does_not_ask_again(
    temporal_workers: Workers, client: AgentCore
) -> None:
    """The approval_handler's decisions are steps (`pes_agent.approval`, local activities):
    the worker that takes a run over after a SIGKILL gets them from the history (its own
    handler, which would decide the other way, is not asked), so the approved slow call
    finishes there and the denied payment never runs."""
    workers = temporal_workers
    first = await workers.start(
        workers.queue, plan="ask", slow_s=4.0, env={"PES_TEST_APPROVE": "slow_note"}
    )
    run = asyncio.create_task(client.process(AgentProps("Note and pay", "t1")))
    await workers.wait_for_effect("slow-start b")
    await finished_calls(client, "t1", 1)  # the payment, denied (recorded after its decision)
    await kept_steps(workers, client, "t1", "pes_agent.approval", 2)  # both decisions held
    await workers.kill(first)
    assert "slow-done b" not in workers.effects_lines()

    await workers.start(workers.queue, plan="ask", slow_s=4.0, env={"PES_TEST_APPROVE": "pay"})
    result = await asyncio.wait_for(run, 90)

    assert result.metadata.status == "partial", result.metadata.error  # the denied payment
    effects = Counter(workers.effects_lines())
    assert (effects["asked slow_note"], effects["asked pay"]) == (1, 1), effects
    assert (effects["slow-start b"], effects["slow-done b"]) == (2, 1)
    assert effects["pay 7"] == 0
    decided = await client.observations.get_observations(
        "t1", types=[ObservationType.APPROVAL_DECIDED]
    )
    assert sorted((o.content["toolName"], o.content["decision"]) for o in decided) == [
        ("pay", "deny"),
        ("slow_note", "approve"),
    ]


async def test_a_run_taken_over_emits_each_steps_span_once(
    temporal_workers: Workers, client: AgentCore, tmp_path: Path
) -> None:
    """OpenTelemetry on the workers (`pes_agent.otel.instrument`): the worker that takes a
    run over replays the steps the killed one had finished (their local activities and
    activities answer from the history) without emitting their spans again: one chat span
    per model step, one tool span per call, one run span that ended, the parent of the
    spans its worker made."""
    workers = temporal_workers
    spans = tmp_path / "spans.jsonl"
    env = {"PES_TEST_SPANS": str(spans)}
    first = await workers.start(workers.queue, slow_s=4.0, env=env)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    await finished_calls(client, "t1", 2)
    await kept_steps(workers, client, "t1", "pes_agent.tool.", 2)  # both held by the engine
    await workers.kill(first)
    await workers.start(workers.queue, slow_s=4.0, env=env)
    result = await asyncio.wait_for(run, 90)
    assert result.metadata.status == "success", result.metadata.error

    await check_spans_of_a_taken_over_run(spans)
