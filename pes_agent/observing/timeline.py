"""One run's observations as a timeline, and that timeline as a self-contained HTML page.

`pes-agent trace --html` writes the page; the HTTP server (`pes_agent.server`) serves it to the
web console. It needs nothing beyond the library itself.

`build_timeline(observations, trace_id)` pairs the run's observations into spans:

- an LLM call runs from `LLM_STREAM_START` to `LLM_STREAM_END` (an `LLM_STREAM_ERROR` ends it as
  `error`, or as `retried` when the provider tried again, which starts a new span);
- a tool call runs from `TOOL_CALL` to the `TOOL_EXECUTION` whose `parent_id` is that call (a
  call refused or skipped before it started has only its `TOOL_EXECUTION`). A language step is
  such a span too, labelled "language step" with its instruction in the details; the model call
  it made is its own LLM span (phase `language_step`).
- a plan discarded while its calls were running (streaming dispatch: the answer turned out
  unusable and is repaired) is a `discarded` marker; the calls it cancelled end as errors.
- each re-evaluation of the plan (`create_agent(reevaluate=...)`) is a `revision` marker on the
  axis and an entry of `Timeline.revisions`: the page lists each revision with the calls it
  replaced (struck through: they never ran) and the calls it added, and each plan kept.
- a call that needs approval is an `approval` marker where it was asked about (APPROVAL_REQUESTED)
  and a `decision` marker where it was decided (APPROVAL_DECIDED), and an entry of
  `Timeline.approvals`, listed on the page with its arguments and decision. A run that paused
  and was resumed later (`agent.resume`, `pes-agent approve`) has a `pause` marker; the time it
  waited is cut out of the axis (the marker says how long it was), so the bars stay readable
  after a wait of hours. A run still waiting has the status `awaiting_approval`.

`render_html(timeline)` draws the spans as bars on a shared time axis, so calls that ran side by
side overlap at a glance; hovering a bar shows a summary, clicking it shows its arguments and
result, or its error, in full. The page has no external assets (inline CSS and JS). Every piece
of text is escaped, and the data is embedded as JSON in
`<script type="application/json" id="trace-data">` with `<`, `>` and `&` written as `\\u003c`,
`\\u003e` and `\\u0026`, so no model output can close the script element.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pes_agent.observing.types import Observation, ObservationType
from pes_agent.threads.messages import ConversationMessage, MessageRole

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
    "script_csp_source",
]

SpanKind = Literal["llm", "tool"]
SpanStatus = Literal["success", "error", "retried", "unfinished"]


@dataclass(slots=True)
class Span:
    """One bar of the timeline: an LLM call or a tool call, in ms since the run started."""

    id: str
    kind: SpanKind
    label: str
    name: str
    start_ms: float
    end_ms: float | None = None
    status: SpanStatus = "unfinished"
    call_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float | None:
        return None if self.end_ms is None else self.end_ms - self.start_ms


@dataclass(slots=True)
class Marker:
    """A moment of the run worth a mark on the axis: an error, a re-evaluation of the plan, a
    plan discarded while its calls ran, a call asked about or decided, the run's pause for
    approval, or the final response."""

    at_ms: float
    kind: Literal["error", "final", "revision", "discarded", "approval", "decision", "pause"]
    label: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Revision:
    """One re-evaluation of the plan: `status` `"revised"` (revision `number`, the `replaced`
    call ids that never ran, the `added` calls) or `"kept"`, `"unusable"`, `"failed"`."""

    at_ms: float
    status: str
    number: int
    label: str
    replaced: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    reason: str | None = None


@dataclass(slots=True)
class Approval:
    """A call that needed approval: asked about at `requested_ms` (`mode` `"paused"`: the run
    paused; `"handler"`: the approval handler was asked), decided at `decided_ms` (`decision`
    `"approve"` or `"deny"` with `reason`; None while it waits)."""

    call_id: str
    tool_name: str
    arguments: Any
    requested_ms: float
    mode: str
    decision: str | None = None
    reason: str | None = None
    decided_ms: float | None = None


@dataclass(slots=True)
class Timeline:
    """Everything the HTML page shows about one run; also what it embeds as JSON."""

    thread_id: str
    trace_id: str
    started_at: str
    duration_ms: float
    status: str
    query: str | None
    answer: str | None
    spans: list[Span]
    markers: list[Marker]
    revisions: list[Revision] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    waited_ms: float = 0.0
    """Time the run spent paused for approval, cut out of the axis."""

    def to_json(self) -> dict[str, Any]:
        """The timeline as plain JSON data (spans carry their `duration_ms`)."""
        data = asdict(self)
        for span, raw in zip(self.spans, data["spans"], strict=True):
            raw["duration_ms"] = span.duration_ms
        return data


def _ms(observation: Observation, origin: Observation) -> float:
    return (observation.timestamp - origin.timestamp).total_seconds() * 1000


def build_timeline(
    observations: list[Observation],
    trace_id: str,
    *,
    messages: Sequence[ConversationMessage] = (),
) -> Timeline:
    """The timeline of run `trace_id` from its thread's observations (and messages, for the
    query and answer text). `observations` must hold at least one of the run's."""
    run = [o for o in observations if o.trace_id == trace_id]
    if not run:
        raise ValueError(f"no observations of trace {trace_id!r}")
    origin = run[0]
    spans: list[Span] = []
    markers: list[Marker] = []
    revisions: list[Revision] = []
    approvals: dict[str, Approval] = {}
    # Where the run paused (ms on the raw clock) while it waits for a resume; the wait is cut
    # out of the axis by shifting everything after it back by `waited`.
    paused_at: float | None = None
    last_raw = 0.0
    waited = 0.0
    # By the call's number (`llmCall`): language steps stream side by side in one phase.
    open_llm: dict[object, Span] = {}
    open_tools: dict[str, Span] = {}
    last_llm: dict[str, Span] = {}
    status = "unfinished"
    llm_count = 0
    for observation in run:
        raw = _ms(observation, origin)
        if paused_at is not None and observation.type is ObservationType.APPROVAL_DECIDED:
            waited += raw - last_raw
            markers.append(
                Marker(
                    paused_at,
                    "pause",
                    f"paused for approval, resumed {_duration(raw - last_raw)} later "
                    "(the wait is not drawn to scale)",
                    {"waited_ms": raw - last_raw},
                )
            )
            paused_at = None
        last_raw = raw
        at = raw - waited
        content = observation.content
        kind = observation.type
        phase = str(content.get("phase", ""))
        key = str(content.get("llmCall", phase))
        if kind is ObservationType.LLM_STREAM_START:
            llm_count += 1
            model = f"{content.get('provider')}:{content.get('model')}"
            span = Span(
                id=f"llm-{llm_count}",
                kind="llm",
                label=f"{phase} · {model}",
                name=phase,
                start_ms=at,
                details={"phase": phase, "provider": content.get("provider"), "model": model},
            )
            spans.append(span)
            open_llm[key] = last_llm[phase] = span
        elif kind is ObservationType.LLM_STREAM_METADATA and key in open_llm:
            open_llm[key].details.update(
                {
                    "usage": content.get("usage"),
                    "stop_reason": content.get("stop_reason"),
                    "time_to_first_token_ms": content.get("time_to_first_token_ms"),
                }
            )
        elif kind is ObservationType.LLM_STREAM_END and key in open_llm:
            span = open_llm.pop(key)
            span.end_ms, span.status = at, "success"
        elif kind is ObservationType.LLM_STREAM_ERROR and key in open_llm:
            span = open_llm.pop(key)
            span.end_ms = at
            span.status = "retried" if content.get("retrying") else "error"
            span.details["error"] = content.get("error")
        elif kind is ObservationType.THOUGHTS and phase in last_llm:
            last_llm[phase].details.setdefault("thoughts", []).append(content.get("text"))
        elif kind is ObservationType.PLAN and content.get("status") == "ready":
            target = last_llm.get("repair") or last_llm.get("planning")
            if target is not None:
                target.details.update(
                    {
                        "plan": content.get("plan"),
                        "tool_calls": content.get("toolCalls"),
                        "model_output": content.get("raw"),
                    }
                )
        elif kind is ObservationType.PLAN and str(content.get("status")) in _REEVALUATED:
            revision = _revision(at, content)
            revisions.append(revision)
            markers.append(Marker(at, "revision", revision.label, dict(content)))
            if "reevaluation" in last_llm:
                last_llm["reevaluation"].details["outcome"] = revision.label
        elif kind is ObservationType.PLAN and content.get("status") == "discarded":
            cancelled = ", ".join(map(str, content.get("cancelled") or ())) or "none"
            label = f"plan discarded ({content.get('reason')}); cancelled: {cancelled}"
            markers.append(Marker(at, "discarded", label, dict(content)))
        elif kind in (ObservationType.TITLE, ObservationType.INTENT):
            target = last_llm.get("repair") or last_llm.get("planning")
            if target is not None:
                key = kind.value.lower()
                target.details[key] = content.get(key)
        elif kind is ObservationType.TOOL_CALL:
            call_id = str(content.get("callId"))
            name = _call_name(content)
            span = Span(
                id=f"tool-{len(spans) + 1}",
                kind="tool",
                label=f"{call_id} · {name}",
                name=name,
                start_ms=at,
                call_id=call_id,
                details={"arguments": content.get("arguments")},
            )
            if content.get("kind") == "language":
                span.details.update({"kind": "language", "instruction": content.get("instruction")})
            spans.append(span)
            open_tools[observation.id] = span
        elif kind is ObservationType.TOOL_EXECUTION:
            span_or_none = open_tools.pop(observation.parent_id or "", None)
            if span_or_none is None:
                # Refused or skipped before it started: it only has an end.
                call_id = str(content.get("callId"))
                took = _number(content.get("durationMs"))
                span_or_none = Span(
                    id=f"tool-{len(spans) + 1}",
                    kind="tool",
                    label=f"{call_id} · {_call_name(content)}",
                    name=_call_name(content),
                    start_ms=max(at - took, 0.0),
                    call_id=call_id,
                    details={"started": False},
                )
                spans.append(span_or_none)
            span_or_none.end_ms = at
            span_or_none.status = "error" if content.get("status") == "error" else "success"
            span_or_none.details.update(
                {
                    "status": content.get("status"),
                    "output": content.get("output"),
                    "error": content.get("error"),
                    "duration_ms": content.get("durationMs"),
                }
            )
        elif kind is ObservationType.APPROVAL_REQUESTED:
            call_id, tool_name = str(content.get("callId")), str(content.get("toolName"))
            mode = str(content.get("mode", "paused"))
            approvals[call_id] = Approval(call_id, tool_name, content.get("arguments"), at, mode)
            markers.append(
                Marker(at, "approval", f"{call_id} {tool_name} waits for approval", dict(content))
            )
            if mode == "paused":
                paused_at = at
                status = "awaiting_approval"
        elif kind is ObservationType.APPROVAL_DECIDED:
            call_id, tool_name = str(content.get("callId")), str(content.get("toolName"))
            decision = str(content.get("decision"))
            approval = approvals.get(call_id) or approvals.setdefault(
                call_id, Approval(call_id, tool_name, None, at, "paused")
            )
            approval.decision, approval.reason = decision, _text(content.get("reason"))
            approval.decided_ms = at
            label = f"{call_id} {tool_name} {'approved' if decision == 'approve' else 'denied'}"
            markers.append(Marker(at, "decision", label, dict(content)))
            if status == "awaiting_approval":
                status = "unfinished"
        elif kind is ObservationType.ERROR:
            # A run cancelled (by its caller, the API or aclose) records an ERROR of phase
            # "cancelled": it did not fail, and the CLI and the console say "cancelled".
            status = "cancelled" if content.get("phase") == "cancelled" else "error"
            markers.append(
                Marker(at, "error", str(content.get("error", observation.title)), dict(content))
            )
        elif kind is ObservationType.FINAL_RESPONSE:
            status = str(content.get("status", "success"))
            message = content.get("message") or {}
            markers.append(Marker(at, "final", f"final response ({status})", {"status": status}))
            if "synthesis" in last_llm and isinstance(message, dict):
                last_llm["synthesis"].details["answer"] = message.get("content")
    duration = _ms(run[-1], origin) - waited
    query = answer = None
    for message in messages:
        if message.metadata.get("trace_id") != trace_id:
            continue
        if message.role is MessageRole.USER:
            query = message.content
        elif message.role is MessageRole.AI:
            answer = message.content
    return Timeline(
        thread_id=origin.thread_id,
        trace_id=trace_id,
        started_at=origin.timestamp.isoformat(),
        duration_ms=duration,
        status=status,
        query=query,
        answer=answer,
        spans=spans,
        markers=markers,
        revisions=revisions,
        approvals=list(approvals.values()),
        waited_ms=waited,
    )


_REEVALUATED = frozenset({"revised", "kept", "unusable", "failed"})


def _call_name(content: dict[str, Any]) -> str:
    """What a call ran: its tool's name, or "language step"."""
    return "language step" if content.get("kind") == "language" else str(content.get("toolName"))


def _revision(at: float, content: dict[str, Any]) -> Revision:
    status = str(content.get("status"))
    number = int(_number(content.get("revision")))
    if status == "revised":
        replaced = [str(call_id) for call_id in _items(content.get("replaced"))]
        added = [
            str(call.get("call_id"))
            for call in _items(content.get("toolCalls"))
            if isinstance(call, dict)
        ]
        label = f"plan revised ({number})"
        return Revision(at, status, number, label, replaced=replaced, added=added)
    label = {
        "kept": "plan kept",
        "unusable": "plan kept: the revision could not be used",
        "failed": "plan kept: the re-evaluation failed",
    }[status]
    return Revision(at, status, number, label, reason=_text(content.get("reason")))


# An observation's content is what its recorder wrote, but an application may record its own
# (ObservationManager.record): a value of another type than ours leaves that detail out, and
# never fails the timeline of the whole run.


def _number(value: Any) -> float:
    """`value` if it is a finite number, else 0."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _items(value: Any) -> list[Any]:
    """`value` if it is a list, else none."""
    return list(value) if isinstance(value, list | tuple) else []


def _text(value: Any) -> str | None:
    """`value` as text (None stays None)."""
    return None if value is None else str(value)


def embed_json(data: Any) -> str:
    """JSON that is safe inside a `<script>` element: no `<`, `>` or `&` appear literally."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _duration(ms: float | None) -> str:
    if ms is None:
        return "unfinished"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _tick_step(total_ms: float) -> float:
    """A round axis step (1, 2 or 5 × 10^n ms) giving about six ticks."""
    raw = max(total_ms, 1.0) / 6
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def _summary(span: Span) -> str:
    """The hover text of a bar: what ran, how it went, and a short look at its data."""
    parts = [f"{span.label} — {span.status}, {_duration(span.duration_ms)}"]
    details = span.details
    if span.kind == "tool":
        parts.append("arguments: " + json.dumps(details.get("arguments"), ensure_ascii=False))
        if details.get("error"):
            parts.append(f"error: {details['error']}")
        elif "output" in details:
            parts.append("result: " + json.dumps(details.get("output"), default=str))
    else:
        usage = details.get("usage")
        if isinstance(usage, dict) and usage:
            parts.append(
                f"tokens: {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
            )
        if details.get("error"):
            parts.append(f"error: {details['error']}")
    text = "\n".join(parts)
    return text if len(text) <= 600 else text[:599] + "…"


_CSS = """
:root { --llm: #4f7fd9; --ok: #2f9e5b; --err: #d64545; --retry: #e0892b; --muted: #6b7280;
        --grid: #e5e7eb; --bg: #ffffff; --fg: #111827; --panel: #f9fafb; --rev: #8b5cf6;
        --appr: #c026d3; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
       Roboto, sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: var(--muted); margin-bottom: 12px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff;
         font-weight: 600; font-size: 12px; }
.badge.success { background: var(--ok); } .badge.partial { background: var(--retry); }
.badge.error { background: var(--err); } .badge.unfinished { background: var(--muted); }
.qa { display: grid; grid-template-columns: 70px 1fr; gap: 4px 12px; margin: 12px 0 20px; }
.qa div:nth-child(odd) { color: var(--muted); }
.qa div:nth-child(even) { white-space: pre-wrap; }
.chart { position: relative; }
.row { display: grid; grid-template-columns: 230px 1fr 80px; align-items: center;
       min-height: 26px; }
.label { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; padding-right: 8px;
         font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.track { position: relative; height: 22px; border-left: 1px solid var(--grid); }
.grid { position: absolute; top: 0; bottom: 0; width: 1px; background: var(--grid); }
.bar { position: absolute; top: 3px; height: 16px; min-width: 3px; border-radius: 3px;
       cursor: pointer; opacity: .9; }
.bar:hover, .bar:focus, .bar.selected { opacity: 1; outline: 2px solid var(--fg); }
.bar.llm { background: var(--llm); } .bar.tool.success { background: var(--ok); }
.bar.error { background: var(--err); } .bar.retried { background: var(--retry); }
.bar.unfinished { background: repeating-linear-gradient(45deg, #9ca3af 0 6px, #d1d5db 6px 12px); }
.dur { text-align: right; color: var(--muted); font-variant-numeric: tabular-nums; }
.axis { position: relative; height: 20px; margin-left: 230px; margin-right: 80px;
        color: var(--muted); font-size: 11px; }
.tick { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.marker { position: absolute; top: 0; bottom: 0; width: 2px; }
.marker.error { background: var(--err); } .marker.final { background: var(--fg); }
.marker.revision { background: var(--rev); }
.marker.discarded { background: var(--err); opacity: .55; }
.marker.approval { background: var(--appr); } .marker.decision { background: var(--appr);
  opacity: .55; } .marker.pause { background: repeating-linear-gradient(180deg, var(--appr) 0 4px,
  transparent 4px 8px); width: 3px; }
.badge.awaiting_approval { background: var(--appr); } .badge.cancelled { background: #4b5563; }
.approvals { margin: 0 0 16px; padding-left: 20px; } .approvals code { font-size: 12px; }
.approvals .deny { color: var(--err); } .approvals .approve { color: var(--ok); }
.revisions-title { font-size: 15px; margin: 8px 0 4px; }
.revisions { margin: 0 0 16px; padding-left: 20px; } .revisions del { color: var(--muted); }
.legend { margin: 8px 0 16px; color: var(--muted); font-size: 12px; }
.legend span { display: inline-block; width: 12px; height: 10px; border-radius: 2px;
               margin: 0 4px 0 12px; vertical-align: middle; }
#details { background: var(--panel); border: 1px solid var(--grid); border-radius: 6px;
           padding: 12px 16px; margin-top: 16px; }
#details h2 { font-size: 15px; margin: 0 0 8px; }
#details pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 12px; }
table.spans { border-collapse: collapse; margin-top: 20px; width: 100%; font-size: 13px; }
table.spans th, table.spans td { text-align: left; padding: 4px 8px;
                                 border-bottom: 1px solid var(--grid); }
table.spans tr[data-span] { cursor: pointer; }
"""

_JS = """
(function () {
  var data = JSON.parse(document.getElementById("trace-data").textContent);
  var byId = {};
  data.spans.forEach(function (span) { byId[span.id] = span; });
  var title = document.getElementById("details-title");
  var body = document.getElementById("details-body");
  function show(id) {
    var span = byId[id];
    if (!span) { return; }
    document.querySelectorAll(".bar.selected").forEach(function (el) {
      el.classList.remove("selected");
    });
    var bar = document.querySelector('.bar[data-span="' + id + '"]');
    if (bar) { bar.classList.add("selected"); }
    title.textContent = span.label + " \\u2014 " + span.status;
    var shown = {start_ms: span.start_ms, end_ms: span.end_ms, duration_ms: span.duration_ms};
    Object.keys(span.details).forEach(function (key) { shown[key] = span.details[key]; });
    body.textContent = JSON.stringify(shown, null, 2);
  }
  document.querySelectorAll("[data-span]").forEach(function (el) {
    el.addEventListener("click", function () { show(el.getAttribute("data-span")); });
    el.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { show(el.getAttribute("data-span")); }
    });
  });
})();
"""


def script_csp_source() -> str:
    """The Content-Security-Policy source (`'sha256-…'`) that allows the page's inline script.

    A page showing the timeline in a `srcdoc` iframe lends the frame its own policy, so a
    policy without inline scripts must list this in `script-src` for the bars to be clickable.
    """
    digest = hashlib.sha256(_JS.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def _approvals_html(timeline: Timeline) -> str:
    """The list of calls that needed approval, with their arguments and decisions."""
    if not timeline.approvals:
        return ""
    esc = html.escape
    items = []
    for approval in timeline.approvals:
        arguments = json.dumps(approval.arguments, ensure_ascii=False, default=str)
        asked = "the run paused" if approval.mode == "paused" else "asked the approval handler"
        text = (
            f"<b>{esc(approval.call_id)}</b> {esc(approval.tool_name)} "
            f"<code>{esc(arguments)}</code> · at {esc(_duration(approval.requested_ms))} "
            f"{esc(asked)}"
        )
        if approval.decision is None:
            text += " · <b>waiting for a decision</b>"
        else:
            word = "approved" if approval.decision == "approve" else "denied"
            css = "approve" if approval.decision == "approve" else "deny"
            text += f' · <b class="{css}">{word}</b>'
            if approval.reason:
                text += f": {esc(approval.reason)}"
        items.append(f'<li data-approval="{esc(approval.call_id)}">{text}</li>')
    waited = ""
    if timeline.waited_ms:
        waited = (
            f'<p class="meta">The run waited {esc(_duration(timeline.waited_ms))} for the '
            "decisions; that wait is cut out of the time axis.</p>"
        )
    return (
        '<h2 class="revisions-title">Approvals</h2><ul class="approvals">'
        + "".join(items)
        + "</ul>"
        + waited
    )


def render_html(timeline: Timeline) -> str:
    """The timeline as one HTML page with no external assets."""
    esc = html.escape
    total = max(timeline.duration_ms, 1.0)

    def pct(ms: float) -> str:
        return f"{min(max(ms / total * 100, 0.0), 100.0):.3f}%"

    step = _tick_step(total)
    ticks = [i * step for i in range(int(total // step) + 1)]
    grid = "".join(f'<div class="grid" style="left:{pct(t)}"></div>' for t in ticks)
    axis = "".join(
        f'<div class="tick" style="left:{pct(t)}">{esc(_duration(t) if t else "0")}</div>'
        for t in ticks
    )
    marks = "".join(
        f'<div class="marker {m.kind}" style="left:{pct(m.at_ms)}" title="{esc(m.label)}"></div>'
        for m in timeline.markers
    )
    rows: list[str] = []
    table_rows: list[str] = []
    for span in timeline.spans:
        end = span.end_ms if span.end_ms is not None else timeline.duration_ms
        width = f"{max((end - span.start_ms) / total * 100, 0.0):.3f}%"
        classes = f"bar {span.kind} {span.status}"
        sid = esc(span.id)
        rows.append(
            f'<div class="row"><div class="label" title="{esc(span.label)}">{esc(span.label)}'
            f'</div><div class="track">{grid}{marks}<div class="{classes}" data-span="{sid}" '
            f'tabindex="0" role="button" style="left:{pct(span.start_ms)};width:{width}" '
            f'title="{esc(_summary(span))}"></div></div>'
            f'<div class="dur">{esc(_duration(span.duration_ms))}</div></div>'
        )
        table_rows.append(
            f'<tr data-span="{sid}"><td>{esc(span.kind)}</td><td>{esc(span.label)}</td>'
            f"<td>{span.start_ms:.0f} ms</td><td>{esc(_duration(span.duration_ms))}</td>"
            f"<td>{esc(span.status)}</td></tr>"
        )
    qa = ""
    if timeline.query is not None or timeline.answer is not None:
        qa = (
            f'<div class="qa"><div>query</div><div>{esc(timeline.query or "")}</div>'
            f"<div>answer</div><div>{esc(timeline.answer or '')}</div></div>"
        )
    revisions = ""
    if timeline.revisions:
        items = []
        for revision in timeline.revisions:
            text = f"<b>{esc(revision.label)}</b> at {esc(_duration(revision.at_ms))}"
            if revision.replaced:
                gone = ", ".join(f"<del>{esc(call_id)}</del>" for call_id in revision.replaced)
                text += f" · replaced {gone} (never ran)"
            if revision.added:
                text += " · added " + esc(", ".join(revision.added))
            if revision.reason and revision.status != "kept":
                text += " · " + esc(revision.reason)
            items.append(f"<li>{text}</li>")
        revisions = (
            '<h2 class="revisions-title">Plan revisions</h2><ul class="revisions">'
            + "".join(items)
            + "</ul>"
        )
    approvals = _approvals_html(timeline)
    tools = sum(1 for s in timeline.spans if s.kind == "tool")
    llms = len(timeline.spans) - tools
    shown = ("success", "partial", "error", "cancelled", "awaiting_approval")
    status = timeline.status if timeline.status in shown else "unfinished"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pes-agent trace {esc(timeline.trace_id)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>pes-agent trace <span class="badge {status}">{esc(timeline.status)}</span></h1>
<div class="meta">thread <b>{esc(timeline.thread_id)}</b> · trace {esc(timeline.trace_id)} ·
started {esc(timeline.started_at)} · {esc(_duration(timeline.duration_ms))} ·
{llms} LLM call{"s" if llms != 1 else ""} · {tools} tool call{"s" if tools != 1 else ""}</div>
{qa}
<div class="legend">click a bar for its details
<span style="background:var(--llm)"></span>LLM call
<span style="background:var(--ok)"></span>tool call
<span style="background:var(--err)"></span>error
<span style="background:var(--retry)"></span>retried
<span style="background:var(--rev)"></span>plan revision
<span style="background:var(--appr)"></span>approval asked / decided</div>
{approvals}
{revisions}
<div class="chart">
{"".join(rows)}
<div class="axis">{axis}</div>
</div>
<section id="details"><h2 id="details-title">Details</h2>
<pre id="details-body">Click a bar (or a row below) to see its arguments and result,
or its error.</pre>
</section>
<table class="spans"><thead><tr><th>kind</th><th>span</th><th>start</th><th>duration</th>
<th>status</th></tr></thead><tbody>{"".join(table_rows)}</tbody></table>
<script type="application/json" id="trace-data">{embed_json(timeline.to_json())}</script>
<script>{_JS}</script>
</body>
</html>
"""
