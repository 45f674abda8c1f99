"""The HTTP service benchmark, small: every server answers every run, both tables print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pes_agent.storage.conftest import require_postgres

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "server.py"
PATHS = (
    "agent.process (direct)",
    "POST /runs, JSON",
    "POST /runs, SSE",
    "HTTP round trip alone (404)",
    "httpx: POST /runs, JSON",
    "httpx: round trip alone (404)",
)


@pytest.mark.slow
@pytest.mark.postgres
def test_server_benchmark_runs_every_store_and_worker_count() -> None:
    """4 clients x 2 runs on 1 and 2 uvicorn workers, SQLite and PostgreSQL: no run fails, and
    the overhead table has 3 samples of each path for each store."""
    url = require_postgres()
    command = [sys.executable, str(SCRIPT), "--clients", "4", "--runs", "2", "--rounds", "1"]
    command += ["--samples", "3", "--postgres-url", url]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    load = {
        (cells[0], cells[1]): cells
        for cells in (line.split() for line in lines)
        if len(cells) == 10 and cells[0] in ("sqlite", "postgres")
    }
    assert set(load) == {(s, w) for s in ("sqlite", "postgres") for w in ("1", "2")}
    for cells in load.values():
        assert (cells[2], cells[3]) == ("8", "0")  # runs, errors
    for store in ("sqlite", "postgres"):
        for path in PATHS:
            row = next(
                line
                for line in lines
                if line.split()[:1] == [store] and line.split(None, 1)[1].startswith(path)
            )
            assert row.split(path)[1].split()[0] == "3"  # samples
        inside = next(
            line
            for line in lines
            if line.split()[:1] == [store] and "inside the server: request - agent.process" in line
        )
        assert int(inside.split("agent.process")[1].split()[0]) >= 3 * 4  # the paths' JSON runs
        verdict = next(
            line for line in lines if line.startswith(f"server overhead at p50, {store}")
        )
        assert "inside the server" in verdict
        assert "End to end through the lean client" in verdict
    assert lines[-1] == "failed runs: 0"
