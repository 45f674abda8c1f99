"""`pes-agent run` against the loopback model server, with tools imported by `--tools`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pes_agent.cli.cli_tools import ANSWER, PLAN
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import Fault, ModelServer, Reply

from .helpers import cli_env, lines, run_cli, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"


def _env(tmp_path: Path, server: ModelServer) -> dict[str, str]:
    return cli_env(tmp_path, OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=server.openai_base_url)


def _plan(*calls: dict[str, object]) -> str:
    return json.dumps({"intent": "test", "plan": "1. go", "toolCalls": list(calls)})


async def test_run_shows_the_tool_calls_and_the_answer(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A run on the model server with module tools exits 0 showing both calls and the answer."""
    model_server.script(Reply(PLAN, thinking="Two independent calls."), Reply(ANSWER))
    result = await run_cli_async(
        "run",
        "Weather in Paris, and 12*7?",
        "--provider",
        "openai:test-model",
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "run.db"),
        "--thread",
        "t1",
        env=_env(tmp_path, model_server),
    )
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert "openai:test-model" in out
    assert "thinking: Two independent calls." in out
    assert '▶ call_1 get_weather {"city": "Paris"}' in out
    assert "✓ call_2 multiply in" in out
    assert "→ 84" in out
    assert ANSWER in out
    assert "--thread t1" in out
    assert len(model_server.requests) == 2
    planning_prompt = json.dumps(model_server.requests[0].body)
    assert "get_weather" in planning_prompt
    assert "raw_html" in planning_prompt


async def test_run_json_prints_the_final_response_and_metadata(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """`run --json` prints AgentFinalResponse as JSON and nothing else on stdout."""
    model_server.script(Reply(PLAN, input_tokens=50), Reply(ANSWER, input_tokens=70))
    result = await run_cli_async(
        "run",
        "Weather in Paris, and 12*7?",
        "--provider",
        "openai:test-model",
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "run.db"),
        "--thread",
        "t-json",
        "--system",
        "You are terse.",
        "--json",
        env=_env(tmp_path, model_server),
    )
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["response"]["content"] == ANSWER
    assert data["response"]["thread_id"] == "t-json"
    meta = data["metadata"]
    assert (meta["status"], meta["tool_calls"], meta["llm_calls"]) == ("success", 2, 2)
    assert meta["usage"]["input_tokens"] == 120
    system = model_server.requests[0].body["messages"][0]
    assert system["role"] == "system"
    assert "You are terse." in system["content"]


async def test_base_url_flag_points_the_provider_at_a_server(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """`--base-url` reaches an OpenAI-compatible server without OPENAI_BASE_URL set."""
    model_server.script(Reply(_plan()), Reply("Hello from the server."))
    result = await run_cli_async(
        "run",
        "hello",
        "-p",
        "openai:served-model",
        "--base-url",
        model_server.openai_base_url,
        "--db",
        str(tmp_path / "run.db"),
        "--json",
        env=cli_env(tmp_path, OPENAI_API_KEY=API_KEY),
    )
    assert result.code == 0, result.stderr
    assert result.json()["response"]["content"] == "Hello from the server."
    assert model_server.requests[0].body["model"] == "served-model"


async def test_a_failed_tool_gives_partial_and_exit_code_3(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A tool that raises makes the run partial: exit code 3, the error shown."""
    model_server.script(
        Reply(_plan({"callId": "c1", "toolName": "fail", "arguments": {"reason": "disk on fire"}})),
        Reply("The tool failed."),
    )
    result = await run_cli_async(
        "run",
        "break it",
        "-p",
        "openai:test-model",
        "--tools",
        "tests.pes_agent.cli.cli_tools:fail",
        "--db",
        str(tmp_path / "run.db"),
        env=_env(tmp_path, model_server),
    )
    assert result.code == 3, result.stderr
    assert "✗ c1 fail failed:" in result.stdout
    assert "disk on fire" in result.stdout
    assert "partial" in result.stdout


async def test_a_failed_run_exits_1_with_one_line_and_no_key(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A provider that rejects the key ends the run with status error: exit 1, one stderr
    line, and the key appears nowhere."""
    model_server.script(Fault(401))
    result = await run_cli_async(
        "run",
        "hello",
        "-p",
        "openai:test-model",
        "--db",
        str(tmp_path / "run.db"),
        "--json",
        env=_env(tmp_path, model_server),
    )
    assert result.code == 1
    assert result.json()["metadata"]["status"] == "error"
    err = lines(result.stderr)
    assert len(err) == 1
    assert err[0].startswith("pes-agent: the run failed: planning failed")
    assert API_KEY not in result.stdout + result.stderr


def test_missing_openai_key_names_the_variable_and_the_demo(tmp_path: Path) -> None:
    """Without OPENAI_API_KEY, `run` prints one line naming it and `pes-agent demo`, exit 2."""
    result = run_cli("run", "hi", "--provider", "openai:gpt-4o-mini", env=cli_env(tmp_path))
    assert result.code == 2
    err = lines(result.stderr)
    assert len(err) == 1, result.stderr
    assert "OPENAI_API_KEY" in err[0]
    assert "pes-agent demo" in err[0]
    assert result.stdout == ""
    assert not (tmp_path / "data" / "pes-agent" / "agent.db").exists()


def test_missing_anthropic_key_names_its_variable(tmp_path: Path) -> None:
    """The hint names the key variable of the provider asked for."""
    result = run_cli("run", "hi", "-p", "anthropic:claude-sonnet-4-5", env=cli_env(tmp_path))
    assert result.code == 2
    assert "ANTHROPIC_API_KEY" in result.stderr
    assert "pes-agent demo" in result.stderr


def test_unknown_provider_is_one_line(tmp_path: Path) -> None:
    """A provider name the library does not know is a one-line usage error."""
    result = run_cli("run", "hi", "-p", "nosuch:model", env=cli_env(tmp_path))
    assert result.code == 2
    assert lines(result.stderr) == [lines(result.stderr)[0]]
    assert "unknown provider 'nosuch'" in result.stderr


def test_tools_module_that_does_not_exist_is_named(tmp_path: Path) -> None:
    """`--tools nosuchmod:x` fails with exit 2 naming the module."""
    env = cli_env(tmp_path, OPENAI_API_KEY="sk-unused")
    result = run_cli("run", "hi", "--tools", "nosuchmod_for_cli:x", env=env)
    assert result.code == 2
    assert lines(result.stderr) == [
        "pes-agent: error: --tools 'nosuchmod_for_cli:x': cannot import module "
        "'nosuchmod_for_cli': no module named 'nosuchmod_for_cli' "
        "(is it on PYTHONPATH or in the current directory?)"
    ]


def test_tools_attribute_that_does_not_exist_is_named(tmp_path: Path) -> None:
    """`--tools module:nope` fails with exit 2 naming the module and the attribute."""
    env = cli_env(tmp_path, OPENAI_API_KEY="sk-unused")
    result = run_cli("run", "hi", "--tools", "tests.pes_agent.cli.cli_tools:nope", env=env)
    assert result.code == 2
    assert lines(result.stderr) == [
        "pes-agent: error: --tools 'tests.pes_agent.cli.cli_tools:nope': "
        "'tests.pes_agent.cli.cli_tools' has no attribute 'nope'"
    ]


def test_tools_module_that_fails_to_import_shows_its_error(tmp_path: Path) -> None:
    """A module in the current directory that raises on import is named with its error."""
    (tmp_path / "broken_tools.py").write_text("raise RuntimeError('no config file')\n")
    env = cli_env(tmp_path, OPENAI_API_KEY="sk-unused")
    result = run_cli("run", "hi", "--tools", "broken_tools:TOOLS", env=env, cwd=tmp_path)
    assert result.code == 2
    assert lines(result.stderr) == [
        "pes-agent: error: --tools 'broken_tools:TOOLS': importing module 'broken_tools' "
        "failed: RuntimeError: no config file"
    ]


def test_tools_spec_without_a_colon_says_how_to_write_it(tmp_path: Path) -> None:
    """`--tools module` (no attribute) explains the MODULE:ATTRIBUTE form."""
    result = run_cli("run", "hi", "--tools", "mytools", env=cli_env(tmp_path))
    assert result.code == 2
    assert "write MODULE:ATTRIBUTE" in result.stderr


def test_a_bad_argument_is_one_line_pointing_at_help(tmp_path: Path) -> None:
    """An argparse error is one stderr line that points at --help, with exit 2."""
    result = run_cli("run", env=cli_env(tmp_path))
    assert result.code == 2
    assert lines(result.stderr) == [
        "pes-agent: error: the following arguments are required: QUERY (see `pes-agent run --help`)"
    ]


async def test_max_tool_calls_stops_the_run_with_exit_1_naming_the_limit(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """`--max-tool-calls 1` on a plan of two calls ends the run as an error (exit 1) whose
    one stderr line names the limit; no synthesis request reaches the server."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    result = await run_cli_async(
        "run",
        "Weather in Paris, and 12*7?",
        "-p",
        "openai:test-model",
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "run.db"),
        "--max-tool-calls",
        "1",
        "--max-requests",
        "5",
        "--max-tokens-total",
        "100000",
        "--json",
        env=_env(tmp_path, model_server),
    )
    assert result.code == 1, result.stderr
    metadata = result.json()["metadata"]
    assert metadata["error"] == (
        "usage limit reached: tool_calls: 1 used, limit 1; the run needs another tool call"
    )
    assert "tool_calls: 1 used, limit 1" in result.stderr
    assert len(model_server.requests) == 1


def test_a_max_option_that_is_not_a_count_is_a_usage_error(tmp_path: Path) -> None:
    """`--max-requests -1` is refused before anything runs: exit 2, the fix in one line."""
    result = run_cli("run", "hi", "--max-requests", "-1", env=cli_env(tmp_path))
    assert result.code == 2
    assert "--max-requests: expected a whole number of 0 or more, got '-1'" in result.stderr
