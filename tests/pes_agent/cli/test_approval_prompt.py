"""The y/n approval prompt of `pes-agent run`, typed at in a real terminal (tmux)."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .cli_tools import LEDGER_ENV
from .helpers import REPO, cli_command, cli_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("tmux") is None,
        reason="tmux is not installed (CI installs it in .ci/run): the prompt needs a terminal",
    ),
]

TOOLS = "tests.pes_agent.cli.cli_tools:TOOLS"
PLAN = json.dumps(
    {
        "title": "Weather, then a note",
        "intent": "look up Paris and note it",
        "plan": "1. weather\n2. note it",
        "toolCalls": [
            {"callId": "call_1", "toolName": "get_weather", "arguments": {"city": "Paris"}},
            {
                "callId": "call_2",
                "toolName": "record",
                "arguments": {"text": "Paris is sunny"},
            },
        ],
    }
)
ANSWER = "Noted: Paris is sunny today."


class Terminal:
    """A detached 120x40 tmux session on a private server, running one command."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    async def tmux(self, *args: str) -> str:
        done = await asyncio.to_thread(
            subprocess.run,
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return done.stdout

    async def screen(self) -> str:
        """What the terminal shows now (and what scrolled off it)."""
        return await self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "pes")

    async def wait_for(self, seen: Callable[[str], bool], *, within_s: float = 30) -> str:
        """The screen once `seen(screen)` holds; fails showing the screen when it never does."""
        screen = ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while loop.time() < deadline:
            screen = await self.screen()
            if seen(screen):
                return screen
            await asyncio.sleep(0.1)
        raise AssertionError(f"not seen within {within_s} s; the screen:\n{screen}")


@pytest.fixture
async def terminal() -> AsyncIterator[Terminal]:
    """A private tmux server, killed afterwards."""
    term = Terminal(f"pes-test-{uuid.uuid4().hex[:8]}")
    try:
        yield term
    finally:
        await asyncio.to_thread(
            subprocess.run,
            ["tmux", "-L", term.socket, "kill-server"],
            capture_output=True,
            check=False,
        )


async def _start(terminal: Terminal, tmp_path: Path, server: ModelServer) -> Path:
    """Start `pes-agent run --require-approval record` in the terminal; the file its exit
    code will be written to."""
    ledger = tmp_path / "ledger.txt"
    env = cli_env(
        tmp_path,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=server.openai_base_url,
        TERM="xterm-256color",
        **{LEDGER_ENV: str(ledger)},
    )
    code_file = tmp_path / "exit-code"
    command = [
        *cli_command(), "run", "Weather in Paris, and note it", "--thread", "t1",
        "--require-approval", "record", "--provider", "openai:test-model", "--tools", TOOLS,
        "--db", str(tmp_path / "run.db"),
    ]  # fmt: skip
    script = tmp_path / "run.sh"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())
    script.write_text(
        f"{exports}cd {shlex.quote(str(REPO))}\n"
        f"{shlex.join(command)}\necho $? > {shlex.quote(str(code_file))}\nsleep 600\n"
    )
    await terminal.tmux(
        "new-session", "-d", "-s", "pes", "-x", "120", "-y", "40", f"sh {shlex.quote(str(script))}"
    )
    return code_file


async def test_live_prompt_shows_the_call_and_y_runs_it_once(
    terminal: Terminal, tmp_path: Path, model_server: ModelServer
) -> None:
    """In a terminal, run asks y/n showing the tool and its arguments; typing y runs the call
    once, the answer shows and the command exits 0."""
    model_server.script(Reply(PLAN), Reply(ANSWER))
    code_file = await _start(terminal, tmp_path, model_server)
    screen = await terminal.wait_for(lambda s: "[y/n]" in s)
    assert "approval needed · call_2 record" in screen
    assert '"text": "Paris is sunny"' in screen
    assert not (tmp_path / "ledger.txt").exists()

    await terminal.tmux("send-keys", "-t", "pes", "y", "Enter")
    screen = await terminal.wait_for(lambda s: ANSWER in s and code_file.exists())
    assert code_file.read_text().strip() == "0"
    assert "✓ approved call_2 record" in screen
    assert " success " in screen
    assert (tmp_path / "ledger.txt").read_text().splitlines() == ["record Paris is sunny"]


async def test_live_prompt_n_denies_the_call(
    terminal: Terminal, tmp_path: Path, model_server: ModelServer
) -> None:
    """Typing n at the prompt never runs the call; the run ends partial (exit 3)."""
    model_server.script(Reply(PLAN), Reply("I did not note it."))
    code_file = await _start(terminal, tmp_path, model_server)
    await terminal.wait_for(lambda s: "[y/n]" in s)
    await terminal.tmux("send-keys", "-t", "pes", "n", "Enter")
    screen = await terminal.wait_for(lambda s: code_file.exists())
    assert code_file.read_text().strip() == "3"
    assert "✗ denied call_2 record" in screen
    assert not (tmp_path / "ledger.txt").exists()
