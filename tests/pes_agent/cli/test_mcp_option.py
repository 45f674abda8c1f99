"""`pes-agent run --mcp "COMMAND"`: an MCP server's tools in a run from the command line."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .helpers import REPO, cli_env, run_cli, run_cli_async

pytest.importorskip("mcp")
pytestmark = pytest.mark.slow  # each test runs the command in a subprocess

SERVER = REPO / "examples" / "mcp_server.py"
PLAN = json.dumps(
    {
        "intent": "price",
        "plan": "1. ask the shop",
        "toolCalls": [{"callId": "c1", "toolName": "unit_price", "arguments": {"item": "gadget"}}],
    }
)


async def test_run_mcp_calls_the_server_tool_and_lists_it_to_the_model(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """--mcp starts the server, its tool is in the planning request and its result is used."""
    env = cli_env(tmp_path)
    env.update(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=model_server.openai_base_url)
    model_server.script(Reply(PLAN), Reply("A gadget costs 12 euros."))
    command = shlex.join([sys.executable, str(SERVER), "--stdio"])
    result = await run_cli_async(
        "run", "What does a gadget cost?", "--provider", "openai:test-model",
        "--db", str(tmp_path / "agent.db"), "--thread", "m", "--mcp", command, "--json",
        env=env,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.json()["metadata"]["status"] == "success"
    assert "unit_price" in json.dumps(model_server.requests[0].body)
    assert "12.0" in json.dumps(model_server.requests[1].body)


def test_run_mcp_with_a_missing_command_is_a_configuration_error(tmp_path: Path) -> None:
    """A server that cannot start is a one-line exit-2 error naming it, without a traceback."""
    result = run_cli(
        "run", "hi", "--provider", "openai:test-model", "--db", str(tmp_path / "a.db"),
        "--mcp", "pes-no-such-server --flag", env={**cli_env(tmp_path), "OPENAI_API_KEY": "k"},
    )  # fmt: skip
    assert result.code == 2, result.stderr
    assert "--mcp" in result.stderr
    assert "not found" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_run_paused_on_an_mcp_tool_is_resumed_by_approve_with_the_same_mcp(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """`run --mcp ... --no-input` pauses before the gated MCP call and prints an approve command
    carrying --mcp; `approve` without it names the missing tool, the printed one finishes."""
    env = cli_env(tmp_path)
    env.update(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=model_server.openai_base_url)
    model_server.script(Reply(PLAN), Reply("A gadget costs 12 euros."))
    command = shlex.join([sys.executable, str(SERVER), "--stdio"])
    db = str(tmp_path / "agent.db")
    paused = await run_cli_async(
        "run", "What does a gadget cost?", "--provider", "openai:test-model", "--db", db,
        "--thread", "m", "--mcp", command, "--require-approval", "unit_price", "--no-input",
        env=env,
    )  # fmt: skip
    assert paused.code == 4, paused.stderr
    line = next(x for x in paused.stdout.splitlines() if x.startswith("approve them all:"))
    approve = shlex.split(line.removeprefix("approve them all:"))[1:]
    assert approve[approve.index("--mcp") + 1] == command

    without = await run_cli_async(
        "approve", "m", "--provider", "openai:test-model", "--db", db, env=env
    )
    assert without.code == 2
    assert "unit_price" in without.stderr
    assert "--mcp" in without.stderr

    done = await run_cli_async(*approve, env=env)
    assert done.code == 0, done.stderr
    assert "A gadget costs 12 euros." in done.stdout
    assert "12.0" in json.dumps(model_server.requests[1].body)
