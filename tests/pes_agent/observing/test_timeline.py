"""`build_timeline` / `render_html` over observations that are not all what pes-agent records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pes_agent import Observation, ObservationType
from pes_agent.observing.timeline import build_timeline, render_html


def observation(kind: ObservationType, at_ms: float, content: dict[str, Any]) -> Observation:
    return Observation(
        thread_id="t",
        trace_id="r1",
        timestamp=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms),
        type=kind,
        title=kind.value,
        content=content,
    )


def test_content_of_unexpected_types_never_fails_the_run_timeline() -> None:
    """Observations whose content values have other types than pes-agent writes (an
    application may record its own) leave those details out; every span is still drawn."""
    llm = {"phase": "planning", "llmCall": ["odd"], "provider": "openai", "model": "m"}
    observations = [
        observation(ObservationType.LLM_STREAM_START, 0, llm),
        observation(ObservationType.LLM_STREAM_METADATA, 5, {**llm, "usage": "lots"}),
        observation(ObservationType.LLM_STREAM_END, 10, llm),
        observation(ObservationType.PLAN, 11, {"status": ["revised"]}),
        observation(
            ObservationType.PLAN,
            12,
            {"status": "revised", "revision": "two", "replaced": 3, "toolCalls": 4},
        ),
        observation(ObservationType.PLAN, 13, {"status": "kept", "revision": 1e999, "reason": 7}),
        observation(
            ObservationType.TOOL_EXECUTION,
            40,
            {"callId": "a", "toolName": "t", "status": "success", "durationMs": "slow"},
        ),
        observation(
            ObservationType.APPROVAL_DECIDED,
            50,
            {"callId": "b", "toolName": "pay", "decision": "deny", "reason": 404},
        ),
    ]
    timeline = build_timeline(observations, "r1")
    assert [(s.kind, s.status, s.start_ms, s.end_ms) for s in timeline.spans] == [
        ("llm", "success", 0, 10),
        ("tool", "success", 40, 40),
    ]
    assert [(r.status, r.number, r.reason) for r in timeline.revisions] == [
        ("revised", 0, None),
        ("kept", 0, "7"),
    ]
    assert timeline.approvals[0].reason == "404"
    page = render_html(timeline)
    assert page.count('class="bar ') == 2
