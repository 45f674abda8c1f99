"""Read a model's planning or synthesis output, tolerating what models actually write.

The planning prompt asks for one JSON object
(`{"title", "intent", "plan", "toolCalls": [...], "thoughts"?}`); ART's section format
(`Intent:` / `Plan:` / `Tool Calls:` labels) is read as well. A call with an `"instruction"` and
no `"toolName"` (or `"toolName": "language_step"`) is a language step; one with both, or a
language step with arguments, is an error for the model to fix. The parser never raises: a section
that is present but unusable becomes `tool_calls=[]` plus a sentence in `PlanningOutput.errors`
that quotes the problem, because that text is sent back to the model in the repair round-trip.

How the text is read, in order:

1. `<think>…</think>` and `<thinking>…</thinking>` blocks become `thoughts` (one entry per
   non-empty block) and are cut out of the text. A closing tag with no opener before it ends a
   thought that began with the output (models whose chat template opens the block in the
   prompt), unless a section label comes before it. An opening tag that is never closed runs
   to the first line that starts the plan (a section label, `{` or a code fence), or to the end.
   No other `<` is touched.
2. JSON values are found by bracket matching that knows JSON strings and escapes, in one linear
   pass, so prose, code fences and nested arrays around or inside the JSON do not matter.
   Trailing commas outside strings are tolerated, and so are raw line breaks inside strings.
   (Steps 1 and 2 are `pes_agent.planning.model_text`, which other readers of model text share.)
3. If a JSON object with plan keys comes before any section label, it is the plan. Otherwise
   the text is split at section labels: a label starts a line (after optional `#`/`*`
   markdown), is matched in any case, and its section runs until the next label.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pes_agent.observing.logs import get_logger
from pes_agent.planning.call_lines import CALL_LINE_START, CallLine, LineProblem, read_call_line
from pes_agent.planning.model_text import (
    SECTION_LABEL,
    Decoded,
    JSONProblem,
    JSONScan,
    decode_json,
    find_json,
    loads_json,
    scan_json,
    split_thoughts,
)
from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall, PlanningOutput

__all__ = ["OutputParser", "tool_call_from_json"]

_log = get_logger("pes_agent.planning.parser")

_STEP_NUMBER: Final = re.compile(r"[ \t]*(?:\d{1,4}[.)]|[-*])[ \t]+")

_PLAN_KEYS: Final = frozenset({"title", "intent", "plan", "toolcalls", "calls"})
# What a model writes in a Tool Calls section when it needs no tool (compared lowercased).
_NO_TOOL_CALLS: Final = frozenset(
    {
        "",
        "none",
        "null",
        "n/a",
        "none needed",
        "no tools",
        "no tools needed",
        "no tool calls",
        "no tool calls needed",
    }
)
_PLAN_KEY_TEXT: Final = re.compile(r'"(?:title|intent|plan|tool_?calls)"[ \t\r\n]*:', re.IGNORECASE)
_EXCERPT_CHARS: Final = 160
_INTERNAL_FAILURE: Final = "The parser failed unexpectedly"

_MISSING: Final = object()


class OutputParser:
    """Turns raw model text into a `PlanningOutput` or a final answer; never raises."""

    def parse_planning_output(
        self, text: str, *, read: Mapping[tuple[str, int], ParsedToolCall] | None = None
    ) -> PlanningOutput:
        """Read intent, plan, tool calls and thoughts from a planning model's output.

        A section the model left out is `None`; a section that is there but unusable gives
        `tool_calls == []` and an entry in `errors`. Valid tool calls are kept next to
        invalid ones, and each invalid one gets its own error. Never raises: a failure of
        the parser itself is an entry in `errors`.

        Args:
            text: The planning call's answer: JSON, ART's sections or text around either.
            read: Calls already read from lines of this text as it streamed, by (line, step)
                (`PlanStreamReader.read`): the same line at the same step is not read again.

        Returns:
            The title, intent, plan, tool calls and thoughts found, with `errors`.
        """
        try:
            return _parse_planning(text, read or {})
        except Exception as exc:  # the contract is "never raises": report instead of crashing
            _log.exception("planning output parser failed", text_length=len(text))
            return PlanningOutput(errors=[f"{_INTERNAL_FAILURE} ({type(exc).__name__}: {exc})."])

    def parse_synthesis_output(self, text: str) -> str:
        """Return the final answer: the text without thinking blocks, whitespace trimmed.

        A code-fenced answer is kept as written: a fence may be the point of the answer.

        Args:
            text: The synthesis call's answer.

        Returns:
            The answer to show the user.
        """
        _, answer = split_thoughts(text, plan_aware=False)
        return answer.strip()


# --------------------------------------------------------------------------------------------
# Planning output
# --------------------------------------------------------------------------------------------


def _parse_planning(text: str, read: Mapping[tuple[str, int], ParsedToolCall]) -> PlanningOutput:
    thoughts, body = split_thoughts(text, plan_aware=True)
    errors: list[str] = []
    labels = list(SECTION_LABEL.finditer(body))
    if _opens_with_call(body):
        output = _from_call_lines(body, errors, read)
    else:
        scan = scan_json(body)
        found = find_json(body, scan, _is_plan_object, objects_only=True)
        plan_object = found.value if found is not None else None
        if (
            found is not None
            and isinstance(plan_object, dict)
            and (not labels or found.start < labels[0].start())
        ):
            output = _from_plan_object(plan_object, errors)
        elif labels and _calls_may_follow(labels) and _has_call_line(body):
            output = _from_call_lines(body, errors, read)  # "Intent: ..." before the calls
        elif labels:
            output = _from_sections(body, labels, errors)
        else:
            output = PlanningOutput()
            broken = _broken_plan_object(body, scan)
            if broken is not None:
                errors.append(broken)
    all_thoughts = thoughts + (output.thoughts or [])
    # `output` was built above for this answer alone: updated in place as
    # `model_copy(update=...)` updates its copy (values as given, the fields marked set),
    # without the copy (a plan a run).
    update = {"thoughts": all_thoughts or None, "errors": errors}
    output.__dict__.update(update)
    output.__pydantic_fields_set__.update(update)
    return output


# --------------------------------------------------------------------------------------------
# The compact protocol: one call per line (pes_agent.planning.call_lines)
# --------------------------------------------------------------------------------------------

_FENCE_OR_BLANK: Final = re.compile(r"[ \t]*(?:```[A-Za-z]*[ \t]*)?\r?")
_NUMBERED_CALL: Final = re.compile(r"[ \t]*\d{1,4}[.)][ \t]*[A-Za-z0-9_][A-Za-z0-9_.-]*\(")
_LINE_LABEL: Final = re.compile(
    r"[ \t]*(?:[#*]+[ \t]*)?(title|intent)[ \t]*(?:\*\*)?:(?:\*\*)?", re.I
)


def _lines(body: str) -> Iterable[tuple[int, str]]:
    """Each line of `body` with where it starts."""
    start = 0
    for line in body.split("\n"):
        yield start, line
        start += len(line) + 1


def _opens_with_call(body: str) -> bool:
    """Whether the first line that says anything (code fences aside) is a call: readable, or
    numbered like one (`1. name(`), so that a mistake in it is reported, not skipped."""
    for start, line in _lines(body):
        if _FENCE_OR_BLANK.fullmatch(line):
            continue
        return _NUMBERED_CALL.match(line) is not None or isinstance(
            read_call_line(body, start), CallLine
        )
    return False


def _has_call_line(body: str) -> bool:
    return any(
        _NUMBERED_CALL.match(line) or CALL_LINE_START.match(line) for line in body.split("\n")
    )


def _calls_may_follow(labels: list[re.Match[str]]) -> bool:
    """Whether labelled text may hold call lines: ART's sections put calls under a "Tool
    Calls" label and number the steps of a "Plan", so neither is read as calls."""
    names = {_normalised_key(label.group(1)) for label in labels}
    return not any(name.startswith("tool") or name == "plan" for name in names)


def _from_call_lines(
    body: str, errors: list[str], read: Mapping[tuple[str, int], ParsedToolCall]
) -> PlanningOutput:
    """A plan in the compact protocol: call lines, then `Intent:` (and `Title:`) lines.

    A line that starts like a call but cannot be read is an error for the model to fix; it
    still counts as a step, so the steps after it keep the numbers the model gave them.
    """
    calls: list[ParsedToolCall] = []
    texts: dict[str, str] = {}
    step = 0
    for line in body.split("\n"):
        # A line the stream reader read is a call (it reads no label line): looked up first,
        # it is not matched again.
        known = read.get((line, step + 1)) if read else None
        if known is not None:
            step += 1
            calls.append(known)
            continue
        label = _LINE_LABEL.match(line)
        if label is not None:
            texts.setdefault(label.group(1).lower(), line[label.end() :].strip())
            continue
        if CALL_LINE_START.match(line) is None:
            continue  # prose around the calls
        found = read_call_line(line)
        if found is None:
            continue
        step += 1
        if isinstance(found, LineProblem):
            errors.append(f"Call {step}: {found.message}")
            continue
        try:
            calls.append(found.call(step))
        except ValueError as error:  # pydantic: the call's shape (e.g. a reserved name)
            errors.append(f"Call {step} ({found.name}): {_validation_message(error)}")
    intent = texts.get("intent") or None
    return PlanningOutput(
        title=texts.get("title") or intent, intent=intent, plan=None, tool_calls=calls
    )


def _validation_message(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        messages = [str(item.get("msg", "")).removeprefix("Value error, ") for item in errors()]
        return "; ".join(message for message in messages if message) or str(error)
    return str(error)


def _from_plan_object(obj: dict[str, Any], errors: list[str]) -> PlanningOutput:
    fields = _normalised(obj)
    tool_calls: list[ParsedToolCall] | None = None
    key = next((name for name in ("toolcalls", "calls") if name in fields), None)
    if key is not None:
        where = 'The "toolCalls" field' if key == "toolcalls" else 'The "calls" field'
        value = fields[key]
        if isinstance(value, str):
            tool_calls = _tool_calls_from_text(value, where, errors, single_object_ok=True)
        else:
            tool_calls = _tool_calls_from_value(value, where, errors, single_object_ok=True)
    intent = _as_text(fields.get("intent"))
    title = _as_text(fields.get("title"))
    if key == "calls" and title is None:
        title = intent  # the compact protocol's one line of intent is also the title
    return PlanningOutput(
        title=title,
        intent=intent,
        plan=_plan_text(fields.get("plan")),
        tool_calls=tool_calls,
        thoughts=_thought_list(fields.get("thoughts", fields.get("thought"))),
    )


def _from_sections(body: str, labels: list[re.Match[str]], errors: list[str]) -> PlanningOutput:
    texts: dict[str, list[str]] = {}
    for index, label in enumerate(labels):
        end = labels[index + 1].start() if index + 1 < len(labels) else len(body)
        key = _normalised_key(label.group(1))
        key = "toolcalls" if key.startswith("tool") else key  # "Tool Call:", "tool_calls:"
        texts.setdefault(key, []).append(body[label.end() : end].strip())
    tool_calls: list[ParsedToolCall] | None = None
    if "toolcalls" in texts:
        sections = texts["toolcalls"]
        tool_calls = _tool_calls_from_text(
            sections[0], "Tool Calls section", errors, single_object_ok=False
        )
        if len(sections) > 1:
            # Guessing which list the model meant could run the wrong tools; let it say.
            errors.append(
                f"Found {len(sections)} Tool Calls sections; only the first was read. "
                "Write exactly one Tool Calls section."
            )
    return PlanningOutput(
        title=_joined(texts.get("title")),
        intent=_joined(texts.get("intent")),
        plan=_joined(texts.get("plan")),
        tool_calls=tool_calls,
    )


def _joined(parts: list[str] | None) -> str | None:
    """Join repeated sections so no text the model wrote is dropped."""
    if parts is None:
        return None
    return "\n".join(part for part in parts if part) if len(parts) > 1 else parts[0]


def _is_plan_object(value: object) -> bool:
    return isinstance(value, dict) and any(
        isinstance(key, str) and _normalised_key(key) in _PLAN_KEYS for key in value
    )


def _broken_plan_object(body: str, scan: JSONScan) -> str | None:
    """Describe a JSON plan object that is there but cannot be read, so the model can fix it."""
    for item in scan.top:
        snippet = body[item.start : item.end]
        if not snippet.startswith("{") or not _PLAN_KEY_TEXT.search(snippet):
            continue
        try:
            decode_json(snippet, whole=item.closed)
        except JSONProblem as problem:
            return f"The JSON plan object is not valid JSON: {problem}."
    return None


# --------------------------------------------------------------------------------------------
# Tool calls
# --------------------------------------------------------------------------------------------


def _tool_calls_from_text(
    text: str, where: str, errors: list[str], *, single_object_ok: bool
) -> list[ParsedToolCall]:
    stripped = text.strip()
    if stripped.rstrip(".").strip().lower() in _NO_TOOL_CALLS:
        return []

    def preferred(value: object) -> bool:
        if isinstance(value, list):
            return all(isinstance(entry, dict) for entry in value)
        return single_object_ok and isinstance(value, dict)

    scan = scan_json(stripped)
    found = find_json(stripped, scan, preferred)
    if found is None:
        problem = _first_problem(stripped, scan)
        if isinstance(problem, Decoded):
            found = problem
        else:
            errors.append(f"{where} {problem}")
            return []
    return _tool_calls_from_value(found.value, where, errors, single_object_ok=single_object_ok)


def _tool_calls_from_value(
    value: object, where: str, errors: list[str], *, single_object_ok: bool
) -> list[ParsedToolCall]:
    if value is None:
        return []
    if isinstance(value, dict):
        if not single_object_ok:
            errors.append(
                f"{where} must be a JSON array of tool calls, got a single object: "
                f"{_quote(value)}. Wrap the calls in [ ]."
            )
            return []
        value = [value]
    if not isinstance(value, list):
        errors.append(
            f"{where} must be a JSON array of tool calls, got {_kind(value)}: {_quote(value)}."
        )
        return []
    calls: list[ParsedToolCall] = []
    seen: set[str] = set()
    for position, entry in enumerate(value, start=1):
        call = _tool_call(entry, position)
        if isinstance(call, str):
            errors.append(call)
        elif call.call_id in seen:
            errors.append(
                f'Tool call {position} ("{call.tool_name}") repeats callId "{call.call_id}"; '
                "give every call a unique callId."
            )
        else:
            seen.add(call.call_id)
            calls.append(call)
    return calls


def tool_call_from_json(entry: object, position: int) -> ParsedToolCall | str:
    """One entry of a JSON plan's calls (step `position`) as a call, read as the parser reads
    it; or the sentence, for the model, that says why it cannot be one."""
    return _tool_call(entry, position)


def _tool_call(entry: object, position: int) -> ParsedToolCall | str:
    """Build one call, or return the sentence that says why this entry cannot be one."""
    if not isinstance(entry, dict):
        return f"Tool call {position} must be a JSON object, got {_kind(entry)}: {_quote(entry)}."
    fields = _normalised(entry)
    # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments": "<json>"}}.
    function = fields.get("function")
    inner = _normalised(function) if isinstance(function, dict) else {}
    if isinstance(function, str):
        inner = {"name": function}

    name = _first(inner, fields, keys=("toolname", "name", "tool"))
    instruction = _first(inner, fields, keys=("instruction",))
    if instruction is not _MISSING and instruction is not None:
        return _language_step(entry, fields, inner, name, instruction, position)
    if not isinstance(name, str) or not name.strip():
        detail = (
            "no tool name" if name is _MISSING or name is None else "a tool name that is not text"
        )
        return (
            f'Tool call {position} has {detail} (expected "toolName", or "instruction" for a '
            f"language step): {_quote(entry)}."
        )
    tool_name = name.strip()
    label = f'Tool call {position} ("{tool_name}")'
    if tool_name == LANGUAGE_STEP:
        # The structured protocol writes a language step as this tool with an instruction.
        arguments = _arguments(_first(inner, fields, keys=_ARGUMENT_KEYS), label)
        if isinstance(arguments, dict) and set(arguments) == {"instruction"}:
            fields = {**fields, "arguments": {}}
            return _language_step(entry, fields, inner, name, arguments["instruction"], position)
        return (
            f'{label} is a language step without an "instruction": {_quote(entry)}. Give it '
            'an "instruction", or name a tool from the list.'
        )

    parts = _parts(inner, fields, position, label)
    if isinstance(parts, str):
        return parts
    return ParsedToolCall(
        call_id=parts.call_id,
        tool_name=tool_name,
        arguments=parts.arguments,
        depends_on=parts.depends_on,
        why=parts.why,
    )


def _language_step(
    entry: dict[Any, Any],
    fields: dict[str, object],
    inner: dict[str, object],
    name: object,
    instruction: object,
    position: int,
) -> ParsedToolCall | str:
    """Build a language step (a call with an "instruction"), or say why it cannot be one."""
    label = f"Tool call {position} (a language step)"
    if not isinstance(instruction, str) or not instruction.strip():
        return f'{label} has an "instruction" that is not a non-empty text: {_quote(instruction)}.'
    named = isinstance(name, str) and name.strip() and name.strip() != LANGUAGE_STEP
    if named or (name is not _MISSING and name is not None and not isinstance(name, str)):
        # Guessing whether the tool or the instruction was meant could do the wrong thing.
        return (
            f'{label} has both "toolName" and "instruction": {_quote(entry)}. A call either '
            'runs a tool ("toolName" and "arguments") or is a language step ("instruction" '
            "only); write one of them."
        )
    parts = _parts(inner, fields, position, label)
    if isinstance(parts, str):
        return parts
    if parts.arguments:
        return (
            f"{label} has arguments {_quote(parts.arguments)}; a language step takes none. "
            "Write what it needs into the instruction, with placeholders such as "
            "{step_1_result}."
        )
    return ParsedToolCall(
        call_id=parts.call_id,
        instruction=instruction.strip(),
        depends_on=parts.depends_on,
        why=parts.why,
    )


@dataclass(slots=True, frozen=True)
class _Parts:
    """What a tool call and a language step both have: an id, arguments and dependencies."""

    call_id: str
    arguments: dict[str, Any] | list[Any]
    depends_on: list[str]
    why: str | None = None


def _parts(
    inner: dict[str, object], fields: dict[str, object], position: int, label: str
) -> _Parts | str:
    """The call's id, arguments and dependencies, or the sentence that says why one is wrong."""
    call_id = _call_id(inner, fields, position, label)
    if isinstance(call_id, _Problem):
        return call_id.message
    arguments = _arguments(_first(inner, fields, keys=_ARGUMENT_KEYS), label)
    if isinstance(arguments, str):
        return arguments
    depends_on = _depends_on_or_error(inner, fields, label)
    if isinstance(depends_on, str):
        return depends_on
    why = _first(inner, fields, keys=("why", "reason"))
    return _Parts(
        call_id, arguments, depends_on, why.strip() or None if isinstance(why, str) else None
    )


@dataclass(slots=True, frozen=True)
class _Problem:
    """Why part of a call cannot be read (a sentence for the model)."""

    message: str


def _call_id(
    inner: dict[str, object], fields: dict[str, object], position: int, label: str
) -> str | _Problem:
    """The call's id (`call_<position>` when it has none), or why it cannot be one."""
    raw_id = _first(inner, fields, keys=("callid", "id", "toolcallid"))
    if raw_id is _MISSING or raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        return f"call_{position}"
    if isinstance(raw_id, str):
        return raw_id.strip()
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        return str(raw_id)
    return _Problem(f"{label} has a callId that is not text: {_quote(raw_id)}.")


def _depends_on_or_error(
    inner: dict[str, object], fields: dict[str, object], label: str
) -> list[str] | str:
    raw_depends_on = _first(inner, fields, keys=("dependson", "depends", "dependencies"))
    if raw_depends_on is _MISSING:
        # The compact protocols' "after": the step numbers a call waits for.
        after = _first(inner, fields, keys=("after",))
        if isinstance(after, list) and all(_is_step(step) for step in after):
            return [f"call_{step}" for step in after]
        raw_depends_on = after
    depends_on = _depends_on(raw_depends_on)
    if depends_on is None:
        return f"{label} has dependsOn that is not a list of callIds: {_quote(raw_depends_on)}."
    return depends_on


_ARGUMENT_KEYS: Final = ("arguments", "parameters", "args", "input", "params")


def _arguments(raw: object, label: str) -> dict[str, Any] | list[Any] | str:
    if raw is _MISSING or raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = loads_json(raw)
        except JSONProblem as problem:
            return f"{label} has an arguments string that is not valid JSON: {problem}."
    if isinstance(raw, dict):
        return {str(key): value for key, value in raw.items()}
    if isinstance(raw, list):
        # Kept as written, as ART does; the executor refuses it with an error result.
        return raw
    return (
        f"{label} has arguments that are not a JSON object of named parameters "
        f'(got {_kind(raw)}: {_quote(raw)}); write them as {{"name": value, ...}}.'
    )


def _is_step(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _depends_on(raw: object) -> list[str] | None:
    if raw is _MISSING or raw is None:
        return []
    items: Iterable[object]
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list):
        items = raw
    else:
        items = [raw]
    ids: list[str] = []
    for item in items:
        if isinstance(item, str):
            if item.strip():
                ids.append(item.strip())
        elif isinstance(item, int) and not isinstance(item, bool):
            ids.append(str(item))
        else:
            return None
    return ids


def _first(*sources: dict[str, object], keys: tuple[str, ...]) -> object:
    for source in sources:
        for key in keys:
            if key in source:
                return source[key]
    return _MISSING


# --------------------------------------------------------------------------------------------
# Text fields
# --------------------------------------------------------------------------------------------


def _normalised_key(key: str) -> str:
    return "".join(char for char in key.lower() if char.isalnum())


def _normalised(obj: dict[Any, Any]) -> dict[str, object]:
    """Map `toolName`, `tool_name` and `Tool Name` alike to `toolname`; the first one wins."""
    fields: dict[str, object] = {}
    for key, value in obj.items():
        fields.setdefault(_normalised_key(str(key)), value)
    return fields


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        # Not recursive: a deeply nested list from the model must not exhaust the stack.
        parts = (
            item.strip() if isinstance(item, str) else _quote(item, limit=None) for item in value
        )
        return "\n".join(part for part in parts if part)
    return _quote(value, limit=None)


def _plan_text(value: object) -> str | None:
    """A plan written as a list of steps becomes numbered lines."""
    if isinstance(value, dict):
        steps = _normalised(value).get("steps")
        if isinstance(steps, list):
            value = steps
    if not isinstance(value, list):
        return _as_text(value)
    lines = []
    for number, step in enumerate(value, start=1):
        text = _step_text(step)
        numbered = _STEP_NUMBER.match(text)
        lines.append(f"{number}. {text[numbered.end() :] if numbered else text}")
    return "\n".join(lines)


def _step_text(step: object) -> str:
    if isinstance(step, dict):
        fields = _normalised(step)
        for key in ("description", "text", "action", "step", "task", "title", "content"):
            if isinstance(fields.get(key), str):
                return str(fields[key]).strip()
    return _as_text(step) or ""


def _thought_list(value: object) -> list[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    thoughts = [text for item in items if (text := _as_text(item))]
    return thoughts or None


# --------------------------------------------------------------------------------------------
# JSON problems for the model
# --------------------------------------------------------------------------------------------


def _first_problem(text: str, scan: JSONScan) -> Decoded | str:
    """The first readable JSON value (of the wrong shape), else why the first one is not JSON."""
    first_error: str | None = None
    for item in scan.top:
        try:
            value = decode_json(text[item.start : item.end], whole=item.closed)
        except JSONProblem as problem:
            first_error = first_error or f"is not valid JSON: {problem}."
            continue
        return Decoded(item.start, value)
    return first_error or f"contains no JSON array: {_excerpt(text)}."


# --------------------------------------------------------------------------------------------
# Quoting for error messages
# --------------------------------------------------------------------------------------------


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return type(value).__name__


def _quote(value: object, limit: int | None = _EXCERPT_CHARS) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = f"<{_kind(value)}>"
    if limit is not None and len(text) > limit:
        return text[:limit] + "…"
    return text


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…")
