"""The durable-engine benchmark, small: both tables print and every run succeeded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "durable.py"


@pytest.mark.slow
def test_durable_benchmark_prints_overhead_and_throughput() -> None:
    """A few runs on DBOS over SQLite: an overhead row and a throughput row, all successful
    (the script exits 1 on any failed run)."""
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--engines",
            "dbos-sqlite",
            "--runs",
            "3",
            "--concurrent",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=SCRIPT.parent,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    out = completed.stdout
    assert "Per-run overhead of a durable engine" in out
    assert "Throughput: 6 runs at once" in out
    assert re.search(r"^\s*dbos-sqlite\s+6\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$", out, re.M), out
    assert re.search(r"durable: dbos-sqlite overhead [\d.]+ ms$", out.strip()), out
