"""The live view and the HTML trace of adaptive runs: language steps and plan revisions."""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rich.console import Console

from pes_agent import AgentProps, Observation, create_agent, tool
from pes_agent.cli.live import LiveView, PlainView, RunHeader
from pes_agent.cli.trace import build_timeline, render_html
from pes_agent.core import AgentCore
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

HEADER = RunHeader("Tides in Brest", "t1", "scripted")


@tool
def primary(place: str) -> str:
    """Tide tables from the primary service."""
    raise RuntimeError("primary service is down")


@tool
def backup(place: str) -> str:
    """Tide tables from the backup service."""
    return f"high tide in {place} at 06:12"


def _answer(request: LLMRequest) -> str:
    if request.phase == "planning":
        return json.dumps(
            {
                "intent": "tide times",
                "plan": "1. look up\n2. summarise",
                "toolCalls": [
                    {"callId": "call_1", "toolName": "primary", "arguments": {"place": "Brest"}},
                    {"callId": "call_2", "instruction": "Summarise {step_1_result}."},
                ],
            }
        )
    if request.phase == "reevaluation":
        return json.dumps(
            {
                "toolCalls": [
                    {"callId": "call_3", "toolName": "backup", "arguments": {"place": "Brest"}},
                    {"callId": "call_4", "instruction": "Summarise {step_3_result}."},
                    {"callId": "call_5", "instruction": "Translate {step_3_result} to French."},
                ]
            }
        )
    if request.phase == "language_step":
        return "summary of: " + request.messages[-1].content
    return "High tide in Brest is at 06:12."


@pytest.fixture
async def agent() -> AsyncIterator[AgentCore]:
    model = ScriptedProvider([_answer], repeat=True, latency_s=0.01)
    async with create_agent(
        provider=model, tools=[primary, backup], reevaluate="on_failure"
    ) as made:
        yield made


def _text(view: LiveView) -> str:
    console = Console(file=io.StringIO(), width=140, record=True, color_system=None)
    console.print(view.render())
    return console.export_text()


async def test_live_view_shows_the_revision_and_marks_the_replaced_call(
    agent: AgentCore,
) -> None:
    """The final frame has a "plan revised (1)" row, the replaced call marked, and the
    language steps labelled as such."""
    view = LiveView(Console(file=io.StringIO(), force_terminal=True, width=140), HEADER)
    with view:
        detach = view.attach(agent, "t1")
        result = await agent.process(AgentProps("Tides in Brest", "t1"))
        detach()
        view.finish(result)
    text = _text(view)
    lines = text.splitlines()
    revised = next(i for i, line in enumerate(lines) if "plan revised (1)" in line)
    assert "replaced call_2" in lines[revised]
    replaced_row = next(line for line in lines if "call_2" in line and "language step" in line)
    assert "⊘ replaced" in replaced_row
    after = "\n".join(lines[revised:])
    assert re.search(r"call_3\W+backup", after)
    assert re.search(r'call_4\W+language step \{"instruction": "Summarise high tide', after)
    assert text.count("✓ success") == 3
    assert "✗ error" in text


async def test_plain_view_prints_the_revision_and_the_language_steps(agent: AgentCore) -> None:
    """The plain view has a line for the revision, its new calls and each language step."""
    console = Console(file=io.StringIO(), width=200, color_system=None)
    view = PlainView(console, HEADER)
    with view:
        detach = view.attach(agent, "t1")
        result = await agent.process(AgentProps("Tides in Brest", "t1"))
        detach()
        view.finish(result)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "plan revised (1); replaced call_2" in output
    assert (
        '· call_5 language step {"instruction": "Translate {step_3_result} to French."}' in output
    )
    assert re.search(r"✓ call_5 language step in .* → \"summary of: Translate high tide", output)


async def test_trace_marks_the_revision_and_pairs_side_by_side_language_steps(
    agent: AgentCore,
) -> None:
    """The timeline has a revision marker and list entry (replaced call struck through), and
    two language steps streaming at once each get their own finished LLM span."""
    result = await agent.process(AgentProps("Tides in Brest", "t1"))
    observations: list[Observation] = await agent.observations.get_observations("t1")
    timeline = build_timeline(observations, result.metadata.trace_id)

    [revision] = timeline.revisions
    assert (revision.label, revision.replaced, revision.added) == (
        "plan revised (1)",
        ["call_2"],
        ["call_3", "call_4", "call_5"],
    )
    assert [m.label for m in timeline.markers if m.kind == "revision"] == ["plan revised (1)"]
    language = [s for s in timeline.spans if s.kind == "llm" and s.name == "language_step"]
    assert [s.status for s in language] == ["success", "success"]
    steps: list[Any] = [s for s in timeline.spans if s.kind == "tool" and s.name == "language step"]
    assert [s.label for s in steps] == ["call_4 · language step", "call_5 · language step"]
    assert steps[0].details["instruction"] == "Summarise high tide in Brest at 06:12."

    page = render_html(timeline)
    assert "Plan revisions" in page
    assert "replaced <del>call_2</del> (never ran)" in page
    assert 'class="marker revision"' in page
