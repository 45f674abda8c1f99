"""benchmarks/planning_modes.py runs and measures what structured planning is for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "planning_modes.py"
REPLIES = ROOT / "tests" / "pes_agent" / "planning" / "replies"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    data: dict[str, Any] = json.loads(completed.stdout)
    return data


@pytest.mark.slow
def test_every_mode_replays_every_reply(results: dict[str, Any]) -> None:
    """Four modes, each over all the recorded replies (at least 20), the output marked simulated."""
    cases = len(list(REPLIES.glob("*.json")))
    assert results["cases"] == cases >= 20
    assert len(results["modes"]) == 4
    assert all(mode["replies"] == cases for mode in results["modes"].values())
    assert "Simulated" in results["note"]


@pytest.mark.slow
def test_structured_modes_need_fewer_repairs_than_text(results: dict[str, Any]) -> None:
    """Schema-constrained replies need fewer repair round-trips and none stays unusable."""
    modes = results["modes"]
    text = modes["text"]
    for label in ("structured: OpenAI json_schema", "structured: Anthropic submit_plan"):
        assert modes[label]["repairs"] < text["repairs"]
        assert modes[label]["unusable"] == 0
    # Semantic mistakes (placeholders, cycles, repeated ids) survive any schema.
    assert modes["structured: OpenAI json_schema"]["per_case"]["22_dependency_cycle"] == 1


@pytest.mark.slow
def test_auto_on_a_refusing_server_costs_one_call_then_plans_as_text(
    results: dict[str, Any],
) -> None:
    """The refused option costs exactly one extra call over text for the whole set (remembered)."""
    text, auto = results["modes"]["text"], results["modes"]["auto: server refuses json_schema"]
    assert auto["model_calls"] == text["model_calls"] + 1
    assert auto["per_case"] == text["per_case"]
