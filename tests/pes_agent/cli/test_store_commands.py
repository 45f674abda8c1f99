"""`pes-agent threads`, `history` and `observations` over a store holding demo runs."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from pes_agent import AgentProps, ObservationType, PausedRun, PendingApproval
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.storage import SQLiteStorage
from pes_agent.threads.messages import ConversationMessage, MessageRole

from .conftest import DemoStore
from .helpers import cli_env, lines, run_cli

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess


def test_threads_lists_the_demo_thread(demo_store: DemoStore) -> None:
    """`threads` shows the demo thread with its message count and last query."""
    result = run_cli("threads", "--db", str(demo_store.db), env=demo_store.env)
    assert result.code == 0, result.stderr
    row = next(line for line in lines(result.stdout) if "demo " in line)
    assert " 4 " in row
    assert "Lisbon or Porto" in row


def test_threads_json(demo_store: DemoStore) -> None:
    """`threads --json` gives each thread's id, message count, last activity and query."""
    result = run_cli("threads", "--json", "--db", str(demo_store.db), env=demo_store.env)
    assert result.code == 0, result.stderr
    [thread] = result.json()
    assert thread["thread_id"] == "demo"
    assert thread["messages"] == 4
    assert thread["last_query"].startswith("Lisbon or Porto")
    assert thread["last_activity"]


def test_threads_on_a_missing_store_says_so_and_creates_nothing(tmp_path: Path) -> None:
    """Reading a store that does not exist reports no threads and does not create the file."""
    db = tmp_path / "absent.db"
    result = run_cli("threads", "--db", str(db), env=cli_env(tmp_path))
    assert result.code == 0
    assert "no threads" in result.stdout
    assert "pes-agent demo" in result.stdout
    assert not db.exists()


def test_history_shows_the_user_and_ai_messages_in_order(demo_store: DemoStore) -> None:
    """`history THREAD` prints each turn's user message, then the AI's answer."""
    result = run_cli("history", "demo", "--db", str(demo_store.db), env=demo_store.env)
    assert result.code == 0, result.stderr
    roles = [line.split()[0] for line in lines(result.stdout) if line.split()[0] in ("USER", "AI")]
    assert roles == ["USER", "AI", "USER", "AI"]
    assert "Go to **Lisbon**" in result.stdout


def test_history_json_and_limit(demo_store: DemoStore) -> None:
    """`history --json -n 2` gives the newest two messages as ConversationMessage JSON."""
    result = run_cli(
        "history", "demo", "-n", "2", "--json", "--db", str(demo_store.db), env=demo_store.env
    )
    assert result.code == 0, result.stderr
    messages = result.json()
    assert [m["role"] for m in messages] == ["USER", "AI"]
    assert messages[1]["metadata"]["status"] == "success"


def test_history_of_an_unknown_thread_is_an_error(demo_store: DemoStore) -> None:
    """An unknown thread is a one-line error pointing at `pes-agent threads`, exit 2."""
    result = run_cli("history", "nope", "--db", str(demo_store.db), env=demo_store.env)
    assert result.code == 2
    [line] = lines(result.stderr)
    assert "no thread 'nope'" in line
    assert "pes-agent threads" in line


def test_observations_lists_every_type_of_a_run(demo_store: DemoStore) -> None:
    """`observations THREAD` shows the plan, the tool calls and the final response."""
    result = run_cli("observations", "demo", "--db", str(demo_store.db), env=demo_store.env)
    assert result.code == 0, result.stderr
    kinds = {line.split()[2] for line in lines(result.stdout)}
    assert {"PLAN", "TOOL_CALL", "TOOL_EXECUTION", "THOUGHTS", "FINAL_RESPONSE"} <= kinds


def test_observations_type_filter(demo_store: DemoStore) -> None:
    """`--type` keeps only the named types; names are case-insensitive and may be comma-joined."""
    result = run_cli(
        "observations",
        "demo",
        "--type",
        "tool_call,Tool_Execution",
        "--type",
        "INTENT",
        "--json",
        "--db",
        str(demo_store.db),
        env=demo_store.env,
    )
    assert result.code == 0, result.stderr
    observations = result.json()
    counts: dict[str, int] = {}
    for observation in observations:
        counts[observation["type"]] = counts.get(observation["type"], 0) + 1
    assert counts == {"TOOL_CALL": 8, "TOOL_EXECUTION": 8, "INTENT": 2}


def test_observations_trace_filter(demo_store: DemoStore) -> None:
    """`--trace-id` keeps one run's observations."""
    every = run_cli(
        "observations", "demo", "--json", "--db", str(demo_store.db), env=demo_store.env
    ).json()
    first = every[0]["trace_id"]
    result = run_cli(
        "observations",
        "demo",
        "--trace-id",
        first,
        "--json",
        "--db",
        str(demo_store.db),
        env=demo_store.env,
    )
    chosen = result.json()
    assert chosen
    assert {o["trace_id"] for o in chosen} == {first}
    assert len(chosen) < len(every)


def test_unknown_observation_type_lists_the_valid_ones(demo_store: DemoStore) -> None:
    """An unknown --type is one line listing every valid type, exit 2."""
    result = run_cli(
        "observations", "demo", "--type", "TOOLS", "--db", str(demo_store.db), env=demo_store.env
    )
    assert result.code == 2
    [line] = lines(result.stderr)
    assert "unknown observation type 'TOOLS'" in line
    assert all(t.value in line for t in ObservationType)


def test_json_output_works_where_stdout_is_ascii_only(demo_store: DemoStore) -> None:
    """Under an ASCII-only stdout (C locale, cron) `--json` is valid JSON with escapes, exit 0."""
    env = {**demo_store.env, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONUTF8": "0"}
    result = run_cli("history", "demo", "--json", "--db", str(demo_store.db), env=env)
    assert result.code == 0, result.stderr
    assert "\\u00b0C" in result.stdout
    assert any("°C" in message["content"] for message in result.json())


def test_plain_output_where_stdout_is_ascii_only_replaces_what_it_cannot_show(
    demo_store: DemoStore,
) -> None:
    """The plain history under an ASCII-only stdout shows '?' for '°' instead of crashing."""
    env = {**demo_store.env, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONUTF8": "0"}
    result = run_cli("history", "demo", "--db", str(demo_store.db), env=env)
    assert result.code == 0, result.stderr
    assert "Lisbon" in result.stdout


def test_read_commands_refuse_a_database_that_is_not_pes_agents(tmp_path: Path) -> None:
    """`threads --db other.db` on an unrelated SQLite file says so (exit 2) and changes nothing."""
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    before = db.read_bytes()
    result = run_cli("threads", "--db", str(db), env=cli_env(tmp_path))
    assert result.code == 2
    assert "is not a pes-agent database" in result.stderr
    assert db.read_bytes() == before
    assert not (tmp_path / "other.db-wal").exists()


def test_a_huge_history_limit_shows_everything(demo_store: DemoStore) -> None:
    """`history -n` beyond any database integer means "all messages", not a crash."""
    result = run_cli(
        "history",
        "demo",
        "-n",
        str(10**20),
        "--json",
        "--db",
        str(demo_store.db),
        env=demo_store.env,
    )
    assert result.code == 0, result.stderr
    assert len(result.json()) == 4


def test_output_cut_short_by_its_reader_is_not_an_error(tmp_path: Path) -> None:
    """`pes-agent observations T | head -1` exits 0 with nothing on stderr."""
    import asyncio
    import subprocess

    from pes_agent import Observation
    from pes_agent.storage import SQLiteStorage

    from .helpers import cli_command

    db = tmp_path / "big.db"

    async def fill() -> None:
        async with SQLiteStorage(db) as storage:
            for i in range(2000):  # far more output than a pipe buffers (64 KiB)
                await storage.add_observation(
                    Observation(
                        thread_id="big",
                        trace_id="r",
                        type=ObservationType.TOOL_EXECUTION,
                        title=f"tool {i}",
                        content={"callId": f"c{i}", "toolName": "t", "status": "success"},
                    )
                )

    asyncio.run(fill())
    producer = subprocess.Popen(
        [*cli_command(), "observations", "big", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(tmp_path),
    )
    assert producer.stdout is not None
    producer.stdout.readline()
    producer.stdout.close()
    _, err = producer.communicate(timeout=60)
    assert producer.returncode == 0, err.decode()
    assert err == b""


def test_damaged_rows_leave_threads_history_and_pending_whole(tmp_path: Path) -> None:
    """One damaged message and one damaged paused run (written by raw SQL) leave `threads`,
    `history -n` and `pending` listing every readable row; each damaged row is named in a
    warning on stderr."""
    db = tmp_path / "agent.db"

    def message(content: str) -> ConversationMessage:
        return ConversationMessage(thread_id="t", role=MessageRole.USER, content=content)

    async def fill() -> None:
        async with SQLiteStorage(db) as storage:
            await storage.add_messages("t", [message("first"), message("second")])
            await storage.save_paused_run(
                PausedRun(
                    thread_id="t",
                    trace_id="r1",
                    props=AgentProps("pay Bob", "t"),
                    planning=PlanningOutput(title="Pay", plan="1. pay"),
                    calls=[ParsedToolCall(call_id="c1", tool_name="pay", arguments={})],
                    pending=[PendingApproval(call_id="c1", tool_name="pay", arguments={})],
                )
            )
        with closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute(
                "INSERT INTO messages (thread_id, message_id, body) VALUES ('t', 'bad', '{}')"
            )
            conn.execute(
                "INSERT INTO paused_runs (thread_id, trace_id, body) VALUES ('t', 'r0', '{}')"
            )
        async with SQLiteStorage(db) as storage:
            await storage.add_messages("t", [message("third")])

    asyncio.run(fill())
    env = cli_env(tmp_path)

    threads = run_cli("threads", "--json", "--db", str(db), env=env)
    assert threads.code == 0, threads.stderr
    assert [(t["thread_id"], t["messages"]) for t in threads.json()] == [("t", 3)]
    history = run_cli("history", "t", "-n", "2", "--json", "--db", str(db), env=env)
    assert history.code == 0, history.stderr
    assert [m["content"] for m in history.json()] == ["second", "third"]
    assert "storage_row_skipped" in history.stderr
    assert "'messages'" in history.stderr
    pending = run_cli("pending", "--json", "--db", str(db), env=env)
    assert pending.code == 0, pending.stderr
    assert [run["trace_id"] for run in pending.json()] == ["r1"]
    assert "'paused_runs'" in pending.stderr
