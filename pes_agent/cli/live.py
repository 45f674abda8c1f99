"""The views `pes-agent run` and `pes-agent demo` show while the agent works.

Both views are fed the run's observations and stream events and keep a `RunState`:

- `LiveView` (a terminal): a `rich.live.Live` display redrawn about twelve times a second —
  the thinking and the plan as they stream, a table of tool calls whose rows update (a
  spinner while a call runs, its status and duration when done, and a timeline column where
  calls that run side by side show as overlapping bars), the answer as it streams, and the
  status, tokens and time at the end. A language step shows as a call whose tool is
  "language step" and whose argument is its instruction; a revision of the plan
  (`create_agent(reevaluate=...)`) adds a "plan revised (N)" row above its new calls and marks
  the calls it replaced, and a re-evaluation that kept the plan is a line saying so. Calls
  start while the plan streams, so their rows may come before the plan: the plan then fills
  in their dependencies; a plan discarded while its calls ran (to be repaired) leaves its rows
  struck out as "discarded" above the repaired plan's.
- `PlainView` (a pipe or file): the same run as plain lines, one per event, with the answer
  streamed as text — readable in a log and in CI.

`make_view(console, header)` picks the one that suits the console.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.rule import Rule
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from pes_agent.approvals.models import PausedRun
from pes_agent.core import AgentCore
from pes_agent.execution.placeholders import find_references
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.run import AgentFinalResponse, ExecutionMetadata

__all__ = [
    "LiveView",
    "PlainView",
    "RevisionNote",
    "RunHeader",
    "RunState",
    "RunView",
    "ToolRow",
    "compact_json",
    "format_duration",
    "make_view",
    "retrieval_text",
    "summary_text",
]

# "approval": the call waits for a person's decision (`@tool(requires_approval=True)`).
RowStatus = Literal[
    "waiting", "running", "approval", "success", "error", "cancelled", "replaced", "discarded"
]
Stage = Literal["starting", "planning", "executing", "synthesizing", "finishing", "done"]

_REFRESH_S = 1 / 12
_TIMELINE_WIDTH = 24
_STATUS_STYLE = {
    "success": "green",
    "partial": "yellow",
    "error": "red",
    "awaiting_approval": "magenta",
    "cancelled": "red",
}
# A row's state while it can still change: it has not run, runs, or waits for a decision.
_OPEN: frozenset[RowStatus] = frozenset({"waiting", "running", "approval"})
_ROW_STYLE: dict[RowStatus, str] = {
    "waiting": "dim",
    "running": "yellow",
    "approval": "bold magenta",
    "success": "green",
    "error": "red",
    "cancelled": "dim red",
    "replaced": "dim strike",
    "discarded": "dim strike",
}
# Phases whose streamed tokens are the plan being written (shown while planning).
_PLAN_PHASES = frozenset({"planning", "repair"})
# Model calls made while the tools run: they do not move the run back to planning.
_EXECUTION_PHASES = frozenset({"reevaluation", "language_step"})


def compact_json(value: Any, limit: int | None = None) -> str:
    """`value` as one line of JSON (non-ASCII kept), cut to `limit` characters with an ellipsis."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except ValueError:  # a circular structure: show something rather than fail the view
        text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text


def format_duration(ms: float | None) -> str:
    """A duration for people: `820 ms`, `1.42 s`, `2 m 05 s`."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} m {rest:02d} s"


def retrieval_text(content: dict[str, Any]) -> Text:
    """One line for a RETRIEVAL observation: the passages found (id and score) and the time,
    or why the search failed (the run goes on without passages)."""
    took = format_duration(content.get("durationMs"))
    if content.get("status") == "failed":
        return Text(f"✗ retrieval failed in {took}: {content.get('error')}", style="red")
    ids = [str(id) for id in content.get("ids") or ()]
    scores = list(content.get("scores") or ())
    line = Text("⌕ ", style="cyan")
    count = len(ids)
    line.append(f"retrieved {count} passage{'' if count == 1 else 's'} in {took}", style="bold")
    found = [f"{id} ({score:.2f})" for id, score in zip(ids, scores, strict=False)]
    if found:
        line.append(": " + _cut(", ".join(found), 300), style="dim")
    return line


def summary_text(metadata: ExecutionMetadata) -> Text:
    """The closing line of a run: status, calls, tokens and time."""
    usage = metadata.usage
    text = Text()
    text.append(f" {metadata.status} ", style=f"bold reverse {_STATUS_STYLE[metadata.status]}")
    text.append(
        f"  {metadata.llm_calls} LLM call{'s' if metadata.llm_calls != 1 else ''} · "
        f"{metadata.tool_calls} tool call{'s' if metadata.tool_calls != 1 else ''} · "
        f"{usage.total_tokens:,} tokens ({usage.input_tokens:,} in / "
        f"{usage.output_tokens:,} out) · {format_duration(metadata.total_duration_ms)}"
    )
    return text


@dataclass(frozen=True, slots=True)
class RunHeader:
    """What the view says about the run before it starts."""

    query: str
    thread_id: str
    model_label: str
    scripted: bool = False
    store: str | None = None
    resumed: bool = False
    """The run paused for approval before and is resumed (`pes-agent approve`)."""


@dataclass(slots=True)
class ToolRow:
    """One planned call as the view shows it (a language step has `kind == "language"`).

    `revision` is the plan revision that added the call (0: the first plan); `approval` the
    decision a person (or the approval handler) took about a gated call.
    """

    call_id: str
    tool_name: str
    arguments: Any
    depends_on: list[str] = field(default_factory=list)
    status: RowStatus = "waiting"
    started_at: float | None = None
    ended_at: float | None = None
    duration_ms: float | None = None
    output: Any = None
    error: str | None = None
    kind: Literal["tool", "language"] = "tool"
    revision: int = 0
    approval: Literal["approved", "denied"] | None = None

    @property
    def label(self) -> str:
        """What the call runs: its tool's name, or "language step"."""
        return "language step" if self.kind == "language" else self.tool_name


@dataclass(frozen=True, slots=True)
class RevisionNote:
    """A re-evaluation of the plan as the view shows it: a revision, or a plan kept."""

    status: str
    revision: int
    replaced: tuple[str, ...] = ()
    reason: str | None = None


class RunState:
    """What a run has shown so far, built from its observations and stream events.

    Times are seconds on `clock` since the view was created.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._origin = clock()
        self.trace_id: str | None = None
        self.stage: Stage = "starting"
        self.model: str | None = None
        self.repairing = False
        self.thinking_stream = ""
        self.plan_stream = ""
        self.thoughts: list[str] = []
        self.title: str | None = None
        self.intent: str | None = None
        self.plan: str | None = None
        self.planned_at: float | None = None
        self.retrieval: dict[str, Any] | None = None
        self.rows: list[ToolRow] = []
        # Where the rows of the plan being written begin: calls start while it streams (their
        # rows come first), and a discarded plan's rows stay above its repair's.
        self.plan_rows = 0
        # Call ids by step number (index + 1): placeholders name steps, rows are found by id.
        self.steps: list[str] = []
        self.revisions: list[RevisionNote] = []
        self.reevaluating = False
        self.answer = ""
        self.errors: list[str] = []
        self.result: AgentFinalResponse | None = None
        self.cancelled = False

    def now(self) -> float:
        """Seconds since the view was created."""
        return self._clock() - self._origin

    def row(self, call_id: str, tool_name: str) -> ToolRow:
        """The row of `call_id` that has not finished yet (added when the plan lacked it)."""
        for row in self.rows:
            if row.call_id == call_id and row.status in _OPEN:
                return row
        row = ToolRow(call_id=call_id, tool_name=tool_name, arguments={})
        self.rows.append(row)
        return row

    def apply_observation(self, observation: Observation) -> ToolRow | None:
        """Update the state; returns the tool row the observation changed, if any."""
        self.trace_id = self.trace_id or observation.trace_id
        content = observation.content
        kind = observation.type
        if kind is ObservationType.LLM_STREAM_START:
            phase = content.get("phase")
            self.model = f"{content.get('provider')}:{content.get('model')}"
            if phase in _EXECUTION_PHASES:
                self.reevaluating = phase == "reevaluation" or self.reevaluating
                return None
            if phase == "synthesis":
                self.stage = "synthesizing"
                self.answer = ""
            else:
                self.stage = "planning"
                self.repairing = phase == "repair"
                self.plan_stream = ""
            self.thinking_stream = ""
        elif kind is ObservationType.THOUGHTS:
            text = str(content.get("text", "")).strip()
            if text and text not in self.thoughts:
                self.thoughts.append(text)
            self.thinking_stream = ""
        elif kind is ObservationType.RETRIEVAL:
            self.retrieval = content
        elif kind is ObservationType.TITLE:
            self.title = content.get("title")
        elif kind is ObservationType.INTENT:
            self.intent = content.get("intent")
        elif kind is ObservationType.PLAN and content.get("status") == "ready":
            self.plan = content.get("plan")
            self.planned_at = self.now()
            self.stage = "executing"
            self._add_rows(list(content.get("toolCalls") or ()), revision=0)
        elif kind is ObservationType.PLAN and content.get("status") == "discarded":
            self._discard(content)
        elif kind is ObservationType.PLAN and content.get("status") in (
            "revised",
            "kept",
            "unusable",
            "failed",
        ):
            self.reevaluating = False
            self._revise(content)
        elif kind is ObservationType.TOOL_CALL:
            row = self.row(str(content.get("callId")), str(content.get("toolName")))
            row.status = "running"
            row.arguments = content.get("arguments", row.arguments)
            if content.get("kind") == "language":
                row.kind = "language"
            row.started_at = self.now()
            return row
        elif kind is ObservationType.TOOL_EXECUTION:
            row = self.row(str(content.get("callId")), str(content.get("toolName")))
            row.status = "error" if content.get("status") == "error" else "success"
            row.ended_at = self.now()
            row.duration_ms = content.get("durationMs")
            if row.started_at is None:  # refused or skipped: it never ran
                row.started_at = row.ended_at
            row.output = content.get("output")
            row.error = content.get("error")
            return row
        elif kind is ObservationType.APPROVAL_REQUESTED:
            row = self.row(str(content.get("callId")), str(content.get("toolName")))
            row.status = "approval"
            row.arguments = content.get("arguments", row.arguments)
            return row
        elif kind is ObservationType.APPROVAL_DECIDED:
            row = self.row(str(content.get("callId")), str(content.get("toolName")))
            approved = content.get("decision") == "approve"
            row.approval = "approved" if approved else "denied"
            # A denied call's error result follows; an approved one runs when it can.
            row.status = "waiting"
            return row
        elif kind is ObservationType.ERROR:
            self.errors.append(str(content.get("error", observation.title)))
        elif kind is ObservationType.FINAL_RESPONSE:
            self.stage = "finishing"
        return None

    def _discard(self, content: dict[str, Any]) -> None:
        """A plan was discarded while its calls ran (it is being repaired): its rows stay,
        struck out, and the next plan's rows start below them."""
        discarded = {str(call_id) for call_id in content.get("calls") or ()}
        for row in self.rows[self.plan_rows :]:
            if row.call_id in discarded or row.status in _OPEN:
                row.status = "discarded"
        self.plan_rows = len(self.rows)
        self.errors.append(f"plan discarded: {content.get('reason')}")

    def _add_rows(self, calls: list[dict[str, Any]], *, revision: int) -> None:
        """Rows for planned calls (as PLAN observations dump them), numbered on as steps; a
        call that started while the plan streamed keeps the row it has."""
        first = len(self.steps)
        self.steps.extend(str(call.get("call_id", "?")) for call in calls)
        for offset, call in enumerate(calls):
            arguments = call.get("arguments", {})
            instruction = call.get("instruction")
            if instruction is not None:
                arguments = {"instruction": instruction}
            after = list(call.get("depends_on") or ())
            for step in sorted(find_references(arguments)):
                index = step - 1
                known = 0 <= index < len(self.steps) and index != first + offset
                if known and self.steps[index] not in after:
                    after.append(self.steps[index])
            call_id = self.steps[first + offset]
            kind: Literal["tool", "language"] = "language" if instruction is not None else "tool"
            started = next(
                (row for row in self.rows[self.plan_rows :] if row.call_id == call_id), None
            )
            if started is not None and revision == 0:
                started.depends_on, started.kind = after, kind
                continue
            self.rows.append(
                ToolRow(
                    call_id=call_id,
                    tool_name=str(call.get("tool_name", "?")),
                    arguments=arguments,
                    depends_on=after,
                    kind=kind,
                    revision=revision,
                )
            )

    def _revise(self, content: dict[str, Any]) -> None:
        """A re-evaluation ended: mark the replaced calls and add the new ones, or note it."""
        status = str(content.get("status"))
        revision = int(content.get("revision") or 0)
        replaced = tuple(str(call_id) for call_id in content.get("replaced") or ())
        self.revisions.append(
            RevisionNote(status, revision, replaced, content.get("reason") or None)
        )
        if status != "revised":
            return
        for row in self.rows:
            if row.call_id in replaced and row.status == "waiting":
                row.status = "replaced"
        self._add_rows(list(content.get("toolCalls") or ()), revision=revision)

    def apply_stream(self, event: StreamEvent) -> None:
        """Add a streamed piece of text (or drop what a restarted stream had sent)."""
        if event.kind == "restart":
            if event.phase == "synthesis":
                self.answer = ""
            elif event.phase in _PLAN_PHASES:
                self.plan_stream = ""
            self.thinking_stream = ""
        elif event.kind == "thinking":
            self.thinking_stream += event.text
        elif event.kind == "token":
            if event.phase == "synthesis":
                self.answer += event.text
            elif event.phase in _PLAN_PHASES:
                self.plan_stream += event.text

    def cancel(self) -> None:
        """The run was cancelled: calls still running or waiting never finish."""
        self.cancelled = True
        self.stage = "done"
        now = self.now()
        for row in self.rows:
            if row.status in _OPEN:
                row.status = "cancelled"
                row.ended_at = now if row.started_at is not None else None

    @property
    def awaiting(self) -> list[ToolRow]:
        """The calls waiting for a person's decision."""
        return [row for row in self.rows if row.status == "approval"]

    def restore(self, paused: PausedRun) -> None:
        """Start from a run that paused for approval (`pes-agent approve`): its plan, the
        calls that finished before the pause and the ones waiting for a decision."""
        self.trace_id = paused.trace_id
        self.stage = "executing"
        planning = paused.planning
        self.title, self.intent, self.plan = planning.title, planning.intent, planning.plan
        self._add_rows([call.model_dump(mode="json") for call in paused.calls], revision=0)
        replaced = set(paused.replaced_steps)
        pending = {p.call_id: p for p in paused.pending}
        for step, row in enumerate(self.rows, start=1):
            result = paused.results.get(step)
            if step in replaced:
                row.status = "replaced"
            elif result is not None:
                row.status = "success" if result.status == "success" else "error"
                row.output, row.error = result.output, result.error
            elif row.call_id in pending:
                row.status = "approval"
                row.arguments = pending[row.call_id].arguments

    def finish(self, result: AgentFinalResponse) -> None:
        """The run is over (or paused for approval): keep its result."""
        self.result = result
        self.stage = "done"
        if result.metadata.status == "awaiting_approval":
            return
        if not self.answer and result.metadata.status != "error":
            # A synthesizer that does not stream still has its answer shown.
            self.answer = result.response.content


class RunView(Protocol):
    """What the run command drives: a view attached to one agent run."""

    state: RunState

    def __enter__(self) -> RunView: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def attach(self, agent: AgentCore, thread_id: str) -> Callable[[], None]: ...

    def observe(self, observation: Observation) -> None: ...

    def finish(self, result: AgentFinalResponse) -> None: ...

    def cancel(self) -> None: ...

    def suspend(self) -> AbstractContextManager[None]: ...

    def on_stream(self, event: StreamEvent) -> None:
        """Show `event`, a token of a run executed elsewhere (a durable engine's worker)."""

    def restore(self, paused: PausedRun) -> None: ...


class _ViewBase(ABC):
    def __init__(self, console: Console, header: RunHeader) -> None:
        self.console = console
        self.header = header
        self.state = RunState()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # However the run ended, the view closes the same way (and lets the error propagate).
        self._close()

    @abstractmethod
    def _close(self) -> None:
        """Stop drawing the run; each view says how."""

    @contextmanager
    def suspend(self) -> Iterator[None]:
        """Let something else use the terminal (a question to the user) inside the block."""
        yield

    def attach(self, agent: AgentCore, thread_id: str) -> Callable[[], None]:
        """Follow the runs of `thread_id` on `agent`; returns a function that detaches."""
        unsubscribe_observations = agent.observations.subscribe(
            self._on_observation, thread_id=thread_id
        )
        unsubscribe_stream = agent.stream.subscribe(self._on_stream, thread_id=thread_id)

        def detach() -> None:
            unsubscribe_observations()
            unsubscribe_stream()

        return detach

    def observe(self, observation: Observation) -> None:
        """Show `observation` of the run (one recorded elsewhere: a run on a durable engine,
        followed through the store)."""
        self._on_observation(observation)

    def on_stream(self, event: StreamEvent) -> None:
        """Show `event`, a token of a run executed elsewhere (a durable engine's worker)."""
        self._on_stream(event)

    def restore(self, paused: PausedRun) -> None:
        """Show `paused` (a run resumed after a pause for approval) as it stood."""
        self.state.restore(paused)

    def _on_observation(self, observation: Observation) -> None:
        self.state.apply_observation(observation)

    def _on_stream(self, event: StreamEvent) -> None:
        self.state.apply_stream(event)

    def _header_lines(self) -> list[Text]:
        header = self.header
        title = Text()
        title.append("pes-agent", style="bold cyan")
        title.append(" · ")
        if header.scripted:
            title.append(header.model_label, style="bold yellow")
        else:
            title.append(header.model_label, style="bold")
        details = Text(f"thread {header.thread_id}", style="dim")
        if self.state.trace_id:
            details.append(f" · trace {self.state.trace_id}")
        if header.store:
            details.append(f" · store {header.store}")
        query = Text()
        query.append("query ", style="bold")
        query.append(header.query)
        return [title, details, query]


class LiveView(_ViewBase):
    """A `rich.live.Live` display of the run, redrawn as it goes (for terminals)."""

    def __init__(self, console: Console, header: RunHeader) -> None:
        super().__init__(console, header)
        self._live = self._new_live()
        self._ticker: asyncio.Task[None] | None = None

    def _new_live(self) -> Live:
        return Live(
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
            get_renderable=self.render,
        )

    def __enter__(self) -> LiveView:
        self._live.start(refresh=True)
        # Redrawn from the event loop rather than rich's thread, so rendering never races
        # the callbacks that update the state.
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return self

    def _close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        self._live.stop()

    @contextmanager
    def suspend(self) -> Iterator[None]:
        """Take the display off the screen inside the block, and draw it afresh after.

        What is printed inside the block (a question and its answer) stays above the view.
        """
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        # Transient for this stop only: the display is erased rather than left behind, so it
        # is not on the screen twice once it starts again.
        self._live.transient = True
        self._live.stop()
        try:
            yield
        finally:
            # A new display: the old one would move the cursor up over what was printed, to
            # where it last drew.
            self._live = self._new_live()
            self._live.start(refresh=True)
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            self._live.refresh()
            await asyncio.sleep(_REFRESH_S)

    def finish(self, result: AgentFinalResponse) -> None:
        self.state.finish(result)
        self._live.refresh()

    def cancel(self) -> None:
        self.state.cancel()
        self._live.refresh()

    # rendering ---------------------------------------------------------------------------
    def render(self) -> RenderableType:
        """The whole view as it stands now."""
        state = self.state
        parts: list[RenderableType] = [*self._header_lines(), Text()]
        if state.retrieval is not None:
            parts.append(retrieval_text(state.retrieval))
        parts.extend(self._planning())
        if state.rows:
            parts.append(Text())
            parts.append(self._tool_table())
        for note in state.revisions:
            if note.status != "revised":
                parts.append(Text(f"↺ {_kept_text(note)}", style="dim"))
        if state.stage in ("synthesizing", "finishing", "done") and (
            state.answer or state.stage == "synthesizing"
        ):
            parts.append(Rule("answer", align="left", style="cyan"))
            parts.append(Markdown(state.answer) if state.answer else Text("…", style="dim"))
        for error in state.errors:
            parts.append(Text(f"✗ {error}", style="red"))
        parts.append(Text())
        parts.append(self._footer())
        return Group(*parts)

    def _planning(self) -> list[RenderableType]:
        state = self.state
        parts: list[RenderableType] = []
        if state.plan is None and state.intent is None and state.stage in ("starting", "planning"):
            label = "repairing the plan" if state.repairing else "planning"
            parts.append(Spinner("dots", Text(f"{label}…", style="bold"), style="cyan"))
            for thought in state.thoughts:
                parts.append(Text(f"  thinking: {thought}", style="italic dim"))
            if state.thinking_stream:
                parts.append(Text(f"  thinking: {_tail(state.thinking_stream, 300)}", "italic"))
            if state.plan_stream:
                parts.append(Text(f"  {_tail(state.plan_stream, 160)}", style="dim"))
            return parts
        line = Text("✓ ", style="green")
        line.append(state.title or "plan", style="bold")
        if state.planned_at is not None:
            line.append(f"  planned in {state.planned_at:.2f} s", style="dim")
        parts.append(line)
        for thought in state.thoughts:
            parts.append(Text(f"  thinking: {_cut(thought, 400)}", style="italic dim"))
        if state.intent and state.intent != state.title:
            parts.append(Text(f"  intent: {state.intent}"))
        for plan_line in (state.plan or "").splitlines():
            if plan_line.strip():
                parts.append(Text(f"  {plan_line.strip()}"))
        return parts

    def _tool_table(self) -> Table:
        state = self.state
        now = state.now()
        started = [row.started_at for row in state.rows if row.started_at is not None]
        origin = min(started) if started else now
        ends = [row.ended_at if row.ended_at is not None else now for row in state.rows]
        span = max(max(ends, default=now) - origin, 1e-3)
        narrow = self.console.width < 100
        timeline_width = 12 if narrow else _TIMELINE_WIDTH
        table = Table(
            title="tool calls",
            title_justify="left",
            title_style="bold",
            expand=True,
            show_edge=False,
            pad_edge=False,
        )
        table.add_column("call", no_wrap=True, style="cyan")
        table.add_column("tool(arguments) → result", ratio=1, overflow="ellipsis", no_wrap=True)
        table.add_column("status", no_wrap=True, min_width=11)
        table.add_column("time", no_wrap=True, justify="right", min_width=6)
        table.add_column("timeline", no_wrap=True, width=timeline_width)
        shown_revision = 0
        for row in state.rows:
            if row.revision != shown_revision:
                shown_revision = row.revision
                table.add_row("", _revision_text(state, row.revision), "", "", "")
            detail = Text(row.label + " ", style="bold")
            detail.append(
                compact_json(row.arguments, 200),
                style="dim" if row.status == "waiting" and row.approval is None else "",
            )
            if row.status == "success":
                detail.append("\n→ ", style="dim")
                detail.append(compact_json(row.output, 200), style="green")
            elif row.status == "error":
                detail.append("\n→ ", style="dim")
                detail.append(row.error or "failed", style="red")
            status: RenderableType
            if row.status == "running":
                status = Spinner("dots", Text("running", style="yellow"), style="yellow")
            elif row.status == "approval":
                status = Text("⏸ waiting for approval", style=_ROW_STYLE["approval"])
            elif row.status == "waiting" and row.approval is not None:
                status = Text(row.approval, style="magenta")
            elif row.status == "waiting":
                after = ", ".join(row.depends_on)
                status = Text(f"after {after}" if after else "waiting", style="dim")
            elif row.status in ("replaced", "discarded"):
                status = Text(f"⊘ {row.status}", style="dim")
            else:
                mark = {"success": "✓", "error": "✗"}.get(row.status, "⊘")
                status = Text(f"{mark} {row.status}", style=_ROW_STYLE[row.status])
            if row.duration_ms is not None:
                elapsed = format_duration(row.duration_ms)
            elif row.started_at is not None:
                end = row.ended_at if row.ended_at is not None else now
                elapsed = f"{end - row.started_at:.1f} s"
            else:
                elapsed = ""
            table.add_row(
                Text(row.call_id),  # model text, never rich markup
                detail,
                status,
                elapsed,
                _bar(row, origin, span, now, timeline_width),
            )
        return table

    def _footer(self) -> RenderableType:
        state = self.state
        if state.cancelled:
            return Text(" cancelled ", style="bold reverse red") + Text(
                f"  after {state.now():.2f} s — running tools were stopped"
            )
        if state.result is not None:
            return summary_text(state.result.metadata)
        label = {
            "starting": "starting",
            "planning": "planning",
            "executing": "re-evaluating the plan" if state.reevaluating else "running tools",
            "synthesizing": "writing the answer",
            "finishing": "saving",
            "done": "done",
        }[state.stage]
        model = f" · {state.model}" if state.model else ""
        return Spinner("dots", Text(f"{label}{model} · {state.now():.1f} s", style="dim"))


def _bar(row: ToolRow, origin: float, span: float, now: float, width: int) -> Text:
    """The row's run time as a bar on a shared axis: overlapping bars ran side by side."""
    if row.started_at is None:
        return Text("")
    end = row.ended_at if row.ended_at is not None else now
    scale = width / span
    first = min(int((row.started_at - origin) * scale), width - 1)
    last = max(first + 1, min(round((end - origin) * scale), width))
    bar = Text(" " * first)
    bar.append("━" * (last - first), style=_ROW_STYLE[row.status])
    return bar


def _revision_text(state: RunState, revision: int) -> Text:
    """The row above a revision's calls: "plan revised (N)" and what it replaced."""
    text = Text(f"↻ plan revised ({revision})", style="bold magenta")
    note = next(
        (n for n in state.revisions if n.status == "revised" and n.revision == revision), None
    )
    if note is not None and note.replaced:
        text.append(" · replaced " + ", ".join(note.replaced), style="magenta")
    return text


def _kept_text(note: RevisionNote) -> str:
    """A re-evaluation that kept the plan, in words."""
    what = {
        "kept": "plan kept",
        "unusable": "plan kept (the revision could not be used)",
        "failed": "plan kept (the re-evaluation failed)",
    }.get(note.status, "plan kept")
    return f"{what}: {note.reason}" if note.reason and note.status != "kept" else what


def _tail(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else "…" + flat[-(limit - 1) :]


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class PlainView(_ViewBase):
    """The run as plain lines, one per event (for pipes, files and dumb terminals)."""

    def __init__(self, console: Console, header: RunHeader) -> None:
        super().__init__(console, header)
        self._answering = False

    def __enter__(self) -> PlainView:
        for line in self._header_lines():
            self.console.print(line, highlight=False, soft_wrap=True)
        self._line(
            "resuming the run that waited for approval…" if self.header.resumed else "planning…"
        )
        return self

    def _close(self) -> None:
        self._end_answer()

    def restore(self, paused: PausedRun) -> None:
        super().restore(paused)
        self._print(f"         plan: {self.state.title or ''}".rstrip())
        for row in self.state.rows:
            shown = {"approval": "waits for approval", "success": "done", "error": "failed"}
            self._print(
                f"         · {row.call_id} {row.label} {compact_json(row.arguments, 200)}"
                f"  ({shown.get(row.status, row.status)})"
            )

    def _line(self, message: str | Text, style: str | None = None) -> None:
        self._end_answer()
        stamp = Text(f"{self.state.now():6.2f}s  ", style="dim")
        body = Text(message, style=style or "") if isinstance(message, str) else message
        self.console.print(stamp + body, highlight=False, soft_wrap=True)

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def _end_answer(self) -> None:
        if self._answering:
            self._answering = False
            self.console.print()

    def _on_observation(self, observation: Observation) -> None:
        state = self.state
        row = state.apply_observation(observation)
        content = observation.content
        kind = observation.type
        if kind is ObservationType.LLM_STREAM_START and content.get("phase") == "repair":
            self._line("the plan was unusable; asking the model to repair it…", "yellow")
        elif kind is ObservationType.LLM_STREAM_START and content.get("phase") == "reevaluation":
            self._line("re-evaluating the plan…", "dim")
        elif kind is ObservationType.RETRIEVAL:
            self._line(retrieval_text(content))
        elif kind is ObservationType.THOUGHTS:
            self._line(f"thinking: {_cut(str(content.get('text', '')), 400)}", "italic")
        elif kind is ObservationType.PLAN and content.get("status") == "ready":
            self._line(Text(f"plan: {state.title or ''}".rstrip(), style="bold"))
            if state.intent and state.intent != state.title:
                self._print(f"         intent: {state.intent}")
            for plan_line in (state.plan or "").splitlines():
                if plan_line.strip():
                    self._print(f"         {plan_line.strip()}")
            for planned in state.rows[state.plan_rows :]:
                after = f"  (after {', '.join(planned.depends_on)})" if planned.depends_on else ""
                self._print(
                    f"         · {planned.call_id} {planned.label} "
                    f"{compact_json(planned.arguments, 200)}{after}"
                )
        elif kind is ObservationType.PLAN and content.get("status") == "discarded":
            cancelled = ", ".join(map(str, content.get("cancelled") or ())) or "none"
            self._line(
                f"plan discarded ({content.get('reason')}); cancelled: {cancelled}", "yellow"
            )
        elif kind is ObservationType.PLAN and content.get("status") == "revised":
            note = state.revisions[-1]
            replaced = f"; replaced {', '.join(note.replaced)}" if note.replaced else ""
            self._line(Text(f"plan revised ({note.revision}){replaced}", style="bold magenta"))
            for planned in state.rows:
                if planned.revision == note.revision:
                    self._print(
                        f"         · {planned.call_id} {planned.label} "
                        f"{compact_json(planned.arguments, 200)}"
                    )
        elif kind is ObservationType.PLAN and content.get("status") in (
            "kept",
            "unusable",
            "failed",
        ):
            self._line(_kept_text(state.revisions[-1]), "dim")
        elif kind is ObservationType.TOOL_CALL and row is not None:
            self._line(f"▶ {row.call_id} {row.label} {compact_json(row.arguments, 200)}")
        elif kind is ObservationType.TOOL_EXECUTION and row is not None:
            took = format_duration(row.duration_ms)
            if row.status == "success":
                self._line(
                    f"✓ {row.call_id} {row.label} in {took} → {compact_json(row.output, 200)}",
                    "green",
                )
            else:
                self._line(f"✗ {row.call_id} {row.label} failed: {row.error}", "red")
        elif kind is ObservationType.APPROVAL_REQUESTED and row is not None:
            self._line(
                f"⏸ {row.call_id} {row.label} {compact_json(row.arguments, 200)} "
                "waits for approval",
                "magenta",
            )
        elif kind is ObservationType.APPROVAL_DECIDED and row is not None:
            reason = content.get("reason")
            self._line(
                f"{row.approval} {row.call_id} {row.label}" + (f": {reason}" if reason else ""),
                "magenta",
            )
        elif kind is ObservationType.LLM_STREAM_START and content.get("phase") == "synthesis":
            self._line("answer:", "bold")
        elif kind is ObservationType.ERROR:
            self._line(f"✗ {content.get('error', observation.title)}", "red")

    def _on_stream(self, event: StreamEvent) -> None:
        self.state.apply_stream(event)
        if event.phase == "synthesis" and event.kind == "token":
            self._answering = True
            self.console.out(event.text, end="", highlight=False)
        elif event.phase == "synthesis" and event.kind == "restart":
            self._line("(the answer stream was interrupted; retrying)", "yellow")

    def finish(self, result: AgentFinalResponse) -> None:
        streamed = bool(self.state.answer)
        self.state.finish(result)
        self._end_answer()
        if not streamed and result.metadata.status != "error":
            self._print(result.response.content)
        self.console.print(summary_text(result.metadata), highlight=False, soft_wrap=True)

    def cancel(self) -> None:
        self.state.cancel()
        self._line("cancelled — running tools were stopped", "bold red")


def make_view(console: Console, header: RunHeader) -> LiveView | PlainView:
    """A `LiveView` on an interactive terminal, a `PlainView` anywhere else."""
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveView(console, header)
    return PlainView(console, header)
