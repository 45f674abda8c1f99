"""Every command the CLI suggests is quoted for a POSIX shell: split as a shell splits it, it
gives back the thread id and the store path it names, whatever characters they hold."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.pes_agent.providers.helpers import API_KEY
from tests.pes_agent.providers.model_server import ModelServer, Reply

from .cli_tools import LEDGER_ENV
from .helpers import REPO, cli_env, run_cli, run_cli_async

pytestmark = pytest.mark.slow  # each test runs the command in subprocesses

#: A thread id a shell would run as two commands, and a folder with a space and a quote.
THREAD = "a;rm -rf x"
FOLDER = "it's here"


def store_in(tmp_path: Path, name: str) -> Path:
    (tmp_path / FOLDER).mkdir(exist_ok=True)
    return tmp_path / FOLDER / name


def after(text: str, label: str, *, until: str = "\n") -> str:
    """The text after `label` on its line, up to `until`."""
    line = next(line for line in text.splitlines() if label in line)
    return line.split(label, 1)[1].split(until, 1)[0]


def test_the_demo_hints_split_back_to_the_thread_and_store(tmp_path: Path) -> None:
    """After a run, `--thread X` and the timeline command split back to the thread id and the
    --db path, and the printed timeline command works as printed."""
    db = store_in(tmp_path, "agent.db")
    env = cli_env(tmp_path)
    done = run_cli("demo", "--thread", THREAD, "--db", str(db), env=env)
    assert done.code == 0, done.stderr

    assert shlex.split(after(done.stdout, "continue it with ", until=" · ")) == [
        "--thread",
        THREAD,
    ]
    timeline = shlex.split(after(done.stdout, "timeline: "))
    assert timeline == ["pes-agent", "trace", THREAD, "--html", "trace.html", "--db", str(db)]
    drawn = run_cli(*timeline[1:], env=env, cwd=tmp_path)
    assert drawn.code == 0, drawn.stderr
    assert (tmp_path / "trace.html").exists()


def test_the_index_hint_splits_back_to_the_store(tmp_path: Path) -> None:
    """`index` suggests `pes-agent run --retrieve --db PATH QUERY` with PATH quoted."""
    db = store_in(tmp_path, "index.db")
    indexed = run_cli("index", str(REPO / "README.md"), "--db", str(db), env=cli_env(tmp_path))
    assert indexed.code == 0, indexed.stderr
    ask = shlex.split(after(indexed.stdout, "ask with: ").removesuffix(" QUERY"))
    assert ask == ["pes-agent", "run", "--retrieve", "--db", str(db)]


def test_the_nothing_indexed_error_quotes_the_store(tmp_path: Path) -> None:
    """`run --retrieve` on a store with no index suggests an index command naming the store."""
    db = store_in(tmp_path, "empty.db")
    ran = run_cli("run", "q", "--retrieve", "--db", str(db), env=cli_env(tmp_path))
    assert ran.code == 2
    command = shlex.split(after(ran.stderr, "run `", until="`"))
    assert command == ["pes-agent", "index", "PATH...", "--db", str(db)]


async def test_the_paused_run_hints_split_back_to_the_thread_and_store(
    tmp_path: Path, model_server: ModelServer
) -> None:
    """A run paused for approval prints approve, deny, pending and cancel commands (and
    `pending` its own) that split back to the thread id and --db path."""
    db = store_in(tmp_path, "run.db")
    env = cli_env(
        tmp_path,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL=model_server.openai_base_url,
        **{LEDGER_ENV: str(tmp_path / "ledger.txt")},
    )
    plan = {
        "intent": "pay",
        "plan": "1. pay",
        "toolCalls": [
            {"callId": "call_1", "toolName": "transfer_money", "arguments": {"amount": 5}}
        ],
    }
    model_server.script(Reply(json.dumps(plan)))
    agent = ["--provider", "openai:test-model", "--tools", "tests.pes_agent.cli.cli_tools:TOOLS"]
    paused = await run_cli_async(
        "run", "pay", "--thread", THREAD, "--no-input", *agent, "--db", str(db), env=env
    )
    assert paused.code == 4, paused.stderr
    store = ["--db", str(db)]
    assert shlex.split(after(paused.stdout, "approve them all:")) == [
        "pes-agent", "approve", THREAD, *agent, *store
    ]  # fmt: skip
    assert shlex.split(after(paused.stdout, "deny one, run the rest:")) == [
        "pes-agent", "approve", THREAD, "--deny", "call_1=REASON", *agent, *store
    ]  # fmt: skip
    listing, cancel = after(paused.stdout, "list, or drop the run:").split(" · ")
    assert shlex.split(listing) == ["pes-agent", "pending", THREAD, *store]
    assert shlex.split(cancel) == ["pes-agent", "cancel", THREAD, *store]

    shown = run_cli("pending", "--db", str(db), env=env)
    assert shown.code == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if "pes-agent cancel" in line)
    approve_shown, cancel_shown = (shlex.split(part) for part in line.split(" · "))
    assert approve_shown[:3] == ["pes-agent", "approve", THREAD]
    assert approve_shown[-2:] == store
    assert cancel_shown == ["pes-agent", "cancel", THREAD, *store]
