"""The retrieval benchmark, small: every store indexes, answers and matches brute force."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pes_agent.storage.conftest import require_postgres

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "retrieval.py"


@pytest.mark.slow
@pytest.mark.postgres
def test_retrieval_benchmark_runs_every_store_with_exact_recall() -> None:
    """300 chunks, 20 queries: a row per store (PostgreSQL too), each with recall@10 1.000."""
    url = require_postgres()
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--chunks",
            "300",
            "--queries",
            "20",
            "--dimension",
            "32",
            "--postgres-url",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    rows = {
        line.strip().split("  ")[0]: line.split()
        for line in completed.stdout.splitlines()
        if line.strip().startswith(("in-memory", "SQLite", "PostgreSQL"))
    }
    assert {name.split(" (")[0] for name in rows} == {"in-memory", "SQLite", "PostgreSQL"}
    for cells in rows.values():
        assert cells[-1] == "1.000"
        assert cells[-6] == "300"
