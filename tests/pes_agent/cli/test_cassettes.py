"""`pes-agent run --record FILE` writes a real run's model calls; `--replay FILE` answers from
them offline, with no API key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pes_agent.cli.cli_tools import ANSWER, PLAN
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .helpers import cli_env, run_cli, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"
QUERY = "Weather in Paris, and 12*7?"


async def _record(server: ModelServer, tmp_path: Path, cassette: Path) -> None:
    """A real run through the OpenAI SDK on the loopback server, recorded to `cassette`."""
    server.script(Reply(PLAN), Reply(ANSWER))
    env = cli_env(tmp_path, OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=server.openai_base_url)
    result = await run_cli_async(
        "run",
        QUERY,
        "--provider",
        "openai:test-model",
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "recorded.db"),
        "--record",
        str(cassette),
        env=env,
    )
    assert result.code == 0, result.stderr
    assert ANSWER in result.stdout
    assert f"recording to {cassette}" in result.stdout
    assert len(server.requests) == 2


async def test_a_recorded_run_replays_offline_with_no_key(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """--record writes both model calls (and no key); with the server gone and no key set,
    --replay gives the same answer and exits 0."""
    cassette = tmp_path / "cassettes" / "paris.jsonl"
    await _record(model_server, tmp_path, cassette)
    text = cassette.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2, "one line per model call, the file complete"
    assert API_KEY not in text
    await model_server.aclose()

    result = await run_cli_async(
        "run",
        QUERY,
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "replayed.db"),
        "--replay",
        str(cassette),
        "--json",
        env=cli_env(tmp_path),  # no OPENAI_API_KEY, no base URL
    )
    assert result.code == 0, result.stderr
    response = result.json()
    assert response["response"]["content"] == ANSWER
    assert response["metadata"]["status"] == "success"


async def test_replay_of_another_query_fails_showing_the_difference(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A query the cassette does not hold fails the run (exit 1) and says why: the cassette
    misses it, with the recorded query beside the new one."""
    cassette = tmp_path / "paris.jsonl"
    await _record(model_server, tmp_path, cassette)

    result = await run_cli_async(
        "run",
        "Weather in Rome, and 12*7?",
        "--tools",
        TOOLS,
        "--db",
        str(tmp_path / "replayed.db"),
        "--replay",
        str(cassette),
        env=cli_env(tmp_path),
    )
    assert result.code == 1, result.stderr
    assert "the run failed" in result.stderr
    assert f"the cassette {cassette} holds no planning request like this one" in result.stderr
    assert "Weather in Rome" in result.stderr
    assert "Weather in Paris" in result.stderr
    assert "--record" in result.stderr


def test_replay_of_a_missing_cassette_says_how_to_record_it(tmp_path: Path) -> None:
    """--replay of a file that does not exist is a usage error (exit 2) naming the command
    that records it."""
    cassette = tmp_path / "nothing.jsonl"
    result = run_cli("run", QUERY, "--replay", str(cassette), env=cli_env(tmp_path))
    assert result.code == 2
    assert result.stderr.count("\n") == 1, "one line"
    assert f"--replay {cassette}: the cassette does not exist" in result.stderr
    assert f"pes-agent run QUERY --record {cassette}" in result.stderr
    assert result.stdout == ""


def test_replay_of_a_damaged_cassette_is_a_usage_error(tmp_path: Path) -> None:
    """A cassette that is not JSON lines is refused before the run (exit 2), with the line."""
    cassette = tmp_path / "damaged.jsonl"
    cassette.write_text("not json\n", encoding="utf-8")
    result = run_cli("run", QUERY, "--replay", str(cassette), env=cli_env(tmp_path))
    assert result.code == 2
    assert "is damaged at line 1" in result.stderr
    assert f"--record {cassette}" in result.stderr


@pytest.mark.parametrize("option", ["--record", "--replay"])
def test_a_cassette_cannot_go_with_an_engine(tmp_path: Path, option: str) -> None:
    """--record and --replay with --engine are refused (exit 2): a worker makes those calls."""
    cassette = tmp_path / "run.jsonl"
    cassette.write_text("", encoding="utf-8")
    result = run_cli(
        "run",
        QUERY,
        option,
        str(cassette),
        "--engine",
        f"dbos+sqlite:///{tmp_path / 'engine.db'}",
        env=cli_env(tmp_path, OPENAI_API_KEY=API_KEY),
    )
    assert result.code == 2
    assert f"{option} cannot go with --engine" in result.stderr


def test_record_and_replay_exclude_each_other(tmp_path: Path) -> None:
    """Both options at once are a usage error."""
    result = run_cli(
        "run", QUERY, "--record", "a.jsonl", "--replay", "b.jsonl", env=cli_env(tmp_path)
    )
    assert result.code == 2
    assert "not allowed with argument" in result.stderr


def test_record_without_a_key_says_which_to_set(tmp_path: Path) -> None:
    """--record builds the real provider, so a missing key is the usual one-line hint."""
    result = run_cli(
        "run",
        QUERY,
        "--provider",
        "openai:test-model",
        "--record",
        str(tmp_path / "run.jsonl"),
        env=cli_env(tmp_path),
    )
    assert result.code == 2
    assert "set OPENAI_API_KEY" in result.stderr
