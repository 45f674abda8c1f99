"""A thread's past runs, read back from its observations: one summary each, and their traces.

Both come from `pes_agent.observing.timeline`, the same timeline `pes-agent trace --html` draws,
so the console's run list, its trace view and the CLI's page agree on a run's status and times.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from pes_agent.observing.timeline import build_timeline, render_html
from pes_agent.observing.types import Observation
from pes_agent.server.models import RunSummary
from pes_agent.threads.messages import ConversationMessage

__all__ = ["run_summaries", "trace_page"]


def run_summaries(
    observations: Sequence[Observation],
    messages: Sequence[ConversationMessage],
    *,
    running: Collection[str] = (),
    queries: Mapping[str, str] = {},
) -> list[RunSummary]:
    """One summary per run (trace id) in `observations`, oldest first.

    `running`: the trace ids this process is executing, whose status is `running` whatever
    their observations say so far. `queries`: the query of runs whose messages are not saved
    yet (a run saves its turn when it ends; a paused run keeps its query in its stored state).
    """
    by_trace: dict[str, list[Observation]] = {}
    for observation in observations:
        by_trace.setdefault(observation.trace_id, []).append(observation)
    summaries = []
    for trace_id, recorded in by_trace.items():
        timeline = build_timeline(recorded, trace_id, messages=messages)
        tools = sum(1 for span in timeline.spans if span.kind == "tool")
        summaries.append(
            RunSummary(
                trace_id=trace_id,
                status="running" if trace_id in running else timeline.status,
                started_at=recorded[0].timestamp,
                duration_ms=timeline.duration_ms,
                query=timeline.query if timeline.query is not None else queries.get(trace_id),
                llm_calls=len(timeline.spans) - tools,
                tool_calls=tools,
            )
        )
    return summaries


def trace_page(
    observations: Sequence[Observation],
    messages: Sequence[ConversationMessage],
    trace_id: str,
) -> str | None:
    """The HTML timeline of run `trace_id`, or None when `observations` hold none of its."""
    recorded = [observation for observation in observations if observation.trace_id == trace_id]
    if not recorded:
        return None
    return render_html(build_timeline(recorded, trace_id, messages=messages))
