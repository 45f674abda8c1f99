"""The pytest plugin: `pytest --pes-record` records a test's model calls through the `cassette`
fixture, a plain `pytest` replays them offline, and a missing cassette says how to record it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pes_agent.testing.pytest_plugin import cassette_path
from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply, unused_port

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]
PLUGIN = "pes_agent.testing.pytest_plugin"
PLAN = json.dumps(
    {
        "intent": "a product",
        "plan": "1. multiply",
        "toolCalls": [
            {"callId": "call_1", "toolName": "multiply", "arguments": {"a": 12, "b": 7}},
        ],
    }
)
ANSWER = "12 × 7 = 84."

# The user's test module, as a user would write it: a real provider named by its spec.
USER_TESTS = f'''
from pes_agent import AgentProps, create_agent, tool


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def test_multiply(cassette):
    provider = cassette.provider("openai:test-model")
    try:
        async with create_agent(provider=provider, tools=[multiply]) as agent:
            result = await agent.process(AgentProps("What is 12*7?", "t1"))
    finally:
        await provider.aclose()
    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == {ANSWER!r}


def test_never_recorded(cassette):
    cassette.provider("openai:test-model")
'''
USER_CONFIG = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


async def _pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest on the user's tests in a subprocess, off the event loop the model server
    answers on."""
    return await asyncio.to_thread(pytester.runpytest_subprocess, "-p", PLUGIN, *args)


@pytest.mark.slow
async def test_record_then_replay_offline_then_a_missing_cassette_fails(
    pytester: pytest.Pytester, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--pes-record runs the real OpenAI SDK and writes the cassette (a second recording
    replaces the first); without the flag, the server gone and no key set, the test passes from
    the cassette; a test never recorded fails saying how to record it."""
    pytester.makefile(".ini", pytest=USER_CONFIG)
    pytester.makepyfile(test_weather=USER_TESTS)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    cassette = pytester.path / "cassettes" / "test_weather" / "test_multiply.jsonl"

    for recording in range(2):
        model_server.script(Reply(PLAN), Reply(ANSWER))
        recorded = await _pytest(pytester, "--pes-record", "test_weather.py::test_multiply")
        recorded.assert_outcomes(passed=1)
        assert len(model_server.requests) == 2 * (recording + 1), "the real model answered"
        text = cassette.read_text(encoding="utf-8")
        assert len(text.splitlines()) == 2, "re-recording replaces the cassette"
        assert API_KEY not in text

    await model_server.aclose()
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{unused_port()}/v1")
    replayed = await _pytest(pytester, "test_weather.py::test_multiply")
    replayed.assert_outcomes(passed=1)

    missing = await _pytest(pytester, "test_weather.py::test_never_recorded")
    missing.assert_outcomes(failed=1)
    expected = pytester.path / "cassettes" / "test_weather" / "test_never_recorded.jsonl"
    missing.stdout.fnmatch_lines(
        [
            f"*no cassette at {expected} for test_weather.py::test_never_recorded: record it "
            "with `pytest --pes-record test_weather.py::test_never_recorded`*"
        ]
    )
    assert not expected.exists()


def test_a_changed_request_fails_the_replayed_run_saying_how_to_record(
    pytester: pytest.Pytester,
) -> None:
    """A replayed test whose model call is not on the cassette gets a run error naming the
    pytest command that records it again."""
    pytester.makepyfile(
        test_miss="""
        import asyncio
        from pes_agent.providers import LLMRequest, PromptMessage

        def test_miss(cassette):
            cassette.path.parent.mkdir(parents=True)
            cassette.path.write_text("")
            provider = cassette.provider("openai:test-model")

            async def ask():
                request = LLMRequest((PromptMessage("user", "hi"),), "planning", "t1", "r1")
                return [event async for event in provider.stream(request)]

            asyncio.run(ask())
        """
    )
    result = pytester.runpytest_subprocess("-p", PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*CassetteMissError*", "*record it with `pytest --pes-record test_miss.py::test_miss`*"]
    )


def test_a_damaged_cassette_fails_the_test_saying_how_to_record(
    pytester: pytest.Pytester,
) -> None:
    """A cassette that is not JSON lines fails the test at `cassette.provider`, with the line
    and the pytest command that records it again."""
    pytester.makepyfile(
        test_damaged="""
        def test_damaged(cassette):
            cassette.path.parent.mkdir(parents=True)
            cassette.path.write_text("not json\\n")
            cassette.provider("openai:test-model")
        """
    )
    result = pytester.runpytest_subprocess("-p", PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*is damaged at line 1*"
            "record it with `pytest --pes-record test_damaged.py::test_damaged`*"
        ]
    )


def test_a_factory_is_not_called_on_replay(pytester: pytest.Pytester) -> None:
    """Replaying, the real provider's factory is never called; recording, it is."""
    pytester.makepyfile(
        test_factory="""
        from pes_agent.testing import ScriptedProvider

        calls = []

        def make():
            calls.append(1)
            return ScriptedProvider(["hello"])

        def test_factory(cassette, request):
            cassette.path.parent.mkdir(parents=True, exist_ok=True)
            if not cassette.recording:
                cassette.path.write_text("")
            provider = cassette.provider(make)
            assert calls == ([1] if cassette.recording else [])
        """
    )
    pytester.runpytest_subprocess("-p", PLUGIN).assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-p", PLUGIN, "--pes-record").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("test_plain", "test_plain.jsonl"),
        ("TestWeather::test_paris", "TestWeather.test_paris.jsonl"),
        ("test_city[Paris-1]", "test_city-Paris-1.jsonl"),
        ("test_path[a/b c]", "test_path-a_b_c.jsonl"),
        ("test_dots[../..]", "test_dots-.jsonl"),
    ],
)
def test_cassette_paths_sit_beside_the_test_file_with_safe_names(name: str, expected: str) -> None:
    """The cassette is `cassettes/<module stem>/<test name>.jsonl` beside the test file,
    parameters kept, and no character of the name leaves that folder."""
    path = cassette_path(Path("/repo/tests/test_weather.py"), name)
    assert path == Path("/repo/tests/cassettes/test_weather") / expected
    assert "/" not in path.name


def test_the_library_does_not_import_pytest() -> None:
    """`import pes_agent` and `pes_agent.testing` leave pytest unimported: it is no dependency."""
    code = (
        "import sys, pes_agent, pes_agent.testing, pes_agent.testing.cassette; "
        "assert not {'pytest', '_pytest'} & set(sys.modules), sorted(sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
