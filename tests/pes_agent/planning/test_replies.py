"""The recorded-looking planning replies `benchmarks/planning_modes.py` replays are sound data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pes_agent.execution.dag import plan_errors
from pes_agent.planning.parser import OutputParser

REPLIES = Path(__file__).parent / "replies"
FILES = sorted(REPLIES.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_there_are_at_least_twenty_replies() -> None:
    """The measurement needs a set of at least 20 replies, each with its own mistake."""
    assert len(FILES) >= 20
    assert len({_load(path)["mistake"] for path in FILES}) == len(FILES)


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_each_reply_has_a_usable_fixed_plan(path: Path) -> None:
    """Every case names its mistake and carries a fixed plan that needs no repair."""
    case = _load(path)
    assert {"mistake", "query", "text", "fixed"} <= set(case)
    assert isinstance(case["text"], str)
    output = OutputParser().parse_planning_output(json.dumps(case["fixed"]))
    assert output.errors == []
    assert output.tool_calls
    assert plan_errors(output.tool_calls) == []


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_each_recorded_reply_differs_from_its_fixed_plan(path: Path) -> None:
    """A recorded reply holds a mistake: it is never the fixed plan written out plainly."""
    case = _load(path)
    assert case["text"] not in (json.dumps(case["fixed"]), json.dumps(case["fixed"], indent=2))
    for key in ("structured", "submit_plan"):
        if key in case:
            assert isinstance(case[key], dict | str)
            assert case[key] != case["fixed"], f"{key} equal to fixed: leave it out instead"
