"""ART's own OutputParser cases, run against ours (see conformance/README.md beside this file)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pes_agent.planning.parser import OutputParser
from pes_agent.planning.plan import PlanningOutput

CASES_PATH = Path(__file__).resolve().parent / "conformance" / "art_output_parser_cases.json"


def _load_cases() -> list[dict[str, Any]]:
    if not CASES_PATH.is_file():
        return []
    cases: list[dict[str, Any]] = json.loads(CASES_PATH.read_text(encoding="utf-8"))
    return cases


CASES = _load_cases()


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['src']}: {case['test']}"


def _tool_call_section_is_empty_array(text: str) -> bool:
    return re.search(r"tool calls:\s*\[\s*\]\s*$", text, re.IGNORECASE | re.MULTILINE) is not None


def _as_art(output: PlanningOutput) -> list[dict[str, Any]] | None:
    if output.tool_calls is None:
        return None
    return [
        {"callId": call.call_id, "toolName": call.tool_name, "arguments": call.arguments}
        for call in output.tool_calls
    ]


def test_conformance_cases_are_present() -> None:
    """The ART cases ship inside the repository, so a clone with nothing beside it runs them."""
    assert CASES_PATH.is_file(), f"ART conformance cases missing at {CASES_PATH}"
    assert len(CASES) == 24


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case["fn"] == "parsePlanningOutput"],
    ids=_case_id,
)
def test_planning_output_matches_art(case: dict[str, Any]) -> None:
    """Intent, plan and tool calls equal ART's; an unusable section also reports an error."""
    output = OutputParser().parse_planning_output(case["input"])
    expected = case["result"]

    assert output.intent == expected.get("intent")
    assert output.plan == expected.get("plan")
    assert _as_art(output) == expected.get("toolCalls")
    art_found_unusable = expected.get("toolCalls") == [] and not _tool_call_section_is_empty_array(
        case["input"]
    )
    if art_found_unusable:
        assert len(output.errors) == 1, output.errors
    else:
        assert output.errors == []


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case["fn"] == "parseSynthesisOutput"],
    ids=_case_id,
)
def test_synthesis_output_matches_art(case: dict[str, Any]) -> None:
    """The final answer is the same string ART returns."""
    assert OutputParser().parse_synthesis_output(case["input"]) == case["result"]
