"""The live view's state and rendering, fed observations in-process."""

from __future__ import annotations

import io
from itertools import count
from typing import Any

import pytest
from rich.console import Console

from pes_agent import AgentProps, Observation, ObservationType, StreamEvent, create_agent
from pes_agent.cli.demo import DEMO_QUERY, demo_model, demo_tools
from pes_agent.cli.live import LiveView, PlainView, RunHeader, RunState, make_view

HEADER = RunHeader("Compare two cities", "t1", "openai:test-model")


def _terminal(width: int = 110) -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=width, color_system=None)


def _text(view: LiveView, width: int = 110) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(view.render())
    return console.export_text()


_ids = count()


def _obs(kind: ObservationType, **content: Any) -> Observation:
    return Observation(
        id=f"o{next(_ids)}",
        thread_id="t1",
        trace_id="trace-1",
        type=kind,
        title="",
        content=content,
    )


PLAN = _obs(
    ObservationType.PLAN,
    status="ready",
    plan="1. both\n2. compare",
    toolCalls=[
        {"call_id": "c1", "tool_name": "lookup", "arguments": {"city": "A"}, "depends_on": []},
        {"call_id": "c2", "tool_name": "lookup", "arguments": {"city": "B"}, "depends_on": []},
        {
            "call_id": "c3",
            "tool_name": "compare",
            "arguments": {"a": "{step_1_result.n}", "b": "<step_2_result>"},
            "depends_on": [],
        },
    ],
)


def test_parallel_calls_show_as_running_side_by_side() -> None:
    """Two started calls both show a running spinner; the dependent call waits for both."""
    view = LiveView(_terminal(), HEADER)
    for observation in (
        _obs(ObservationType.LLM_STREAM_START, phase="planning", provider="openai", model="m"),
        _obs(ObservationType.INTENT, intent="compare A and B"),
        PLAN,
        _obs(ObservationType.TOOL_CALL, callId="c1", toolName="lookup", arguments={"city": "A"}),
        _obs(ObservationType.TOOL_CALL, callId="c2", toolName="lookup", arguments={"city": "B"}),
    ):
        view.state.apply_observation(observation)
    text = _text(view)
    running = [line for line in text.splitlines() if "running" in line and "lookup" in line]
    assert len(running) == 2
    assert "after c1, c2" in text
    assert 'compare {"a": "{step_1_result.n}"' in text
    assert "intent: compare A and B" in text


def test_a_finished_call_shows_status_duration_and_result() -> None:
    """A finished call shows ✓ or ✗, its duration, and its output or error."""
    state = RunState()
    state.apply_observation(PLAN)
    state.apply_observation(
        _obs(ObservationType.TOOL_CALL, callId="c1", toolName="lookup", arguments={"city": "A"})
    )
    state.apply_observation(
        _obs(
            ObservationType.TOOL_EXECUTION,
            callId="c1",
            toolName="lookup",
            status="success",
            output={"n": 3},
            durationMs=512.0,
        )
    )
    state.apply_observation(
        _obs(
            ObservationType.TOOL_EXECUTION,
            callId="c2",
            toolName="lookup",
            status="error",
            error="not found",
            durationMs=3.0,
        )
    )
    view = LiveView(_terminal(), HEADER)
    view.state = state
    text = _text(view)
    assert "✓ success" in text
    assert "512 ms" in text
    assert '→ {"n": 3}' in text
    assert "✗ error" in text
    assert "→ not found" in text


def test_streamed_tokens_build_the_plan_preview_and_the_answer() -> None:
    """Planning tokens show while planning; synthesis tokens build the answer; a restart
    drops what the interrupted stream had sent."""
    state = RunState()
    start = _obs(ObservationType.LLM_STREAM_START, phase="planning", provider="p", model="m")
    state.apply_observation(start)
    state.apply_stream(StreamEvent("t1", "trace-1", "planning", "thinking", "hmm "))
    state.apply_stream(StreamEvent("t1", "trace-1", "planning", "token", '{"intent"'))
    assert (state.thinking_stream, state.plan_stream) == ("hmm ", '{"intent"')
    state.apply_observation(
        _obs(ObservationType.LLM_STREAM_START, phase="synthesis", provider="p", model="m")
    )
    state.apply_stream(StreamEvent("t1", "trace-1", "synthesis", "token", "draft"))
    state.apply_stream(StreamEvent("t1", "trace-1", "synthesis", "restart", "cut"))
    state.apply_stream(StreamEvent("t1", "trace-1", "synthesis", "token", "Final "))
    state.apply_stream(StreamEvent("t1", "trace-1", "synthesis", "token", "answer."))
    assert state.answer == "Final answer."
    assert state.stage == "synthesizing"


def test_cancel_marks_unfinished_calls_and_shows_in_the_footer() -> None:
    """After Ctrl-C, calls that were running or waiting show as cancelled, and the view's
    last line says the run was cancelled."""
    view = LiveView(_terminal(), HEADER)
    view.state.apply_observation(PLAN)
    view.state.apply_observation(
        _obs(ObservationType.TOOL_CALL, callId="c1", toolName="lookup", arguments={"city": "A"})
    )
    view.state.cancel()
    text = _text(view)
    assert not [line for line in text.splitlines() if "lookup" in line and "running" in line]
    assert text.count("⊘ cancelled") == 3
    assert "cancelled" in text.strip().splitlines()[-1]


def test_make_view_picks_live_for_terminals_and_plain_otherwise() -> None:
    """A terminal gets the live display; a pipe or a dumb terminal gets plain lines."""
    assert isinstance(make_view(_terminal(), HEADER), LiveView)
    assert isinstance(make_view(Console(file=io.StringIO()), HEADER), PlainView)


@pytest.mark.slow
async def test_live_view_over_a_whole_demo_run_ends_with_the_summary() -> None:
    """A demo run through the live display leaves a final frame with the calls, the answer
    and the status line."""
    terminal = _terminal(120)
    view = LiveView(terminal, RunHeader(DEMO_QUERY, "demo", "scripted model", scripted=True))
    async with create_agent(provider=demo_model(), tools=demo_tools()) as agent:
        with view:
            detach = view.attach(agent, "demo")
            result = await agent.process(AgentProps(DEMO_QUERY, "demo"))
            detach()
            view.finish(result)
    assert result.metadata.status == "success"
    final = _text(view, 120)
    for call in ("call_1", "call_2", "call_3", "call_4"):
        assert call in final
    assert final.count("✓ success") == 4
    assert "Go to Lisbon" in final  # markdown rendered: no asterisks
    assert "success" in final.strip().splitlines()[-1]
    assert "4 tool calls" in final
    written = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert "Go to Lisbon" in written


def test_the_retrieved_passages_show_before_the_plan_in_both_views() -> None:
    """A RETRIEVAL observation is a line with the passages' ids, scores and the time in the
    live view (above the plan) and in the plain view; a failed search shows its error."""
    found = _obs(
        ObservationType.RETRIEVAL,
        status="done",
        query="warranty?",
        ids=["docs/warranty.md#0", "docs/faq.md#3"],
        scores=[0.8312, 0.5],
        durationMs=12.0,
    )
    view = LiveView(_terminal(), HEADER)
    view.state.apply_observation(found)
    view.state.apply_observation(PLAN)
    text = _text(view)
    assert (
        "⌕ retrieved 2 passages in 12 ms: docs/warranty.md#0 (0.83), docs/faq.md#3 (0.50)" in text
    )
    assert text.index("retrieved 2 passages") < text.index("1. both")

    out = io.StringIO()
    plain = PlainView(Console(file=out, width=200, color_system=None), HEADER)
    plain._on_observation(found)
    plain._on_observation(
        _obs(
            ObservationType.RETRIEVAL,
            status="failed",
            query="q",
            error="store gone",
            durationMs=3.0,
        )
    )
    printed = out.getvalue()
    assert "retrieved 2 passages in 12 ms: docs/warranty.md#0 (0.83)" in printed
    assert "retrieval failed in 3 ms: store gone" in printed


def test_a_step_number_too_long_to_be_a_placeholder_is_shown_as_text() -> None:
    """Model text such as `{step_<5,000 digits>_result}` is no placeholder (the executor
    passes it on as written): the view shows the call without a dependency, and does not
    fail on a number Python refuses to read."""
    huge = "{step_" + "9" * 5000 + "_result}"
    state = RunState()
    state.apply_observation(
        _obs(
            ObservationType.PLAN,
            status="ready",
            toolCalls=[
                {"call_id": "c1", "tool_name": "lookup", "arguments": {"city": "A"}},
                {"call_id": "c2", "tool_name": "echo", "arguments": {"text": huge}},
                {"call_id": "c3", "tool_name": "echo", "arguments": {"text": "{step_1_result}"}},
            ],
        )
    )
    assert [row.depends_on for row in state.rows] == [[], [], ["c1"]]
