"""`pes-agent serve --engine URL`: two server processes submit runs to a DBOS engine (a SQLite
file) whose `pes-agent worker` process runs them; cancelling and following a run from the
server process that did not start it go through the engine and the shared store."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.pes_agent.cli.helpers import REPO, cli_command, cli_env
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .sse import SSEStream
from .test_sse_uvicorn import free_port

pytestmark = pytest.mark.slow

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"
ANSWER = "12 × 7 = 84."


def _plan(*calls: dict[str, object]) -> str:
    return json.dumps({"intent": "test", "plan": "1. go", "toolCalls": list(calls)})


MULTIPLY = _plan({"callId": "call_1", "toolName": "multiply", "arguments": {"a": 12, "b": 7}})
SLOW = _plan({"callId": "call_1", "toolName": "slow", "arguments": {"seconds": 60}})


@pytest.fixture
async def model() -> AsyncIterator[ModelServer]:
    """The loopback model server the worker's model calls go to."""
    async with ModelServer() as server:
        yield server


@asynccontextmanager
async def process(
    args: list[str], env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`pes-agent ARGS` with its output in `log`, killed at the end if still running."""
    with log.open("wb") as out:
        started = await asyncio.create_subprocess_exec(
            *cli_command(), *args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield started
    finally:
        if started.returncode is None:
            started.kill()
            await started.wait()


def _text(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


async def until_up(url: str, server: asyncio.subprocess.Process, log: Path) -> None:
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(300):
            try:
                await client.get(f"{url}/openapi.json")
                return
            except httpx.TransportError:
                assert server.returncode is None, _text(log)
                await asyncio.sleep(0.1)
    pytest.fail(f"the server never started:\n{_text(log)}")


async def until_ready(log: Path, worker: asyncio.subprocess.Process) -> None:
    for _ in range(600):
        if "ready on" in _text(log):
            return
        assert worker.returncode is None, _text(log)
        await asyncio.sleep(0.1)
    pytest.fail(f"the worker never got ready:\n{_text(log)}")


async def test_runs_through_two_servers_go_to_the_worker_and_cancel_from_either(
    model: ModelServer, tmp_path: Path
) -> None:
    """A run posted to server A completes on the worker (A's agent has no model of its own to
    call); a slow run posted to A is followed from server B (its tool call, then `end`) and
    cancelled through B: B answers 202, A's request answers `cancelled` long before the
    tool would have finished, and the worker exits 0 on SIGTERM."""
    env = cli_env(
        tmp_path,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=model.openai_base_url,
        PYTHONPATH=str(REPO),
    )
    shared = ["--engine", f"dbos+sqlite:///{tmp_path / 'engine.sqlite'}"]
    shared += ["--db", str(tmp_path / "agent.db"), "--provider", "openai:test-model"]
    shared += ["--tools", TOOLS]
    ports = free_port(), free_port()
    a, b = (f"http://127.0.0.1:{port}" for port in ports)
    logs = [tmp_path / name for name in ("worker.log", "a.log", "b.log")]
    async with (
        process(["worker", *shared, "--worker-id", "w1"], env, logs[0]) as worker,
        process(["serve", *shared, "--port", str(ports[0])], env, logs[1]) as server_a,
        process(["serve", *shared, "--port", str(ports[1])], env, logs[2]) as server_b,
        httpx.AsyncClient(timeout=90) as client,
    ):
        await until_ready(logs[0], worker)
        await until_up(a, server_a, logs[1])
        await until_up(b, server_b, logs[2])

        model.script(Reply(MULTIPLY), Reply(ANSWER))
        done = await client.post(f"{a}/v1/threads/t1/runs", json={"query": "12*7?"})
        assert done.status_code == 200, done.text
        assert done.json()["response"]["content"] == ANSWER
        assert done.json()["metadata"]["tool_calls"] == 1
        assert len(model.requests) == 2  # made by the worker

        model.script(Reply(SLOW), Reply("never"))
        slow = asyncio.create_task(
            client.post(f"{a}/v1/threads/t2/runs", json={"query": "wait", "trace_id": "tr-slow"})
        )
        # Server B follows the run A submitted: the worker's observations, through the store.
        async with client.stream(
            "GET",
            f"{b}/v1/runs/tr-slow/events",
            headers={"Accept": "text/event-stream"},
        ) as followed:
            for _ in range(100):
                if followed.status_code == 200:
                    break
                await asyncio.sleep(0.1)  # (A may not have submitted it yet: 404)
            assert followed.status_code == 200, await followed.aread()
            stream = SSEStream(followed)
            head = await stream.read(lambda event: event.name == "TOOL_CALL")
            assert head[0].name == "run"
            assert head[-1].data["content"]["callId"] == "call_1"

            started = asyncio.get_running_loop().time()
            cancelled = await client.post(f"{b}/v1/runs/tr-slow/cancel")
            assert cancelled.status_code == 202, cancelled.text
            assert cancelled.json()["pending"] is True
            assert cancelled.json()["thread_id"] == "t2"
            assert cancelled.json()["worker_id"] == "w1"  # the engine's worker that ran it

            answered = await asyncio.wait_for(slow, 30)
            assert answered.status_code == 200, answered.text
            assert answered.json()["metadata"]["status"] == "cancelled"
            assert asyncio.get_running_loop().time() - started < 30  # not the tool's 60 s

            rest = await stream.read(lambda event: event.name == "end", within_s=30)
            assert rest[-1].name == "end"
            assert rest[-1].data["status"] == "cancelled"

        again = await client.post(f"{b}/v1/runs/tr-slow/cancel")
        assert again.status_code == 409  # it ended
        unknown = await client.post(f"{b}/v1/runs/no-such-run/cancel")
        assert unknown.status_code == 404
        messages = await client.get(f"{b}/v1/threads/t2/messages")
        assert messages.json()["messages"] == []  # a cancelled run saves no turn

        # A run neither server submitted (`pes-agent run --engine`): B lists it as running
        # and will not delete its thread, as the engine knows it; cancelled through B, the
        # CLI's run ends `cancelled` and B lists it so.
        model.clear()  # the answer of the run cancelled above was never asked for
        model.script(Reply(SLOW), Reply("never"))
        run_log = tmp_path / "run.log"
        async with process(
            ["run", *shared, "--thread", "t3", "--json", "wait"], env, run_log
        ) as cli:
            trace_id = await _running_run(client, f"{b}/v1/threads/t3/runs", cli, run_log)
            refused = await client.delete(f"{b}/v1/threads/t3")
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["type"] == "run_in_progress"
            cancelled = await client.post(f"{b}/v1/runs/{trace_id}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            await asyncio.wait_for(cli.wait(), 30)
        printed = _text(run_log)
        answer = json.loads(printed[printed.index("{") :])  # after any warning on stderr
        assert answer["metadata"]["status"] == "cancelled", printed
        for _ in range(100):  # the worker records the cancellation as it stops the run
            listed = (await client.get(f"{b}/v1/threads/t3/runs")).json()["runs"]
            if listed[-1]["status"] not in ("running", "unfinished"):
                break
            await asyncio.sleep(0.1)
        assert [(r["trace_id"], r["status"]) for r in listed] == [(trace_id, "cancelled")]
        deleted = await client.delete(f"{b}/v1/threads/t3")
        assert deleted.status_code == 204, deleted.text

        worker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), 30) == 0


async def _running_run(
    client: httpx.AsyncClient, url: str, cli: asyncio.subprocess.Process, log: Path
) -> str:
    """The trace id of the one run `url` (a thread's run list) lists as running, once it
    does."""
    for _ in range(300):
        runs = (await client.get(url)).json()["runs"]
        if runs and runs[-1]["status"] == "running":
            assert len(runs) == 1, runs
            return str(runs[0]["trace_id"])
        assert cli.returncode is None, _text(log)
        await asyncio.sleep(0.1)
    pytest.fail(f"the run was never listed as running: {runs}")
