"""Every script in examples/ runs to completion offline, as a new user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1] / "examples"
# The scripts of examples/ and of its example projects (examples/evals/run_evals.py); the
# projects' helper modules (scripted_judge.py) are imported by their scripts, not run.
EXAMPLES = sorted([*_ROOT.glob("*.py"), *_ROOT.glob("*/run_*.py")])


@pytest.mark.parametrize(
    "script", EXAMPLES, ids=[p.relative_to(_ROOT).as_posix() for p in EXAMPLES]
)
def test_example_runs_offline_and_exits_cleanly(script: Path) -> None:
    """The example exits 0 with output and no traceback when no API key is set."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    # No local model server either (a developer's running Ollama would be slow and vary).
    env.pop("PES_BASE_URL", None)
    env["OLLAMA_BASE_URL"] = "http://127.0.0.1:9/v1"
    # persistence.py also runs on the PostgreSQL the storage tests use, when it is reachable.
    if "PES_TEST_POSTGRES_URL" in os.environ:
        env.setdefault("PES_EXAMPLES_POSTGRES_URL", os.environ["PES_TEST_POSTGRES_URL"])
    completed = subprocess.run(
        [sys.executable, str(script)],
        # Not the terminal pytest may run in: interactive examples then answer on their own.
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=script.parent.parent,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip(), "an example should show what it did"
    assert "Traceback" not in completed.stderr


def test_there_are_examples() -> None:
    """The examples directory is not empty (the parametrised test would silently run nothing)."""
    assert len(EXAMPLES) >= 2
