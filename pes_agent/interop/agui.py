"""AG-UI: a run told as the Agent–User Interaction protocol's events, for front ends.

```python
app = create_app(agent)           # serves POST /v1/agui; pip install 'pes-agent[agui]'
```

A client posts a `RunAgentInput` (its `threadId` is the thread, its last user message the
query) and reads the run as AG-UI events over SSE. `AguiRun` turns what a run already
reports — its observations, its model stream events and its final response — into them:

| the run | AG-UI |
|---|---|
| its start | RUN_STARTED, then STATE_SNAPSHOT (the thread's agent state) |
| a model call of phase P (LLM_STREAM_START/END) | STEP_STARTED/FINISHED "P" |
| its first tool call, until synthesis starts | STEP_STARTED/FINISHED "execution" |
| TOOL_CALL (a call dispatched) | TOOL_CALL_START, TOOL_CALL_ARGS (its JSON), TOOL_CALL_END |
| TOOL_EXECUTION (a call finished) | TOOL_CALL_RESULT |
| thinking tokens (a THOUGHTS block not streamed) | REASONING_START, REASONING_MESSAGE_*, …_END |
| synthesis tokens | TEXT_MESSAGE_START, TEXT_MESSAGE_CONTENT each, TEXT_MESSAGE_END |
| STATE_UPDATE | STATE_DELTA (a JSON Patch from the state before) |
| success, partial | RUN_FINISHED (outcome success) |
| a pause for approval | RUN_FINISHED, outcome interrupt: one `Interrupt` per gated call |
| cancelled | RUN_FINISHED (outcome cancelled) |
| error | RUN_ERROR |

A call is announced when it is dispatched and answered when it finishes, so parallel calls
interleave as they ran. Ids: a tool call (and its interrupt) is `"{trace_id}:{call_id}"`,
unique across the thread's runs; a resumed run keeps its trace id, so a gated call's
interrupt, the resume entry answering it and the call's TOOL_CALL_START share one id. A
resume entry's `payload` is `{"approved": bool, "reason": str}` (`RESPONSE_SCHEMA`); an entry
with status `cancelled` denies the call.

Needs the `agui` extra (the `ag-ui-protocol` package, whose models every event is built with).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pes_agent.approvals.models import Approve, Decision, Deny
from pes_agent.errors import UsageError
from pes_agent.observing.streams import StreamEvent
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.run import AgentFinalResponse, PendingApproval

try:
    from ag_ui.core import (
        BaseEvent,
        Interrupt,
        ReasoningEndEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        ResumeEntry,
        RunAgentInput,
        RunErrorEvent,
        RunFinishedCancelledOutcome,
        RunFinishedEvent,
        RunFinishedInterruptOutcome,
        RunFinishedOutcome,
        RunFinishedSuccessOutcome,
        RunStartedEvent,
        StateDeltaEvent,
        StateSnapshotEvent,
        StepFinishedEvent,
        StepStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        TextPart,
        TokenUsage,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
        UserMessage,
    )
    from ag_ui.encoder import EventEncoder
except ImportError as error:  # pragma: no cover - the extra is installed in CI
    raise UsageError(
        "AG-UI needs the ag-ui-protocol package: pip install 'pes-agent[agui]'"
    ) from error

__all__ = [
    "RESPONSE_SCHEMA",
    "AguiRun",
    "ApprovalAnswer",
    "decision_of",
    "encode",
    "json_patch",
    "query_of",
    "tool_call_id",
]

#: What an approval interrupt expects back as a resume entry's `payload`.
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "run the call (true) or refuse it"},
        "reason": {"type": "string", "description": "why it was refused, shown to the model"},
    },
    "required": ["approved"],
}

#: The step that holds a run's tool calls (the model calls' steps are named by their phase).
EXECUTION_STEP = "execution"

_ENCODER = EventEncoder()


class ApprovalAnswer(BaseModel):
    """A resume entry's `payload` for an approval interrupt (`RESPONSE_SCHEMA`)."""

    model_config = ConfigDict(extra="forbid")

    # `"yes"` or 1 would be taken as an approval otherwise.
    approved: bool = Field(strict=True)
    reason: str | None = Field(default=None, max_length=2000)


def tool_call_id(trace_id: str, call_id: str) -> str:
    """The AG-UI id of call `call_id` of run `trace_id` (also its approval interrupt's id)."""
    return f"{trace_id}:{call_id}"


def encode(event: BaseEvent) -> bytes:
    """One event as a server-sent event, by the protocol's own encoder."""
    return _ENCODER.encode(event).encode()


def query_of(run_input: RunAgentInput) -> str | None:
    """The text of the input's last user message (None: it has none, or no text)."""
    for message in reversed(run_input.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                text = content
            else:
                text = "\n".join(part.text for part in content if isinstance(part, TextPart))
            return text if text.strip() else None
    return None


def decision_of(entry: ResumeEntry) -> Decision:
    """The decision a resume entry carries: `cancelled` or `approved: false` deny the call.

    Raises:
        ValueError: The payload is not `{"approved": bool, "reason": str}` (the message says
            what is wrong).
    """
    if entry.status == "cancelled":
        return Deny("the user cancelled the approval")
    try:
        answer = ApprovalAnswer.model_validate(entry.payload)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'payload'}: {item['msg']}"
            for item in error.errors(include_input=False, include_url=False)
        )
        raise ValueError(
            f"resume entry {entry.interrupt_id}: the payload must be "
            f'{{"approved": true|false, "reason": "..."}} ({problems})'
        ) from None
    if answer.approved:
        return Approve()
    return Deny(answer.reason) if answer.reason else Deny()


def json_patch(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """An RFC 6902 patch turning `before` into `after`: objects are compared key by key,
    anything else that differs is replaced whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_pointer(key)}"})
        for key, value in after.items():
            where = f"{path}/{_pointer(key)}"
            if key not in before:
                ops.append({"op": "add", "path": where, "value": value})
            else:
                ops.extend(json_patch(before[key], value, where))
        return ops
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": path, "value": after}]


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _result_text(content: dict[str, Any]) -> str:
    """A TOOL_EXECUTION's result as the text of a tool message: the output (JSON unless it
    is text), or `Error: ...`."""
    if content.get("status") == "error":
        return f"Error: {content.get('error')}"
    output = content.get("output")
    return output if isinstance(output, str) else json.dumps(output)


def _interrupt(trace_id: str, pending: PendingApproval) -> Interrupt:
    arguments = json.dumps(pending.arguments)
    return Interrupt(
        id=tool_call_id(trace_id, pending.call_id),
        reason="tool_approval",
        message=f"Approve {pending.tool_name}({arguments})?",
        tool_call_id=tool_call_id(trace_id, pending.call_id),
        response_schema=RESPONSE_SCHEMA,
        metadata={
            "toolName": pending.tool_name,
            "arguments": pending.arguments,
            "step": pending.step,
            "resolved": pending.resolved,
        },
    )


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class AguiRun:
    """One run told in AG-UI events: feed it what the run reports, in order, and send what
    each call returns. `state` is the thread's agent state when the run starts."""

    thread_id: str
    run_id: str
    trace_id: str
    state: Any = field(default_factory=dict)
    run_input: RunAgentInput | None = None
    #: Open steps, each with how many of its model calls are open (the execution step: 1).
    _steps: dict[str, int] = field(default_factory=dict)
    #: Open model calls (their `llmCall` number) and their phase.
    _calls: dict[Any, str] = field(default_factory=dict)
    _text_id: str | None = None
    _text_sent: bool = False
    #: The open reasoning message of each phase, and the phases whose thinking streamed.
    _reasoning: dict[str, str] = field(default_factory=dict)
    _thought_streamed: set[str] = field(default_factory=set)
    _announced: set[str] = field(default_factory=set)
    _ended: bool = False

    def started(self) -> list[BaseEvent]:
        """RUN_STARTED, then the thread's state as STATE_SNAPSHOT."""
        return [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, input=self.run_input),
            StateSnapshotEvent(snapshot=self.state),
        ]

    def streamed(self, event: StreamEvent) -> list[BaseEvent]:
        """The events of a model stream event: reasoning for thinking text, the answer's
        text for synthesis tokens (other phases' text is plans and steps, told otherwise)."""
        if self._ended:
            return []
        phase = event.phase
        if event.kind == "thinking":
            if not event.text:
                return []
            out = self._close_text() if phase == "synthesis" else []
            message_id = self._reasoning.get(phase)
            if message_id is None:
                message_id = self._reasoning[phase] = _new_id()
                out += [
                    ReasoningStartEvent(message_id=message_id),
                    ReasoningMessageStartEvent(message_id=message_id),
                ]
            self._thought_streamed.add(phase)
            out.append(ReasoningMessageContentEvent(message_id=message_id, delta=event.text))
            return out
        out = self._close_reasoning(phase)
        if phase != "synthesis":
            return out
        if event.kind == "token" and event.text:
            if self._text_id is None:
                self._text_id = _new_id()
                out.append(TextMessageStartEvent(message_id=self._text_id, role="assistant"))
            out.append(TextMessageContentEvent(message_id=self._text_id, delta=event.text))
            self._text_sent = True
        elif event.kind in ("restart", "end", "error"):
            # A restarted answer is written again from its start, as a message of its own.
            out += self._close_text()
        return out

    def observed(self, observation: Observation) -> list[BaseEvent]:
        """The events of an observation of the run (most observations have none)."""
        if self._ended:
            return []
        content = observation.content
        kind = observation.type
        if kind is ObservationType.LLM_STREAM_START:
            phase = str(content.get("phase"))
            out = self._leave(EXECUTION_STEP) if phase == "synthesis" else []
            call = content.get("llmCall", phase)
            if call not in self._calls:  # a restarted call is the same step
                self._calls[call] = phase
                out += self._enter(phase)
            return out
        if kind is ObservationType.LLM_STREAM_END or (
            kind is ObservationType.LLM_STREAM_ERROR and not content.get("retrying")
        ):
            call = content.get("llmCall", content.get("phase"))
            if call not in self._calls:
                return []
            phase = self._calls.pop(call)
            out = self._close_reasoning(phase)
            if phase == "synthesis":
                out += self._close_text()
            return out + self._leave(phase)
        if kind is ObservationType.THOUGHTS:
            return self._thoughts(str(content.get("phase")), str(content.get("text") or ""))
        if kind is ObservationType.TOOL_CALL:
            out = self._enter(EXECUTION_STEP)
            return out + self._announce(
                str(content.get("callId")), str(content.get("toolName")), content.get("arguments")
            )
        if kind is ObservationType.TOOL_EXECUTION:
            out = self._enter(EXECUTION_STEP)
            call_id = tool_call_id(self.trace_id, str(content.get("callId")))
            if call_id not in self._announced:
                # Refused before it started (denied, skipped): it is announced as it ends.
                out += self._announce(str(content.get("callId")), str(content.get("toolName")), {})
            out.append(
                ToolCallResultEvent(
                    message_id=_new_id(),
                    tool_call_id=call_id,
                    content=_result_text(content),
                    role="tool",
                )
            )
            return out
        if kind is ObservationType.APPROVAL_REQUESTED:
            return self._enter(EXECUTION_STEP)
        if kind is ObservationType.STATE_UPDATE:
            data = content.get("data")
            patch = json_patch(self.state, data)
            self.state = data
            return [StateDeltaEvent.model_validate({"delta": patch})] if patch else []
        return []

    def finished(self, response: AgentFinalResponse) -> list[BaseEvent]:
        """The events ending the run: RUN_FINISHED with its outcome, or RUN_ERROR."""
        metadata = response.metadata
        out: list[BaseEvent] = []
        if metadata.status in ("success", "partial") and not self._text_sent:
            # Answered without streaming it (a durable engine's worker, a fallback text).
            out += self._whole_text(response.response.content)
        out += self._close_all()
        self._ended = True
        usage = metadata.usage
        tokens = [
            TokenUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
            )
        ]
        if metadata.status == "error":
            out.append(RunErrorEvent(message=metadata.error or "the run failed", code="run_failed"))
            return out
        outcome: RunFinishedOutcome
        if metadata.status == "awaiting_approval" and metadata.pending_approvals:
            outcome = RunFinishedInterruptOutcome(
                interrupts=[_interrupt(self.trace_id, p) for p in metadata.pending_approvals]
            )
        elif metadata.status == "cancelled":
            outcome = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedSuccessOutcome()
        result = {"status": metadata.status, "traceId": self.trace_id}
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=result,
                outcome=outcome,
                usage=tokens,
            )
        )
        return out

    def failed(self, kind: str, message: str) -> list[BaseEvent]:
        """RUN_ERROR for a run that could not run or crashed (`kind`: the API's error type)."""
        if self._ended:
            return []
        out = self._close_all()
        self._ended = True
        return [*out, RunErrorEvent(message=message, code=kind)]

    # -- the parts ---------------------------------------------------------------------------

    def _enter(self, step: str) -> list[BaseEvent]:
        open_calls = self._steps.get(step)
        self._steps[step] = (open_calls or 0) + (step != EXECUTION_STEP)
        return [] if open_calls is not None else [StepStartedEvent(step_name=step)]

    def _leave(self, step: str) -> list[BaseEvent]:
        open_calls = self._steps.get(step)
        if open_calls is None:
            return []
        if open_calls > 1:
            self._steps[step] = open_calls - 1
            return []
        del self._steps[step]
        return [StepFinishedEvent(step_name=step)]

    def _announce(self, call_id: str, tool_name: str, arguments: Any) -> list[BaseEvent]:
        agui_id = tool_call_id(self.trace_id, call_id)
        self._announced.add(agui_id)
        return [
            ToolCallStartEvent(tool_call_id=agui_id, tool_call_name=tool_name),
            ToolCallArgsEvent(tool_call_id=agui_id, delta=json.dumps(arguments)),
            ToolCallEndEvent(tool_call_id=agui_id),
        ]

    def _thoughts(self, phase: str, text: str) -> list[BaseEvent]:
        """A THOUGHTS block: already told if its thinking streamed, else told whole."""
        if phase in self._thought_streamed:
            self._thought_streamed.discard(phase)
            return self._close_reasoning(phase)
        if not text:
            return []
        message_id = _new_id()
        return [
            ReasoningStartEvent(message_id=message_id),
            ReasoningMessageStartEvent(message_id=message_id),
            ReasoningMessageContentEvent(message_id=message_id, delta=text),
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _whole_text(self, text: str) -> list[BaseEvent]:
        if not text:
            return []
        message_id = _new_id()
        self._text_sent = True
        return [
            TextMessageStartEvent(message_id=message_id, role="assistant"),
            TextMessageContentEvent(message_id=message_id, delta=text),
            TextMessageEndEvent(message_id=message_id),
        ]

    def _close_text(self) -> list[BaseEvent]:
        if self._text_id is None:
            return []
        message_id, self._text_id = self._text_id, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _close_reasoning(self, phase: str) -> list[BaseEvent]:
        message_id = self._reasoning.pop(phase, None)
        if message_id is None:
            return []
        return [
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _close_all(self) -> list[BaseEvent]:
        """End what is open (the protocol refuses RUN_FINISHED before), newest step first."""
        out: list[BaseEvent] = []
        for phase in list(self._reasoning):
            out += self._close_reasoning(phase)
        out += self._close_text()
        for step in reversed(list(self._steps)):
            out.append(StepFinishedEvent(step_name=step))
        self._steps.clear()
        self._calls.clear()
        return out
