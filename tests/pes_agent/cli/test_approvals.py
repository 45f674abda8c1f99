"""Runs that wait for a person on the command line: run --no-input, approve, pending, cancel."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .cli_tools import LEDGER_ENV
from .helpers import Completed, cli_env, run_cli, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in subprocesses

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"
PLAN = json.dumps(
    {
        "title": "Pay Alice",
        "intent": "pay Alice after checking the weather",
        "plan": "1. look up Paris\n2. send the money",
        "toolCalls": [
            {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}},
            {
                "callId": "call_2",
                "toolName": "transfer_money",
                "arguments": {"amount": 250, "to": "Alice"},
            },
        ],
    }
)
ANSWER = "Sent 250 EUR to Alice; it is sunny in Paris."


@dataclass(frozen=True, slots=True)
class Setup:
    """The environment, store and ledger of one test, and the options every command needs."""

    env: dict[str, str]
    db: Path
    ledger: Path

    @property
    def agent_args(self) -> list[str]:
        return ["--provider", "openai:test-model", "--tools", TOOLS, "--db", str(self.db)]

    def ledger_lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


@pytest.fixture
def setup(tmp_path: Path, model_server: ModelServer) -> Setup:
    """A private home, a store file and a ledger the test tools write to."""
    ledger = tmp_path / "ledger.txt"
    env = cli_env(
        tmp_path,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        **{LEDGER_ENV: str(ledger)},
    )
    return Setup(env=env, db=tmp_path / "run.db", ledger=ledger)


async def _paused_run(setup: Setup, model_server: ModelServer, *extra: str) -> Completed:
    """`pes-agent run --no-input` on thread t1 whose plan calls the gated transfer_money."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    result = await run_cli_async(
        "run", "Pay Alice 250 EUR", "--thread", "t1", "--no-input", *extra, *setup.agent_args,
        env=setup.env,
    )  # fmt: skip
    assert result.code == 4, result.stderr
    return result


def _printed_command(stdout: str, label: str) -> list[str]:
    """The command the run printed after `label`, as arguments for the CLI under test."""
    line = next(line for line in stdout.splitlines() if line.startswith(label))
    words = shlex.split(line.removeprefix(label))
    assert words[0] == "pes-agent"
    return words[1:]


async def test_no_input_pauses_and_the_printed_approve_command_finishes_the_run(
    setup: Setup, model_server: ModelServer
) -> None:
    """--no-input exits 4 before the gated call runs; the printed approve command runs it once
    and saves the turn once."""
    paused = await _paused_run(setup, model_server)
    assert "⏸ call_2 transfer_money" in paused.stdout
    assert '{"amount": 250, "to": "Alice"}' in paused.stdout
    assert "✓ call_1 get_weather" in paused.stdout
    assert setup.ledger_lines() == []
    approve = _printed_command(paused.stdout, "approve them all:")
    assert approve[:2] == ["approve", "t1"]

    done = await run_cli_async(*approve, env=setup.env)
    assert done.code == 0, done.stderr
    assert "resuming the run that waited for approval" in done.stdout
    assert "approved call_2 transfer_money" in done.stdout
    assert ANSWER in done.stdout
    assert setup.ledger_lines() == ["transfer 250 Alice"]
    history = run_cli("history", "t1", "--db", str(setup.db), "--json", env=setup.env).json()
    assert [m["role"] for m in history] == ["USER", "AI"]
    assert history[1]["content"] == ANSWER

    again = await run_cli_async(*approve, env=setup.env)
    assert again.code == 2
    assert "no run waits for approval on thread 't1'" in again.stderr
    assert setup.ledger_lines() == ["transfer 250 Alice"]


async def test_deny_with_a_reason_never_runs_the_call_and_tells_the_model(
    setup: Setup, model_server: ModelServer
) -> None:
    """`approve --deny call_2=REASON` skips the transfer, exits 3 (partial) and the synthesis
    prompt carries the reason."""
    await _paused_run(setup, model_server)
    denied = await run_cli_async(
        "approve", "t1", "--deny", "call_2=over the daily limit", *setup.agent_args, env=setup.env
    )
    assert denied.code == 3, denied.stderr
    assert "denied call_2 transfer_money: over the daily limit" in denied.stdout
    assert setup.ledger_lines() == []
    synthesis = json.dumps(model_server.requests[-1].body)
    assert "over the daily limit" in synthesis


async def test_deny_is_law_for_approve_without_the_runs_require_approval(
    setup: Setup, model_server: ModelServer
) -> None:
    """A run paused by `--require-approval record` and denied by an `approve` that does not
    repeat the option never runs the call."""
    plan = json.dumps(
        {
            "intent": "write it down",
            "plan": "1. record it",
            "toolCalls": [
                {"callId": "call_1", "toolName": "record", "arguments": {"text": "secret"}}
            ],
        }
    )
    model_server.script(Reply(plan), Reply("Nothing recorded."))
    paused = await run_cli_async(
        "run", "Record it", "--thread", "t1", "--no-input", "--require-approval", "record",
        *setup.agent_args, env=setup.env,
    )  # fmt: skip
    assert paused.code == 4, paused.stderr
    denied = await run_cli_async(
        "approve", "t1", "--deny", "call_1=no", *setup.agent_args, env=setup.env
    )
    assert denied.code == 3, denied.stderr
    assert "denied call_1 record: no" in denied.stdout
    assert setup.ledger_lines() == []


async def test_deny_of_a_call_that_does_not_wait_is_a_usage_error(
    setup: Setup, model_server: ModelServer
) -> None:
    """--deny naming a call that is not pending exits 2 listing the pending ones; nothing runs."""
    await _paused_run(setup, model_server)
    wrong = await run_cli_async(
        "approve", "t1", "--deny", "call_1", *setup.agent_args, env=setup.env
    )
    assert wrong.code == 2
    assert "--deny call_1" in wrong.stderr
    assert "the pending calls: call_2" in wrong.stderr
    listed = run_cli("pending", "t1", "--db", str(setup.db), "--json", env=setup.env).json()
    assert len(listed) == 1


async def test_approve_without_the_runs_tools_is_a_usage_error(
    setup: Setup, model_server: ModelServer
) -> None:
    """`approve` without the --tools of the run exits 2 naming the missing tool; the run still
    waits."""
    await _paused_run(setup, model_server)
    bare = await run_cli_async(
        "approve", "t1", "--provider", "openai:test-model", "--db", str(setup.db), env=setup.env
    )
    assert bare.code == 2
    assert "transfer_money" in bare.stderr
    assert "--tools" in bare.stderr
    listed = run_cli("pending", "--db", str(setup.db), "--json", env=setup.env).json()
    assert [run["thread_id"] for run in listed] == ["t1"]


async def test_pending_lists_the_waiting_calls_and_cancel_drops_the_run(
    setup: Setup, model_server: ModelServer
) -> None:
    """`pending` shows the query and the call with its arguments; `cancel` ends the run
    without running it, after which approve and cancel exit 2."""
    await _paused_run(setup, model_server)
    shown = run_cli("pending", "--db", str(setup.db), env=setup.env)
    assert shown.code == 0, shown.stderr
    assert "thread t1" in shown.stdout
    assert "Pay Alice 250 EUR" in shown.stdout
    assert 'call_2 transfer_money {"amount": 250, "to": "Alice"}' in shown.stdout
    listed = run_cli("pending", "t1", "--db", str(setup.db), "--json", env=setup.env).json()
    assert listed[0]["pending"][0]["call_id"] == "call_2"
    assert listed[0]["query"] == "Pay Alice 250 EUR"

    cancelled = run_cli("cancel", "t1", "--db", str(setup.db), env=setup.env)
    assert cancelled.code == 0, cancelled.stderr
    assert "never ran: call_2 transfer_money" in cancelled.stdout
    nothing = run_cli("pending", "--db", str(setup.db), env=setup.env)
    assert "no run waits for approval anywhere" in nothing.stdout
    assert run_cli("cancel", "t1", "--db", str(setup.db), env=setup.env).code == 2
    approve = await run_cli_async("approve", "t1", *setup.agent_args, env=setup.env)
    assert approve.code == 2
    assert setup.ledger_lines() == []


async def test_json_run_pauses_with_the_pending_calls_and_the_commands_on_stderr(
    setup: Setup, model_server: ModelServer
) -> None:
    """`run --json` never asks: stdout is the paused response (exit 4), the resume commands go
    to stderr."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    result = await run_cli_async(
        "run", "Pay Alice", "--thread", "t1", "--json", *setup.agent_args, env=setup.env
    )
    assert result.code == 4, result.stderr
    data = result.json()
    assert data["metadata"]["status"] == "awaiting_approval"
    assert data["metadata"]["pending_approvals"][0]["tool_name"] == "transfer_money"
    assert "pes-agent approve t1" in result.stderr
    assert "--json never asks" in result.stderr


async def test_require_approval_gates_a_plain_tool_and_an_unknown_name_is_refused(
    setup: Setup, model_server: ModelServer
) -> None:
    """--require-approval record pauses a run calling the undecorated `record`; naming no
    loaded tool exits 2."""
    plan = json.dumps(
        {
            "intent": "note",
            "plan": "1. note",
            "toolCalls": [{"callId": "c1", "toolName": "record", "arguments": {"text": "hi"}}],
        }
    )
    model_server.script(Reply(plan))
    paused = await run_cli_async(
        "run", "Note hi", "--thread", "t2", "--require-approval", "record", *setup.agent_args,
        env=setup.env,
    )  # fmt: skip
    assert paused.code == 4, paused.stderr
    assert "stdin is not a terminal" in paused.stdout
    assert setup.ledger_lines() == []
    unknown = run_cli("run", "x", "--require-approval", "nope", *setup.agent_args, env=setup.env)
    assert unknown.code == 2
    assert "--require-approval nope: no tool of that name" in unknown.stderr


async def test_html_trace_shows_the_pause_and_the_decisions(
    setup: Setup, model_server: ModelServer, tmp_path: Path
) -> None:
    """The trace of a paused run says it waits; after approve it has approval, decision and
    pause markers and the Approvals list."""
    await _paused_run(setup, model_server)
    waiting = tmp_path / "waiting.html"
    traced = run_cli("trace", "t1", "--html", str(waiting), "--db", str(setup.db), env=setup.env)
    assert traced.code == 0, traced.stderr
    page = waiting.read_text()
    assert 'class="badge awaiting_approval"' in page
    assert 'class="marker approval"' in page
    assert "waiting for a decision" in page

    done = await run_cli_async("approve", "t1", *setup.agent_args, env=setup.env)
    assert done.code == 0, done.stderr
    finished = tmp_path / "finished.html"
    run_cli("trace", "t1", "--html", str(finished), "--db", str(setup.db), env=setup.env)
    page = finished.read_text()
    for marker in ("approval", "decision", "pause"):
        assert f'class="marker {marker}"' in page
    assert 'data-approval="call_2"' in page
    assert '<b class="approve">approved</b>' in page
    assert "waits for approval" in page


def test_help_documents_exit_code_4_and_the_approval_commands(tmp_path: Path) -> None:
    """`pes-agent --help` lists exit code 4 and the approve, pending and cancel commands."""
    result = run_cli("--help", env=cli_env(tmp_path))
    assert result.code == 0
    assert "\n  4    the run waits for approval" in result.stdout
    for command in ("approve", "pending", "cancel"):
        assert f"    {command} " in result.stdout
