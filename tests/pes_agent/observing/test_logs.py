"""Logging: silent below WARNING until the application asks; warnings reach stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pes_agent import UsageError, configure_logging

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pes_agent import AgentProps, configure_logging, create_agent
    from pes_agent.testing import ScriptedProvider

    if sys.argv[1] != "-":
        configure_logging(sys.argv[1])
    plan = json.dumps({"intent": "i", "plan": "p", "toolCalls": []})
    responses = [plan, "ok"] if sys.argv[2] == "ok" else []

    async def main() -> None:
        agent = create_agent(provider=ScriptedProvider(responses))
        result = await agent.process(AgentProps("q", "t"))
        print(result.metadata.status)

    asyncio.run(main())
    """
)


def _run(level: str, outcome: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, level, outcome],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_a_successful_run_logs_nothing_by_default() -> None:
    """Without any logging set-up, a run prints only what the application prints."""
    done = _run("-", "ok")
    assert done.stdout.strip() == "success"
    assert done.stderr == ""


def test_a_failed_phase_is_a_warning_on_stderr_by_default() -> None:
    """A failing phase is logged as a warning on stderr, never on stdout."""
    done = _run("-", "fail")
    assert done.stdout.strip() == "error"
    assert "phase_failed" in done.stderr
    assert "phase_failed" not in done.stdout


def test_configure_logging_info_shows_each_run() -> None:
    """configure_logging('INFO') shows the run_finished event with its thread and trace."""
    done = _run("INFO", "ok")
    assert "run_finished" in done.stderr
    assert "thread_id=t" in done.stderr


def test_configure_logging_rejects_an_unknown_level() -> None:
    """An unknown level name is a UsageError naming an accepted one."""
    with pytest.raises(UsageError, match="INFO"):
        configure_logging("chatty")
