"""`pes-agent trace`'s HTML timeline, which lives in `pes_agent.observing.timeline`.

The HTTP server renders the same page for its web console without the CLI's dependencies, so
the timeline moved out of this package; its names stay importable from here.
"""

from __future__ import annotations

from pes_agent.observing.timeline import (
    Approval,
    Marker,
    Revision,
    Span,
    SpanKind,
    SpanStatus,
    Timeline,
    build_timeline,
    embed_json,
    render_html,
)

__all__ = [
    "Approval",
    "Marker",
    "Revision",
    "Span",
    "SpanKind",
    "SpanStatus",
    "Timeline",
    "build_timeline",
    "embed_json",
    "render_html",
]
