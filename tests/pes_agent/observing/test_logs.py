"""Logging: silent below WARNING until the application asks; warnings reach stderr."""

from __future__ import annotations

import os
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


FAILING_TOOL_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import rich  # the cli/dev extras: structlog's default ConsoleRenderer then uses it
    import structlog
    from pes_agent import AgentProps, configure_logging, create_agent, tool
    from pes_agent.testing import ScriptedProvider

    setup, account, query = sys.argv[1:]
    if setup == "configure_logging":
        configure_logging("INFO")
    elif setup == "structlog_json":
        structlog.configure(
            processors=[structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
        )

    @tool
    async def fetch(account: str) -> str:
        \"\"\"Fetch an account with a token from the environment.\"\"\"
        token = os.environ["SERVICE_TOKEN"]
        signature = token[::-1]
        raise RuntimeError(f"upstream refused account #{len(account)}")

    def gate_the_second(call, context) -> bool:
        token = os.environ["SERVICE_TOKEN"]
        if call.call_id == "c1":
            return False
        raise LookupError(f"no rule for {call.tool_name}")

    calls = [
        {"callId": f"c{n}", "toolName": "fetch", "arguments": {"account": account}}
        for n in (1, 2)
    ]
    plan = json.dumps({"intent": "i", "plan": "p", "toolCalls": calls})

    async def main() -> None:
        provider = ScriptedProvider([plan, "done"])
        agent = create_agent(provider=provider, tools=[fetch], require_approval=gate_the_second)
        result = await agent.process(AgentProps(query, "t"))
        print(result.metadata.status)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("setup", ["default", "configure_logging", "structlog_json"])
def test_a_failure_is_logged_by_type_and_message_never_with_frame_locals(setup: str) -> None:
    """A failing tool and approval predicate log their error's type and message; the secret
    they read, the tool's arguments and the user's query, all in their frames' locals, never
    reach the log (structlog's own rendering, with rich installed)."""
    secret = "sk-live-5ecret-7a9b"
    account, query = "acct-4242-private", "my pin is 8812, pay the rent"
    done = subprocess.run(
        [sys.executable, "-c", FAILING_TOOL_SCRIPT, setup, account, query],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "SERVICE_TOKEN": secret},
    )
    log = done.stdout + done.stderr
    for private in (secret, secret[::-1], account, query, "8812"):
        assert private not in log
    [predicate] = [line for line in log.splitlines() if "approval_predicate_failed" in line]
    assert "LookupError" in predicate
    assert "no rule for fetch" in predicate
    [tool] = [line for line in log.splitlines() if "tool_call_failed" in line]
    assert "RuntimeError" in tool
    assert f"upstream refused account #{len(account)}" in tool
