"""Structured planning: the plan as a JSON Schema that the provider's structured output enforces.

`create_agent(planning_mode=...)` (per call: `RunOptions.planning_mode`) chooses how the default
planner asks for the plan:

- `"text"`: the planning prompt's compact protocol (one call per line, then the intent), read
  by `OutputParser`; nothing else is sent.
- `"structured"`: the same prompt, and the plan's schema through the provider's structured
  output; on a provider without one, `create_agent` (or the run) raises a `UsageError`.
- `"auto"` (the default): `"structured"` where the provider has structured output, else
  `"text"`. A server that refuses the option (HTTP 400/422 naming it) is asked again in text
  at once, and remembered, so later runs on that provider go straight to text.

A provider says how it takes a schema in its `structured_output` attribute
(`pes_agent.providers.base.StructuredOutput`):

The schema is the compact protocol as JSON, calls first (`{"calls": [{"tool", "args",
"after"}], "intent"}`), so that each call can start while the rest streams.

- `"response_format"` (OpenAI, OpenAI-compatible servers): `response_format` is the plan's schema
  as a strict `json_schema`. OpenAI's strict mode allows no free-form object, and a call's
  `args` is one (each tool has its own), so there each call's `args` is a *string*
  holding the JSON object — the form OpenAI models already use for function-call arguments.
  Sending the schema non-strict instead would make it a mere hint and give up the guarantee for
  every other field. The parser decodes the string; one that is not JSON is repaired like any
  other mistake.
- `"forced_tool"` (Anthropic): one tool, `submit_plan`, whose input is the plan (`args` a
  real object there), forced with `tool_choice`; the plan is read from the tool call, not from
  the text. Anthropic refuses a forced tool while extended thinking is on, so then `submit_plan`
  is offered with `tool_choice="auto"` and the prompt asks for it; a plan written as text
  instead is read as text. (Anthropic's own `output_config.format` is not used: models without
  structured outputs refuse it, while every tool-capable model takes a forced tool.)

Every reply — text, the JSON of a `response_format`, the input of `submit_plan` — is read by the
same `OutputParser`, checked the same way and repaired at most once the same way: a
schema-valid plan can still be unusable (a placeholder pointing at a later step, a dependency
cycle). In a structured repair the problems go back as the answer to the
`submit_plan` call (a tool result), and the schema is sent again.

Tool names are an `enum` in the schema, so a strict server cannot name a tool that is not
offered; Anthropic treats the enum as guidance. A call naming an unknown tool still becomes an
error result at execution, as in text mode.
"""

from __future__ import annotations

import copy
import json
import re
import weakref
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Final, Literal, get_args

from pes_agent.config import PlanningMode, ProviderConfig
from pes_agent.errors import ProviderError, UsageError
from pes_agent.planning.plan import LANGUAGE_STEP
from pes_agent.planning.prompts import build_repair_messages
from pes_agent.protocols import LLMResponse, ModelCaller, StreamListener
from pes_agent.providers.base import LLMPhase, PromptMessage, StructuredOutput
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall

__all__ = [
    "PLAN_SCHEMA",
    "STRICT_PLAN_SCHEMA",
    "SUBMIT_PLAN",
    "PlanChannel",
    "PlanReply",
    "StructuredRefusals",
    "check_planning_mode",
    "plan_schema",
    "refused_structured_output",
    "structured_mode_error",
    "structured_output_of",
    "submit_plan_tool",
    "thinking_enabled",
]

#: The name of the tool whose input is the plan (`"forced_tool"` providers).
SUBMIT_PLAN: Final = "submit_plan"

_SUBMIT_PLAN_DESCRIPTION: Final = (
    "Submit the plan for the user's request: the calls to run, in order, then the intent, "
    "following the rules of the system prompt."
)
# Appended to the planning prompt's system message (by concatenation, never formatting).
_RESPONSE_FORMAT_NOTE: Final = (
    "# Structured reply\n"
    'Your reply follows a JSON Schema: {"calls": [...], "intent": "..."}, one object per call '
    'line, in order: {"tool": "<name>", "args": "<its arguments as one JSON object in a '
    'string>", "after": [<steps it waits for>]}, e.g. {"tool": "get_weather", "args": '
    '"{\\"city\\": \\"Paris\\"}", "after": []}. A language step is {"tool": '
    '"language_step", "args": "{\\"instruction\\": \\"...\\"}", "after": []}.'
)
_FORCED_TOOL_NOTE: Final = (
    "# Structured reply\n"
    'Submit the plan by calling the submit_plan tool: {"calls": [...], "intent": "..."}, one '
    'object per call line, in order: {"tool": "<name>", "args": {<its arguments>}}, with '
    '"after": [<steps>] when it waits for steps and "why" when useful. A language step is '
    '{"tool": "language_step", "args": {"instruction": "..."}}.'
)
_TOOL_REPAIR_REQUEST: Final = (
    "\nCall submit_plan again with the corrected plan, following the rules above."
)


def _call_schema(tool_names: tuple[str, ...], *, strict: bool) -> dict[str, Any]:
    names: dict[str, Any] = (
        {"type": "string", "enum": [*tool_names, LANGUAGE_STEP]}
        if tool_names
        else {"type": "string"}
    )
    tool = {**names, "description": f'The tool to run, or "{LANGUAGE_STEP}".'}
    after = {
        "type": "array",
        "items": {"type": "integer"},
        "description": "Steps this call waits for beyond those its placeholders name.",
    }
    if strict:
        return {
            "type": "object",
            "properties": {
                "tool": tool,
                "args": {
                    "type": "string",
                    "description": (
                        "The arguments as one JSON object in a string; may hold "
                        '{step_N_result} placeholders; "{}" for none.'
                    ),
                },
                "after": after,
            },
            "required": ["tool", "args", "after"],
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "properties": {
            "tool": tool,
            "args": {
                "type": "object",
                "description": "The arguments; may hold {step_N_result} placeholders.",
            },
            "after": after,
            "why": {"type": "string", "description": "Why, in a few words, if not obvious."},
        },
        "required": ["tool"],
    }


@lru_cache(maxsize=64)
def _cached_schema(tool_names: tuple[str, ...], strict: bool) -> dict[str, Any]:
    # The calls come first, so that each can start while the rest of the answer streams.
    schema: dict[str, Any] = {
        "title": "plan",
        "type": "object",
        "properties": {
            "calls": {
                "type": "array",
                "items": _call_schema(tool_names, strict=strict),
                "description": "The calls to run, in order (step 1 first); [] for none.",
            },
            "intent": {"type": "string", "description": "The user's goal, in a few words."},
        },
        "required": ["calls", "intent"],
    }
    if strict:
        schema["additionalProperties"] = False
    return schema


def plan_schema(tool_names: Sequence[str] = (), *, strict: bool = False) -> dict[str, Any]:
    """The JSON Schema of a plan (`calls`, then `intent`), a fresh copy.

    Each call is `{"tool", "args", "after"}` (plus an optional `"why"`), the compact
    protocol's call line as JSON; a language step is the tool `"language_step"` with args
    `{"instruction": ...}`. With `tool_names`, `tool` must be one of them (or
    `"language_step"`). `strict=True` gives the form OpenAI's strict structured outputs
    accept: every field required and each call's `args` a JSON string; otherwise `args` is a
    free-form object.
    """
    return copy.deepcopy(_cached_schema(tuple(tool_names), strict))


#: The plan's schema with free-form `arguments` (the `submit_plan` input), for any tools.
PLAN_SCHEMA: Final = plan_schema()
#: The plan's schema in OpenAI's strict form (`arguments` a JSON string), for any tools.
STRICT_PLAN_SCHEMA: Final = plan_schema(strict=True)


def submit_plan_tool(tool_names: Sequence[str] = ()) -> ToolSchema:
    """The `submit_plan` tool: its input is a plan calling only `tool_names`."""
    return ToolSchema(
        name=SUBMIT_PLAN,
        description=_SUBMIT_PLAN_DESCRIPTION,
        input_schema=plan_schema(tool_names),
    )


_MODES: Final[tuple[str, ...]] = get_args(PlanningMode)


def check_planning_mode(mode: object) -> PlanningMode:
    """`mode` if it is a planning mode; else a UsageError naming the ones there are."""
    if mode == "auto":
        return "auto"
    if mode == "structured":
        return "structured"
    if mode == "text":
        return "text"
    raise UsageError(f"planning_mode must be one of {', '.join(map(repr, _MODES))}; got {mode!r}")


def structured_mode_error(provider: object) -> UsageError:
    """The error for `planning_mode="structured"` on a provider without structured output."""
    return UsageError(
        "planning_mode='structured' needs a provider with structured output (OpenAI, "
        "Anthropic, an OpenAI-compatible server, or a provider object whose structured_output "
        f"is 'response_format' or 'forced_tool'); {type(provider).__name__} has none: use "
        "planning_mode='auto' (structured where supported, text otherwise) or 'text'"
    )


def structured_output_of(provider: object) -> StructuredOutput | None:
    """How `provider` constrains an answer to a schema (its `structured_output`), or None."""
    value = getattr(provider, "structured_output", None)
    if value == "response_format":
        return "response_format"
    if value == "forced_tool":
        return "forced_tool"
    return None


def thinking_enabled(provider: object, extra: dict[str, Any] | None = None) -> bool:
    """Whether extended thinking is on for calls to `provider` (its config's options, then
    the call's `extra` parameters): Anthropic refuses a forced tool then."""
    config = getattr(provider, "config", None)
    options = dict(config.options) if isinstance(config, ProviderConfig) else {}
    options.update(extra or {})
    thinking = options.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


# What a server's refusal of structured output says: the parameter it does not take.
_REFUSAL: Final = re.compile(
    r"response_format|json_schema|json schema|output_config|output_format|structured output"
    r"|guided|tool_choice|tool use|\btools?\b|schema",
    re.IGNORECASE,
)


def refused_structured_output(error: ProviderError) -> bool:
    """Whether `error` is the server refusing the structured-output option itself (HTTP 400
    or 422 naming it), so that asking in text could work."""
    return error.status_code in (400, 422) and _REFUSAL.search(error.message) is not None


class StructuredRefusals:
    """The providers whose server refused structured output, so they are asked in text.

    Held by the planner for the agent's life; a provider is forgotten when it is garbage
    collected (one that cannot be weakly referenced is kept, so its `id` is never reused).
    """

    __slots__ = ("_refused",)

    def __init__(self) -> None:
        self._refused: dict[int, object] = {}

    def remember(self, provider: object) -> None:
        """Ask `provider` in text from now on."""
        key = id(provider)
        entry: object
        try:
            entry = weakref.ref(provider, lambda _: self._refused.pop(key, None))
        except TypeError:
            entry = provider
        self._refused[key] = entry

    def refused(self, provider: object) -> bool:
        """Whether `provider`'s server refused structured output before."""
        entry = self._refused.get(id(provider))
        if isinstance(entry, weakref.ref):
            entry = entry()
        return entry is provider

    def __len__(self) -> int:
        return len(self._refused)


class _SubmitPlanInput:
    """Hands a `submit_plan` call's arguments to a listener as the answer's text (they are
    the plan, in JSON); the text around it only when `text_too` (a plan the model may write
    as text instead), and only until the call begins."""

    __slots__ = ("_calling", "_listener", "_text_too")

    def __init__(self, listener: StreamListener, *, text_too: bool) -> None:
        self._listener = listener
        self._text_too = text_too
        self._calling = False

    def on_text(self, text: str) -> None:
        if self._text_too and not self._calling:
            self._listener.on_text(text)

    def on_tool_input(self, call_id: str, name: str, text: str) -> None:
        if name != SUBMIT_PLAN:
            return
        if not self._calling:
            self._calling = True
            self._listener.on_restart()  # what text came before is not the plan
        self._listener.on_text(text)

    def on_restart(self) -> None:
        self._calling = False
        self._listener.on_restart()


@dataclass(frozen=True, slots=True)
class PlanReply:
    """One planning reply: `text` is what the parser reads (the text answer, or the plan a
    structured answer carried, as JSON); `call` is the `submit_plan` call it came in."""

    text: str
    response: LLMResponse
    call: ToolCall | None = None


ChannelKind = Literal["text", "response_format", "forced_tool"]


@dataclass(frozen=True, slots=True)
class PlanChannel:
    """How the planning calls of one run ask for the plan and read it.

    `LLMPlanner` picks it per run; `prompt` adapts the planning messages, `ask` makes
    one call and `repair` builds the repair conversation in the same channel.
    """

    kind: ChannelKind = "text"
    tool_names: tuple[str, ...] = ()
    #: `forced_tool` only: offer `submit_plan` without forcing it (extended thinking is on).
    optional_tool: bool = False

    @property
    def structured(self) -> bool:
        """Whether the calls carry a schema (anything but plain text)."""
        return self.kind != "text"

    def prompt(self, messages: Sequence[PromptMessage]) -> Sequence[PromptMessage]:
        """The planning messages, the first system message told how to reply here (`messages`
        itself when it is a list or tuple and the channel adds nothing: plain text)."""
        note = {"text": None, "response_format": _RESPONSE_FORMAT_NOTE}.get(
            self.kind, _FORCED_TOOL_NOTE
        )
        if note is None and isinstance(messages, list | tuple):
            # Nothing to add: the same list (one fewer alive while the model answers).
            return messages
        result = list(messages)
        if note is None:
            return result
        for index, message in enumerate(result):
            if message.role == "system":
                result[index] = replace(message, content=message.content + "\n\n" + note)
                return result
        return [PromptMessage(role="system", content=note), *result]

    async def ask(
        self,
        llm: ModelCaller,
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        listener: StreamListener | None = None,
    ) -> PlanReply:
        """Make one planning (or repair) call and take the plan out of its answer; the
        answer's text goes to `listener` as it streams (the JSON of a `response_format`
        plan too; a `submit_plan` call arrives whole)."""
        return self.reply(await self.call(llm, messages, phase=phase, listener=listener))

    def call(
        self,
        llm: ModelCaller,
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        listener: StreamListener | None = None,
    ) -> Awaitable[LLMResponse]:
        """The model call of `ask`, made through `llm` and not yet awaited; `reply` reads
        its answer. `LLMPlanner` awaits it itself: no coroutine of this channel's stays
        alive in each run while the model answers."""
        # Passed only when given, so a model caller written before listeners keeps working.
        if self.kind == "text":
            # Called without a `streaming` dict, which would stay alive while the model answers.
            if listener is None:
                return llm(messages, phase=phase)
            return llm(messages, phase=phase, listener=listener)
        streaming: dict[str, Any] = {} if listener is None else {"listener": listener}
        if self.kind == "response_format":
            return llm(
                messages,
                phase=phase,
                response_format=plan_schema(self.tool_names, strict=True),
                **streaming,
            )
        if listener is not None:
            # The plan streams as submit_plan's arguments; text beside it is not the plan,
            # unless the tool is only offered (thinking on) and the model writes the plan.
            streaming = {"listener": _SubmitPlanInput(listener, text_too=self.optional_tool)}
        return llm(
            messages,
            phase=phase,
            tools=(submit_plan_tool(self.tool_names),),
            tool_choice="auto" if self.optional_tool else SUBMIT_PLAN,
            **streaming,
        )

    def reply(self, response: LLMResponse) -> PlanReply:
        """The plan in the answer to `call`: the text, or a `submit_plan` call's arguments."""
        if self.kind != "forced_tool":
            return PlanReply(response.text, response)
        for event in response.tool_calls:
            if event.call.name == SUBMIT_PLAN:
                # Input that was not a JSON object goes to the parser as sent, which
                # tolerates what it can and otherwise says what to fix.
                if event.error is not None:
                    text = event.raw or ""
                else:
                    text = json.dumps(event.call.arguments, ensure_ascii=False)
                return PlanReply(text, response, event.call)
        # Only possible when the tool was not forced (or a server ignored tool_choice).
        return PlanReply(response.text, response)

    def repair(
        self, messages: Sequence[PromptMessage], reply: PlanReply, problems: Sequence[str]
    ) -> list[PromptMessage]:
        """The conversation asking the model to fix `reply`, quoting `problems`."""
        if reply.call is None:
            return build_repair_messages(messages, reply.text, problems)
        # The model's submit_plan call must be answered by a tool result: the problems.
        request = (
            "The plan could not be used:\n"
            + "\n".join("- " + problem for problem in problems)
            + _TOOL_REPAIR_REQUEST
        )
        return [
            *messages,
            PromptMessage(role="assistant", content=reply.response.text, tool_calls=(reply.call,)),
            PromptMessage(
                role="tool", content=request, tool_call_id=reply.call.id, name=SUBMIT_PLAN
            ),
        ]
