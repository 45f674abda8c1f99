"""A --db the commands cannot use is named for what is wrong with it (permission denied, not a
database, only an index so far), and a command that fails on it leaves nothing beside it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..unprivileged import as_unprivileged, shared_folder, unprivileged_env
from .helpers import REPO, Completed, cli_command, cli_env, run_cli

pytestmark = pytest.mark.slow  # each test runs the command in subprocesses


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    with shared_folder() as folder:
        yield folder


def run_unprivileged(*args: str, home: Path) -> Completed:
    """`pes-agent ARGS...` as a user file permissions apply to (`tests.pes_agent.unprivileged`)."""
    import subprocess

    done = subprocess.run(
        [*as_unprivileged(), *cli_command(), *args],
        capture_output=True,
        text=True,
        env=unprivileged_env(cli_env(home)),
        cwd=home,
        timeout=60,
        check=False,
    )
    return Completed(done.returncode, done.stdout, done.stderr)


def test_a_mode_000_store_is_permission_denied_for_reads_runs_and_serve(
    shared_dir: Path,
) -> None:
    """threads, history, demo and serve on a pes-agent file the user may not read each exit 2
    saying permission denied, with the file's mode; none calls it "not a pes-agent
    database" or sends the user to check its folder; nothing is left beside the file."""
    db = shared_dir / "agent.db"
    assert run_cli("demo", "--db", str(db), env=cli_env(shared_dir)).code == 0
    db.chmod(0o000)
    before = sorted(os.listdir(shared_dir))
    for command in (
        ["threads"],
        ["history", "demo"],
        ["demo"],
        ["serve", "--demo", "--port", "1"],  # stops before listening
    ):
        done = run_unprivileged(*command, "--db", str(db), home=shared_dir)
        assert done.code == 2, (command, done.stderr)
        assert "permission denied" in done.stderr, (command, done.stderr)
        assert "----------" in done.stderr
        assert "not a pes-agent database" not in done.stderr
        assert "directory exists" not in done.stderr
    assert sorted(os.listdir(shared_dir)) == before


def test_a_file_that_is_not_a_database_is_named_so_and_keeps_no_lock_folder(
    tmp_path: Path,
) -> None:
    """threads and demo on a text file say it is not an SQLite database; the failed demo
    leaves no `<db>-locks` folder."""
    notes = tmp_path / "notes.db"
    notes.write_text("my notes\n")
    for command in (["threads"], ["demo"]):
        done = run_cli(*command, "--db", str(notes), env=cli_env(tmp_path))
        assert done.code == 2, done.stderr
        assert "not an SQLite database" in done.stderr, done.stderr
    assert not (tmp_path / "notes.db-locks").exists()
    assert notes.read_text() == "my notes\n"


def test_a_store_holding_only_an_index_has_no_threads_yet(tmp_path: Path) -> None:
    """After `pes-agent index` into a new file, `threads` lists none (exit 0) and `history`
    says nothing has run there, instead of "not a pes-agent database"."""
    db = tmp_path / "index.db"
    env = cli_env(tmp_path)
    assert run_cli("index", str(REPO / "README.md"), "--db", str(db), env=env).code == 0
    with sqlite3.connect(db) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert "schema_version" not in tables

    listed = run_cli("threads", "--db", str(db), env=env)
    assert listed.code == 0, listed.stderr
    assert f"no threads in {db} yet" in listed.stdout
    history = run_cli("history", "t1", "--db", str(db), env=env)
    assert history.code == 2
    assert f"no threads in {db}: nothing has run there yet" in history.stderr
