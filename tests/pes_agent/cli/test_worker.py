"""`pes-agent worker --engine URL` and `pes-agent run --engine URL`: real processes, DBOS on a
SQLite file, the loopback model server answering the worker's model calls."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pes_agent.cli.cli_tools import ANSWER, PLAN
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .helpers import REPO, cli_command, cli_env, run_cli, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in subprocesses

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"


@dataclass
class Setup:
    """One engine database, one agent store, and the environment of every process."""

    engine: str
    db: str
    env: dict[str, str]


@pytest.fixture
def setup(tmp_path: Path, model_server: ModelServer) -> Setup:
    env = cli_env(
        tmp_path,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        PYTHONPATH=str(REPO),
        PES_AGENT_DEBUG="1",
    )
    return Setup(f"dbos+sqlite:///{tmp_path / 'engine.sqlite'}", str(tmp_path / "agent.db"), env)


def _text(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


@asynccontextmanager
async def worker(
    setup: Setup, *args: str, log: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`pes-agent worker` on the setup's engine and store, once it said it is ready; yields
    the process and its ready line. Killed afterwards if still running."""
    with log.open("wb") as stderr:  # a file: a chatty worker never blocks on a pipe
        process = await asyncio.create_subprocess_exec(
            *cli_command(),
            "worker",
            "--engine",
            setup.engine,
            "--db",
            setup.db,
            *args,
            env=setup.env,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 90)).decode()
        assert "ready" in line, f"{line!r} {_text(log)[-3000:]}"
        yield process, line
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def stop(process: asyncio.subprocess.Process, number: signal.Signals) -> int:
    process.send_signal(number)
    return await asyncio.wait_for(process.wait(), 30)


async def test_a_run_submitted_with_engine_is_run_by_the_worker(
    setup: Setup, model_server: ModelServer, tmp_path: Path
) -> None:
    """`run --engine --json` gets the answer a worker process produced (its model calls and
    tools), the thread is saved in the shared store, and the worker exits 0 on SIGTERM."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    async with worker(
        setup,
        "--provider",
        "openai:test-model",
        "--tools",
        TOOLS,
        "--worker-id",
        "w1",
        log=tmp_path / "worker.log",
    ) as (process, ready):
        assert "w1" in ready
        assert "get_weather" in ready
        assert "multiply" in ready
        result = await run_cli_async(
            "run",
            "Weather in Paris, and 12*7?",
            "--provider",
            "openai:test-model",
            "--engine",
            setup.engine,
            "--db",
            setup.db,
            "--thread",
            "t1",
            "--json",
            env=setup.env,
            within_s=90,
        )
        assert result.code == 0, result.stderr
        body = json.loads(result.stdout)
        assert body["response"]["content"] == ANSWER
        assert body["metadata"]["status"] == "success"
        assert body["metadata"]["tool_calls"] == 2
        # The worker called the model (the submitting command never did).
        assert len(model_server.requests) == 2
        assert await stop(process, signal.SIGTERM) == 0
    history = run_cli("history", "t1", "--db", setup.db, "--json", env=setup.env)
    assert history.code == 0, history.stderr
    assert [m["content"] for m in history.json()] == ["Weather in Paris, and 12*7?", ANSWER]


async def test_the_run_view_shows_the_workers_steps_from_the_store(
    setup: Setup, model_server: ModelServer, tmp_path: Path
) -> None:
    """Without --json, `run --engine` shows the plan, the tool calls and the answer the
    worker recorded, read from the shared store; the worker stops on SIGINT with 0 too."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    async with worker(
        setup, "--provider", "openai:test-model", "--tools", TOOLS, log=tmp_path / "worker.log"
    ) as (process, _):
        result = await run_cli_async(
            "run",
            "Weather in Paris, and 12*7?",
            "--provider",
            "openai:test-model",
            "--engine",
            setup.engine,
            "--db",
            setup.db,
            "--thread",
            "t1",
            env=setup.env,
            within_s=90,
        )
        assert result.code == 0, result.stderr
        out = result.stdout
        assert "plan: Weather and arithmetic" in out
        assert '▶ call_1 get_weather {"city": "Paris"}' in out
        assert "✓ call_2 multiply in" in out
        assert "→ 84" in out
        assert ANSWER in out
        assert await stop(process, signal.SIGINT) == 0


async def test_a_bad_engine_url_is_a_usage_error(setup: Setup) -> None:
    """An unknown engine URL, a missing extra and --task-queue off Temporal, for worker, run and
    serve: one line, exit 2."""
    bogus = run_cli("worker", "--engine", "bogus://x", "--demo", "--db", setup.db, env=setup.env)
    assert bogus.code == 2
    assert bogus.stderr.startswith("pes-agent: error: --engine: unknown engine URL 'bogus://x'")
    assert "dbos+sqlite:///PATH" in bogus.stderr
    assert len(bogus.stderr.splitlines()) == 1

    temporal = run_cli(
        "worker", "--engine", "temporal://127.0.0.1:1", "--demo", "--db", setup.db, env=setup.env
    )
    assert temporal.code == 2
    assert "cannot reach the Temporal server at 127.0.0.1:1" in temporal.stderr
    assert len(temporal.stderr.splitlines()) == 1

    queue = run_cli(
        "worker",
        "--engine",
        setup.engine,
        "--task-queue",
        "q",
        "--demo",
        "--db",
        setup.db,
        env=setup.env,
    )
    assert queue.code == 2
    assert "--task-queue is for temporal:// engines only" in queue.stderr

    run = run_cli("run", "hi", "--engine", "dbos+mysql://x", "--db", setup.db, env=setup.env)
    assert run.code == 2
    assert "--engine: DBOSEngine needs its database" in run.stderr

    serve = run_cli("serve", "--demo", "--engine", "bogus://x", "--db", setup.db, env=setup.env)
    assert serve.code == 2
    assert serve.stderr.startswith("pes-agent: error: --engine: unknown engine URL")
