"""Runs on DBOS survive their worker: real worker processes, SIGKILLed mid-run, on a SQLite
file and on PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx
import pytest
from dbos import DBOSClient

from pes_agent import (
    AgentProps,
    Approve,
    Deny,
    NotAwaitingApprovalError,
    ObservationType,
    StreamEvent,
    create_agent,
)
from pes_agent.core import AgentCore
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.server import create_app
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from tests.pes_agent.providers.model_server import Fault, ModelServer, Reply
from tests.pes_agent.storage.conftest import (
    drop_schema,
    pg_schema,
    require_postgres,
    wait_until,
)

from .conftest import (
    ROOT,
    Workers,
    check_notes_run,
    check_spans_of_a_taken_over_run,
    finished_calls,
    kept_steps,
)

__all__ = ["pg_schema"]  # the fixture, imported for the tests below

pytestmark = pytest.mark.slow


@pytest.fixture
async def client(workers: Workers) -> AsyncIterator[AgentCore]:
    """A thin submitting agent: no tools, no model; the workers hold both."""
    engine = DBOSEngine(workers.engine_db, poll_interval_s=0.05)
    agent = create_agent(provider=ScriptedProvider([]), storage=workers.storage, engine=engine)
    async with agent:
        yield agent
    await engine.aclose()
    # Collected now: a connection left open (runs submitted at once once made a client each)
    # warns here, in the test that leaked it, not in whichever test collects it later.
    gc.collect()


async def test_a_run_completes_on_a_worker_in_another_process(
    workers: Workers, client: AgentCore
) -> None:
    await workers.start("w1", slow_s=0.2)
    result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)

    await check_notes_run(workers, client, result)


async def test_a_run_whose_worker_is_killed_mid_tool_is_finished_by_the_next(
    workers: Workers, client: AgentCore
) -> None:
    first = await workers.start("w1", slow_s=2.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    # Both quick calls have finished (their results recorded) while the slow one runs.
    await finished_calls(client, "t1", 2)
    await kept_steps(workers, client, "t1", "pes_agent.tool.", 2)  # both held by the engine
    await workers.kill(first)  # no cleanup, the slow call half done
    assert "slow-done b" not in workers.effects_lines()

    await workers.start("w1", slow_s=2.0)  # the same worker slot, restarted
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
    # What the first worker did was recorded then and not again: the plan once, one end per call
    # (the call cut off ended only once, on the second worker), one answer.
    seen = await client.observations.get_observations("t1")
    kinds = Counter(o.type for o in seen)
    assert kinds[ObservationType.PLAN] == 2  # "preparing", then the plan
    assert kinds[ObservationType.INTENT] == kinds[ObservationType.TITLE] == 1
    ended = [
        (o.content.get("callId"), o.content.get("status"))
        for o in seen
        if o.type is ObservationType.TOOL_EXECUTION
    ]
    assert kinds[ObservationType.TOOL_EXECUTION] == 4, ended
    assert kinds[ObservationType.FINAL_RESPONSE] == 1
    planning = [o for o in seen if o.type is ObservationType.LLM_STREAM_START]
    assert [o.content["phase"] for o in planning] == ["planning", "synthesis"]
    started = Counter(
        o.content.get("toolName") for o in seen if o.type is ObservationType.TOOL_CALL
    )
    # The slow call started twice, for real: once on each worker.
    assert started == Counter({"note": 3, "slow_note": 2})


async def test_cancelling_the_caller_cancels_the_run_and_its_slow_tool(
    workers: Workers, client: AgentCore
) -> None:
    await workers.start("w1", slow_s=4.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.sleep(5.0)  # past the time the slow tool would have finished
    assert "slow-done b" not in workers.effects_lines()
    assert await client.conversation.get_messages("t1") == []


async def test_runs_on_one_thread_take_turns_across_two_workers(
    workers: Workers, client: AgentCore
) -> None:
    await workers.start("w1", slow_s=0.5)
    await workers.start("w2", slow_s=0.5)
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(client.process(AgentProps(f"Run {n}", "t1")) for n in range(3))), 120
    )
    assert [r.metadata.status for r in results] == ["success"] * 3
    assert time.perf_counter() - started >= 1.5  # three slow calls, one after another
    lines = workers.effects_lines()
    # Each run's slow call finished before the next run's started.
    order = [line for line in lines if line.startswith("slow-")]
    assert order == ["slow-start b", "slow-done b"] * 3
    messages = await client.conversation.get_messages("t1")
    assert len(messages) == 6


async def test_a_worker_stops_cleanly_on_sigterm(workers: Workers) -> None:
    process = await workers.start("w1", slow_s=0.1)
    process.terminate()
    assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_a_paused_run_waits_with_no_worker_and_a_new_one_resumes_it(
    workers: Workers, client: AgentCore
) -> None:
    first = await workers.start("w1", plan="pay")
    paused = await asyncio.wait_for(client.process(AgentProps("Pay both", "t1")), 60)
    assert paused.metadata.status == "awaiting_approval", paused.metadata.error
    pending = {
        p.tool_name + str(p.arguments["amount"]): p.call_id
        for p in paused.metadata.pending_approvals
    }
    assert set(pending) == {"pay5", "pay7"}
    await workers.kill(first)  # no process holds the paused run

    # The storage answers without any worker alive.
    (waiting,) = await client.pending_runs("t1")
    assert waiting.trace_id == paused.metadata.trace_id
    assert workers.effects_lines() == ["note x"]

    await workers.start("w2", plan="pay")
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


async def test_resuming_twice_is_refused_by_the_worker_and_raised_here(
    workers: Workers, client: AgentCore
) -> None:
    await workers.start("w1", plan="pay")
    paused = await asyncio.wait_for(client.process(AgentProps("Pay both", "t1")), 60)
    decisions = {p.call_id: Deny("no") for p in paused.metadata.pending_approvals}
    await asyncio.wait_for(client.resume("t1", paused.metadata.trace_id, decisions), 60)
    with pytest.raises(NotAwaitingApprovalError):
        await asyncio.wait_for(client.resume("t1", paused.metadata.trace_id, decisions), 60)
    assert "pay 5" not in workers.effects_lines()


async def test_a_listener_on_the_shared_store_sees_the_run_a_worker_makes(
    engine_db: str, tmp_path: Path, pg_schema: str
) -> None:
    """With PostgreSQL as the agent's store, `observations.listen()` in the submitting process
    gets what the worker records, as the run goes."""
    url = require_postgres()
    storage = f"{url}?schema={pg_schema}"
    pool = Workers(engine_db, storage, tmp_path / "effects.log")
    engine = DBOSEngine(engine_db, poll_interval_s=0.05)
    client = create_agent(provider=ScriptedProvider([]), storage=storage, engine=engine)
    seen: list[ObservationType] = []
    try:
        await pool.start("w1", slow_s=0.2)
        async with client:
            stop = await client.observations.listen(lambda o: seen.append(o.type), thread_id="t1")
            result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)
            await wait_until(lambda: ObservationType.FINAL_RESPONSE in seen, "the answer")
            stop()
    finally:
        await pool.stop_all()
        await engine.aclose()
    assert result.metadata.status == "success", result.metadata.error
    assert seen.count(ObservationType.TOOL_EXECUTION) == 4
    assert seen.index(ObservationType.PLAN) < seen.index(ObservationType.TOOL_EXECUTION)


async def test_a_run_cancelled_from_another_process_stops_and_its_caller_gets_cancelled(
    workers: Workers, client: AgentCore
) -> None:
    """engine.cancel(trace_id) from another client (as another server process would) stops
    the run on its worker, and the submitting caller's process() answers `cancelled`."""
    await workers.start("w1", slow_s=4.0)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1", trace_id="tr-1")))
    await workers.wait_for_effect("slow-start b")
    elsewhere = DBOSEngine(workers.engine_db, poll_interval_s=0.05)
    try:
        found = await elsewhere.find("tr-1")
        assert found is not None
        assert (found.thread_id, found.status, found.running) == ("t1", "running", True)
        assert await elsewhere.running("t1") == [found]
        assert await elsewhere.running("t2") == []
        assert await elsewhere.find("no-such-run") is None
        assert await elsewhere.cancel("no-such-run") is None

        cancelled = await elsewhere.cancel("tr-1")
        assert cancelled is not None
        assert cancelled.running

        result = await asyncio.wait_for(run, 30)
        assert result.metadata.status == "cancelled"
        assert result.metadata.trace_id == "tr-1"
        after = await elsewhere.find("tr-1")
        assert after is not None
        assert after.status == "cancelled"
        # A run that ended is left alone, and said to have ended.
        again = await elsewhere.cancel("tr-1")
        assert again is not None
        assert not again.running
        assert await elsewhere.running("t1") == []
        # The worker records the cancellation as an in-process run does (as it stops the
        # run): the console and the thread's run list say `cancelled`, not `unfinished`.

        async def recorded() -> bool:
            errors = await client.observations.get_observations("t1", types=[ObservationType.ERROR])
            return [(o.trace_id, o.content["phase"]) for o in errors] == [("tr-1", "cancelled")]

        await wait_until(recorded, "the worker to record the run's cancellation")
    finally:
        await elsewhere.aclose()
    await asyncio.sleep(5.0)  # past the time the slow tool would have finished
    assert "slow-done b" not in workers.effects_lines()
    assert await client.conversation.get_messages("t1") == []


async def test_find_gives_a_finished_runs_response_status(
    workers: Workers, client: AgentCore
) -> None:
    """A run that ended is found with its response's status, not DBOS's SUCCESS."""
    await workers.start("w1", slow_s=0.1)
    result = await asyncio.wait_for(
        client.process(AgentProps("Take notes", "t1", trace_id="tr-2")), 60
    )
    assert result.metadata.status == "success"
    engine = client.engine
    assert isinstance(engine, DBOSEngine)
    found = await engine.find("tr-2")
    assert found is not None
    assert (found.status, found.thread_id, found.worker_id) == ("success", "t1", "w1")


async def test_an_in_run_approval_is_a_step_the_worker_taking_over_does_not_ask_again(
    workers: Workers, client: AgentCore
) -> None:
    """The approval_handler's decisions are steps: the worker that takes a run over after a
    SIGKILL gets them from the record (its own handler, which would decide the other way, is
    not asked), so the approved slow call finishes there and the denied payment never runs."""
    first = await workers.start("w1", plan="ask", slow_s=2.0, env={"PES_TEST_APPROVE": "slow_note"})
    run = asyncio.create_task(client.process(AgentProps("Note and pay", "t1")))
    await workers.wait_for_effect("slow-start b")
    await finished_calls(client, "t1", 1)  # the payment, denied (recorded after its decision)
    await kept_steps(workers, client, "t1", "pes_agent.approval", 2)  # both decisions held
    await workers.kill(first)
    assert "slow-done b" not in workers.effects_lines()

    await workers.start("w1", plan="ask", slow_s=2.0, env={"PES_TEST_APPROVE": "pay"})
    result = await asyncio.wait_for(run, 90)

    assert result.metadata.status == "partial", result.metadata.error  # the denied payment
    effects = Counter(workers.effects_lines())
    assert (effects["asked slow_note"], effects["asked pay"]) == (1, 1), effects
    assert (effects["slow-start b"], effects["slow-done b"]) == (2, 1)
    assert effects["note B-after"] == 1
    assert effects["pay 7"] == 0
    decided = await client.observations.get_observations(
        "t1", types=[ObservationType.APPROVAL_DECIDED]
    )
    assert sorted((o.content["toolName"], o.content["decision"]) for o in decided) == [
        ("pay", "deny"),
        ("slow_note", "approve"),
    ]


async def _model_steps(engine_db: str, trace_id: str) -> list[tuple[str, bool]]:
    """The model steps DBOS recorded for the run `trace_id`: each one's name and whether it
    failed, in order."""
    dbos = await asyncio.to_thread(
        DBOSClient, system_database_url=engine_db, application_name="pes-agent"
    )
    try:
        steps = await dbos.list_workflow_steps_async(f"pes-agent-run-{trace_id}")
    finally:
        dbos.destroy()
    return [
        (step["function_name"], step["error"] is not None)
        for step in steps
        if step["function_name"].startswith("pes_agent.model.")
    ]


ONE_NOTE = plan_lines(plan_call(1, "note", text="a"), intent="one note")


async def test_a_model_call_failing_once_is_retried_by_its_provider_inside_one_step(
    workers: Workers, client: AgentCore
) -> None:
    """A transient failure (HTTP 503) is retried by the provider's own retry policy, inside
    the model step: DBOS records one successful planning step, and the run succeeds."""
    async with ModelServer() as server:
        server.script(Fault(503), Reply(ONE_NOTE), Reply("All done."))
        await workers.start("w1", env={"PES_TEST_MODEL_URL": server.openai_base_url})
        result = await asyncio.wait_for(
            client.process(AgentProps("Note it", "t1", trace_id="tr-retry")), 60
        )
        requests = len(server.requests)
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == "All done."
    assert requests == 3  # the failed attempt, the plan, the answer
    assert workers.effects_lines() == ["note a"]
    assert await _model_steps(workers.engine_db, "tr-retry") == [
        ("pes_agent.model.planning", False),
        ("pes_agent.model.synthesis", False),
    ]


async def test_a_refused_model_call_is_retried_neither_by_its_provider_nor_by_the_engine(
    workers: Workers, client: AgentCore
) -> None:
    """A refusal (the prompt too long for the model) is final: one request, one failed
    planning step, and the run ends `error` at once."""
    async with ModelServer() as server:
        server.script(Fault(400, code="context_length_exceeded"))
        await workers.start("w1", env={"PES_TEST_MODEL_URL": server.openai_base_url})
        result = await asyncio.wait_for(
            client.process(AgentProps("Note it", "t1", trace_id="tr-refused")), 60
        )
        requests = len(server.requests)
    assert result.metadata.status == "error"
    assert requests == 1
    assert workers.effects_lines() == []
    assert await _model_steps(workers.engine_db, "tr-refused") == [
        ("pes_agent.model.planning", True)
    ]


async def test_a_run_taken_over_after_a_sigkill_traces_each_step_once(
    workers: Workers, client: AgentCore, tmp_path: Path
) -> None:
    """OpenTelemetry on the workers (`pes_agent.otel.instrument`): the worker that takes a
    run over replays the steps the killed one had finished without emitting their spans
    again: one chat span per model step, one tool span per finished call, one run span."""
    spans = tmp_path / "spans.jsonl"
    env = {"PES_TEST_SPANS": str(spans)}
    first = await workers.start("w1", slow_s=2.0, env=env)
    run = asyncio.create_task(client.process(AgentProps("Take notes", "t1")))
    await workers.wait_for_effect("slow-start b")
    await finished_calls(client, "t1", 2)
    await kept_steps(workers, client, "t1", "pes_agent.tool.", 2)  # both held by the engine
    await workers.kill(first)
    await workers.start("w1", slow_s=2.0, env=env)
    result = await asyncio.wait_for(run, 90)
    assert result.metadata.status == "success", result.metadata.error

    await check_spans_of_a_taken_over_run(spans)


# An answer of many tokens (16 characters each), longer than a NOTIFY payload, with text JSON
# must escape and characters UTF-8 writes in several bytes.
LONG_ANSWER = "\n".join(f'Line {n}: "quoted" \\ back, tab\t, été ✓ 日本語.' for n in range(600))


@pytest.fixture
async def shared_storage(engine_db: str, tmp_path: Path) -> AsyncIterator[str]:
    """The agent's storage, of the engine database's kind: a SQLite file beside a SQLite
    engine, a fresh PostgreSQL schema beside a PostgreSQL one."""
    if engine_db.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'agent.db'}"
        return
    schema = f"pes_test_{uuid.uuid4().hex[:16]}"
    yield f"{require_postgres()}?schema={schema}"
    await drop_schema(schema)


async def test_a_subscriber_of_the_submitting_agent_gets_the_tokens_a_worker_streams(
    engine_db: str, shared_storage: str, tmp_path: Path
) -> None:
    """Tokens reach subscribers through the store's feed: a stream subscriber on the
    submitting agent gets the synthesis tokens the worker in another process streams, in
    order and all of them before process() returns, joined equal to the answer."""
    pool = Workers(engine_db, shared_storage, tmp_path / "effects.log")
    engine = DBOSEngine(engine_db, poll_interval_s=0.05)
    client = create_agent(provider=ScriptedProvider([]), storage=shared_storage, engine=engine)
    tokens: list[str] = []
    kinds: list[str] = []

    def on_event(event: StreamEvent) -> None:
        kinds.append(event.kind)
        if event.kind == "token":
            tokens.append(event.text)

    try:
        await pool.start("w1", slow_s=0.1, env={"PES_TEST_ANSWER": LONG_ANSWER})
        async with client:
            stop = client.stream.subscribe(on_event, thread_id="t1", phases="synthesis")
            result = await asyncio.wait_for(client.process(AgentProps("Take notes", "t1")), 60)
            stop()
    finally:
        await pool.stop_all()
        await engine.aclose()
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == LONG_ANSWER
    assert "".join(tokens) == LONG_ANSWER
    assert kinds[-1] == "end"


async def test_the_server_streams_the_tokens_of_a_run_a_worker_executes(
    engine_db: str, shared_storage: str, tmp_path: Path
) -> None:
    """`pes-agent serve --engine`: a run requested as an event stream gets the worker's
    synthesis tokens (from the store's feed), joined equal to the answer, then `final`."""
    pool = Workers(engine_db, shared_storage, tmp_path / "effects.log")
    engine = DBOSEngine(engine_db, poll_interval_s=0.05)
    agent = create_agent(provider=ScriptedProvider([]), storage=shared_storage, engine=engine)
    try:
        await pool.start("w1", slow_s=0.1, env={"PES_TEST_ANSWER": LONG_ANSWER})
        async with (
            agent,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(agent)), base_url="http://api"
            ) as http,
        ):
            answered = await asyncio.wait_for(
                http.post(
                    "/v1/threads/t1/runs",
                    json={"query": "Take notes"},
                    headers={"Accept": "text/event-stream"},
                ),
                60,
            )
    finally:
        await pool.stop_all()
        await engine.aclose()
    events = [line[7:] for line in answered.text.splitlines() if line.startswith("event: ")]
    data = [json.loads(line[6:]) for line in answered.text.splitlines() if line[:6] == "data: "]
    assert events[-1] == "final"
    assert data[-1]["response"]["content"] == LONG_ANSWER
    tokens = [d["text"] for d in data if d.get("kind") == "token" and d["phase"] == "synthesis"]
    assert "".join(tokens) == LONG_ANSWER
    assert events.count("TOOL_EXECUTION") == 4  # the observations, from the store, once each


async def test_a_replay_reads_the_thread_from_the_record_and_saves_the_turn_once(
    engine_db: str, tmp_path: Path
) -> None:
    """A run's steps are its model and tool calls (the thread's load is kept in the planning
    call's record; the commit is no step: the store writes a trace's turn once). A replay of
    the run from its first call (DBOS's fork, `dbos_replay.py`) plans nothing again, loads the
    thread as the run first did (not with the system prompt changed since), redoes the calls
    after the fork point and saves no second turn."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.pes_agent.durable.dbos_replay",
        engine_db,
        f"sqlite:///{tmp_path / 'agent.db'}",
        "replayer",
        str(tmp_path / "effects.log"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PES_TEST_SLOW_S": "0.05"},
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["steps"] == [
        "pes_agent.model.planning",
        "pes_agent.tool.note",
        "pes_agent.tool.slow_note",
        "pes_agent.tool.note",
        "pes_agent.tool.note",
        "pes_agent.model.synthesis",
    ]
    assert seen["statuses"] == ["success", "success"]
    assert seen["replayed_phases"] == ["synthesis"]
    assert "Changed since." not in seen["replayed_prompt"]
    assert "helpful, precise assistant" in seen["replayed_prompt"]
    assert seen["messages"] == ["Take notes", "All done."]
