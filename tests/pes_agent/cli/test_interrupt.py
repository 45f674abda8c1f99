"""Ctrl-C during `pes-agent run`: the run is cancelled cleanly, with exit code 130."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .helpers import REPO, cli_command, cli_env, lines, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess


async def test_sigint_during_a_slow_tool_exits_130_without_a_traceback(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """SIGINT while a tool runs stops the run at once: exit 130, one stderr line, the run's
    cancellation recorded in the store."""
    plan = {
        "intent": "wait",
        "plan": "1. wait",
        "toolCalls": [{"callId": "c1", "toolName": "slow", "arguments": {"seconds": 60}}],
    }
    model_server.script(Reply(json.dumps(plan)), Reply("never asked"))
    db = tmp_path / "run.db"
    env = cli_env(tmp_path, OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=model_server.openai_base_url)
    process = await asyncio.create_subprocess_exec(
        *cli_command(),
        "run",
        "wait a minute",
        "-p",
        "openai:test-model",
        "--tools",
        "tests.pes_agent.cli.cli_tools:slow",
        "--db",
        str(db),
        "--thread",
        "slow",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=REPO,
        # A test runner may start us with SIGINT ignored; the child must get the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout is not None
    assert process.stderr is not None
    seen: list[str] = []

    async def wait_for_the_tool() -> None:
        assert process.stdout is not None
        while True:
            line = (await process.stdout.readline()).decode()
            assert line, "the command ended before the tool started: " + "".join(seen)
            seen.append(line)
            if "▶ c1 slow" in line:
                return

    try:
        await asyncio.wait_for(wait_for_the_tool(), 30)
        started = asyncio.get_running_loop().time()
        process.send_signal(signal.SIGINT)
        rest, stderr = await asyncio.wait_for(process.communicate(), 30)
        took = asyncio.get_running_loop().time() - started
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 130
    assert took < 10, "the 60 s tool must be cancelled, not awaited"
    err = stderr.decode()
    assert "Traceback" not in err
    assert lines(err) == ["pes-agent: interrupted: the run was cancelled"]
    assert "cancelled" in rest.decode()
    assert len(model_server.requests) == 1, "synthesis must not run after the cancel"

    errors = await run_cli_async(
        "observations", "slow", "--type", "ERROR", "--json", "--db", str(db), env=env
    )
    assert errors.code == 0, errors.stderr
    assert [o["content"]["phase"] for o in errors.json()] == ["cancelled"]
