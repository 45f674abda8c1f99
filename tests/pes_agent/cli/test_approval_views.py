"""How the live view and the HTML trace show calls that wait for approval, fed observations."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from rich.console import Console

from pes_agent import Observation, ObservationType
from pes_agent.approvals import PausedRun
from pes_agent.cli.live import LiveView, RunHeader
from pes_agent.cli.trace import build_timeline, render_html
from pes_agent.planning.plan import ParsedToolCall, PlanningOutput
from pes_agent.run import AgentProps, PendingApproval
from pes_agent.tools.base import ToolResult

HEADER = RunHeader("Pay Alice", "t1", "openai:test-model")
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
_ids = count()


def _obs(kind: ObservationType, at_ms: float = 0.0, **content: Any) -> Observation:
    return Observation(
        id=f"o{next(_ids)}",
        thread_id="t1",
        trace_id="trace-1",
        type=kind,
        title="",
        content=content,
        timestamp=START + timedelta(milliseconds=at_ms),
    )


def _text(view: LiveView) -> str:
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    console.print(view.render())
    return console.export_text()


def _view() -> LiveView:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    return LiveView(console, HEADER)


PLAN = _obs(
    ObservationType.PLAN,
    status="ready",
    plan="1. pay",
    toolCalls=[
        {"call_id": "call_1", "tool_name": "transfer_money", "arguments": {"amount": 250}},
    ],
)
REQUESTED = _obs(
    ObservationType.APPROVAL_REQUESTED,
    10,
    callId="call_1",
    toolName="transfer_money",
    arguments={"amount": 250},
    mode="paused",
)


def test_a_call_waiting_for_approval_shows_as_such_until_decided() -> None:
    """APPROVAL_REQUESTED turns the row into "waiting for approval"; a denial shows "denied"."""
    view = _view()
    view.state.apply_observation(PLAN)
    view.state.apply_observation(REQUESTED)
    assert "⏸ waiting for approval" in _text(view)
    assert [row.call_id for row in view.state.awaiting] == ["call_1"]
    view.state.apply_observation(
        _obs(
            ObservationType.APPROVAL_DECIDED,
            callId="call_1",
            toolName="transfer_money",
            decision="deny",
            reason="too much",
        )
    )
    text = _text(view)
    assert "waiting for approval" not in text
    assert "denied" in text
    assert view.state.awaiting == []


def test_restore_shows_a_paused_run_with_its_finished_and_waiting_calls() -> None:
    """A resumed run's view starts from the plan: finished calls done, gated ones waiting."""
    paused = PausedRun(
        thread_id="t1",
        trace_id="trace-1",
        props=AgentProps("Pay Alice", "t1"),
        planning=PlanningOutput(title="Pay", plan="1. look\n2. pay"),
        calls=[
            ParsedToolCall(call_id="call_1", tool_name="get_weather", arguments={"city": "X"}),
            ParsedToolCall(call_id="call_2", tool_name="transfer_money", arguments={"amount": 9}),
        ],
        results={
            1: ToolResult(
                call_id="call_1", tool_name="get_weather", status="success", output="sunny"
            )
        },
        pending=[PendingApproval(call_id="call_2", tool_name="transfer_money", arguments={})],
    )
    view = _view()
    view.restore(paused)
    assert [row.status for row in view.state.rows] == ["success", "approval"]
    text = _text(view)
    assert "✓ Pay" in text
    assert '→ "sunny"' in text
    assert "⏸ waiting for approval" in text


def test_trace_cuts_the_wait_out_of_the_axis_and_lists_the_decision() -> None:
    """A run resumed an hour after its pause is drawn without the hour, with a pause marker."""
    hour = 3_600_000.0
    observations = [
        _obs(ObservationType.PLAN, 0, status="preparing"),
        PLAN,
        REQUESTED,
        _obs(
            ObservationType.APPROVAL_DECIDED,
            hour,
            callId="call_1",
            toolName="transfer_money",
            decision="approve",
        ),
        _obs(ObservationType.FINAL_RESPONSE, hour + 40, status="success", message={}),
    ]
    timeline = build_timeline(observations, "trace-1")
    assert timeline.status == "success"
    assert timeline.waited_ms == hour - 10
    assert timeline.duration_ms == 50
    kinds = [marker.kind for marker in timeline.markers]
    assert kinds == ["approval", "pause", "decision", "final"]
    assert timeline.approvals[0].decision == "approve"
    assert timeline.approvals[0].decided_ms == 10
    page = render_html(timeline)
    assert "that wait is cut out of the time axis" in page
    assert '<b class="approve">approved</b>' in page


def test_trace_of_a_run_still_waiting_is_awaiting_approval() -> None:
    """A paused run that was not resumed has the status awaiting_approval and no decision."""
    timeline = build_timeline([PLAN, REQUESTED], "trace-1")
    assert timeline.status == "awaiting_approval"
    assert timeline.approvals[0].decision is None
    assert "waiting for a decision" in render_html(timeline)
