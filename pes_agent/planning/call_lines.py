"""The compact planning protocol: a plan is its calls, one per line, then a line of intent.

```
1. get_weather(city="Paris")
2. get_weather(city="Tokyo")
3. calculator(expression="{step_1_result.temp_c} - {step_2_result.temp_c}")  # the difference
4. language_step("Compare {step_1_result} and {step_2_result} in one sentence.")
5. after 3, 4: notify(text="done")
Intent: how much warmer Tokyo is than Paris
```

A line is `[N.] [after N, M:] name(param=value, ...) [# why]`: values are JSON (`"text"`, `3`,
`true`, `null`, `[...]`, `{...}`; Python's `True`, `False` and `None` are read too), the
optional `after` lists the steps the call waits for beyond those its placeholders name, and
`# why` is a short reason shown with the plan. A call's step is its line's position among the
calls (the number a model writes is only a label), so its id is `call_<step>`. A language step
is `language_step("instruction")` (or `language_step(instruction="...")`).

The protocol says each thing once: the calls carry the plan (the PLAN observation is rendered
from them with `render_call`), and one `Intent:` line after them gives the goal, also the
turn's title. It costs about what a model's native tool calls cost in output tokens. Nothing
after a call's `)` can change what it does (`after` comes before the call, and a `# why` only
explains it), so a call can start the moment its `)` streams, while the rest of the plan is
still being written (`pes_agent.planning.streaming`).

`read_call_line` reads one line; the planning parser (`pes_agent.planning.parser`) reads whole
answers with it. Nothing here evaluates model text: values are decoded as JSON only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall

__all__ = [
    "CALL_LINE_START",
    "CallLine",
    "LineProblem",
    "read_call_line",
    "render_call",
    "render_calls",
]

# The steps an `after` names: "3", "3, 4", "steps 3 and 4", "#3", "call_3".
_STEPS: Final = (
    r"(?:steps?[ \t]*)?#?(?:call_)?\d+(?:[ \t]*(?:,|and|&)?[ \t]*(?:steps?[ \t]*)?#?(?:call_)?\d+)*"
)
#: Where a line of the compact protocol starts: an optional step number, an optional
#: `after N, M:`, then `name(`.
CALL_LINE_START: Final = re.compile(
    r"[ \t]*(?:(?:[-*][ \t]+)?\d{1,4}[.):][ \t]*|[-*][ \t]+)?"
    rf"(?:after[ \t]+(?P<after>{_STEPS})[ \t]*:[ \t]*)?"
    r"(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})[ \t]*\(",
    re.IGNORECASE,
)
_KEY: Final = re.compile(
    r"[ \t\r\n]*([A-Za-z_][A-Za-z0-9_]*|\"[^\"\\\n]*\")[ \t\r\n]*[=:][ \t\r\n]*"
)
_SPACE: Final = re.compile(r"[ \t\r\n]*")
_PYTHON_WORDS: Final = re.compile(r"(True|False|None)\b")
# `after N` written behind the call, where it would come too late: the call may have started.
_AFTER_BEHIND: Final = re.compile(rf"[ \t]+after:?[ \t]+({_STEPS})", re.IGNORECASE)
# What may follow a call's `)` while the line streams without changing the call: nothing yet,
# or the start of a `# why` (or `//`).
_OPEN_TAIL: Final = re.compile(r"[ \t\r]*(?:(?:#|//|/$)[^\n]*)?$")
_NUMBER: Final = re.compile(r"\d+")
_WHY: Final = re.compile(r"[ \t]*(?:#|//)[ \t]*([^\n]*)")
_LINE_END: Final = re.compile(r"[ \t\r]*(?:\n|$)")
_DECODER: Final = json.JSONDecoder(strict=False)
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False)
_PYTHON_VALUES: Final[dict[str, Any]] = {"True": True, "False": False, "None": None}
_WORDS: Final[dict[str, Any]] = {**_PYTHON_VALUES, "true": True, "false": False, "null": None}
_NO_ARGUMENTS: Final = re.compile(r"[ \t\r\n]*\)")
# One named plain argument and what follows it: `)`, or `,` (and `)` if the comma trails);
# a group is set for the `)`. The value ends where JSON (or a Python word) ends, checked by the
# separator that must follow it.
_PLAIN_ARGUMENT: Final = re.compile(
    r"[ \t\r\n]*([A-Za-z_][A-Za-z0-9_]*|\"[^\"\\\n]*\")[ \t\r\n]*[=:][ \t\r\n]*"
    r"(?:(-?(?:0|[1-9][0-9]*))|\"([^\"\\\n]*)\"|(true|false|null|True|False|None))"
    r"[ \t\r\n]*(?:(\))|,(?:[ \t\r\n]*(\)))?)"
)


@dataclass(frozen=True, slots=True)
class CallLine:
    """One call read from a line: its tool (or `LANGUAGE_STEP`), arguments, the steps it waits
    for beyond its placeholders, its reason, and where the line ends in the text (-1 when a
    streamed line was read at its call's `)`, before its end)."""

    name: str
    arguments: dict[str, Any]
    after: tuple[int, ...]
    why: str | None
    end: int
    instruction: str | None = None

    def call(self, step: int) -> ParsedToolCall:
        """The call as the plan's step `step` (its id is `call_<step>`)."""
        depends_on = [f"call_{number}" for number in self.after] if self.after else []
        if self._read():
            # What `read_call_line` gives is already what validation would keep: build the
            # call directly, at a fraction of the cost (a plan has one per call).
            if self.instruction is not None:
                return _built(
                    {
                        "call_id": f"call_{step}",
                        "tool_name": LANGUAGE_STEP,
                        "arguments": {},
                        "depends_on": depends_on,
                        "instruction": self.instruction,
                        "why": self.why,
                    },
                    _LANGUAGE_SET,
                )
            return _built(
                {
                    "call_id": f"call_{step}",
                    "tool_name": self.name,
                    "arguments": dict(self.arguments),
                    "depends_on": depends_on,
                    "instruction": None,
                    "why": self.why,
                },
                _TOOL_SET,
            )
        if self.instruction is not None:
            return ParsedToolCall(
                call_id=f"call_{step}",
                instruction=self.instruction,
                depends_on=depends_on,
                why=self.why,
            )
        return ParsedToolCall(
            call_id=f"call_{step}",
            tool_name=self.name,
            arguments=self.arguments,
            depends_on=depends_on,
            why=self.why,
        )

    def _read(self) -> bool:
        """Whether this is a call as `read_call_line` reads it, which validation would keep as
        it is (a `CallLine` built by hand may not be)."""
        if self.why is not None and self.why.__class__ is not str:
            return False
        if self.instruction is not None:
            return (
                self.instruction.__class__ is str
                and bool(self.instruction.strip())
                and not self.arguments
            )
        return (
            self.name.__class__ is str
            and self.name != LANGUAGE_STEP
            and self.arguments.__class__ is dict
            and set(map(_type_of, self.arguments)) <= _STR
        )


_new = object.__new__
_set = object.__setattr__
_type_of = type
_STR = frozenset({str})
_TOOL_SET = frozenset({"call_id", "tool_name", "arguments", "depends_on", "why"})
_LANGUAGE_SET = frozenset({"call_id", "tool_name", "depends_on", "instruction", "why"})


def _built(fields: dict[str, Any], fields_set: frozenset[str]) -> ParsedToolCall:
    """The `ParsedToolCall` of `fields` (each already valid), unvalidated: what its
    constructor returns for them, `model_fields_set` included."""
    call: ParsedToolCall = _new(ParsedToolCall)
    _set(call, "__dict__", fields)
    _set(call, "__pydantic_fields_set__", set(fields_set))
    _set(call, "__pydantic_extra__", None)
    _set(call, "__pydantic_private__", None)
    return call


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line that starts like a call but cannot be read; `message` is worded for the model."""

    message: str
    end: int


class _Incomplete(Exception):
    """The text ends before the call does (more of the stream may complete it)."""


class _Unreadable(Exception):
    """The call cannot be read, whatever follows."""


def read_call_line(
    text: str, start: int = 0, *, final: bool = True
) -> CallLine | LineProblem | None:
    """Read the call on the line starting at `start` of `text`.

    Returns None when the line does not start like a call (`name(`) — or, with
    `final=False` (a stream still arriving), when the call is not complete yet; a
    `LineProblem` when it starts like one but cannot be read. With `final=False` a call is
    complete at its `)`, before its line ends: it is returned then with `why` None and `end`
    -1, since nothing that may still follow on the line can change it.
    """
    head = CALL_LINE_START.match(text, start)
    if head is None:
        return None
    name = head.group("name")
    written = head.group("after")
    after = () if written is None else tuple(int(number) for number in _NUMBER.findall(written))
    try:
        positional, arguments, position = _arguments(text, head.end())
        behind = _AFTER_BEHIND.match(text, position)
        if behind is not None:
            steps = behind.group(1).strip()
            raise _Unreadable(
                f"'after {steps}' goes before the call, since a call may start as soon as its "
                f"')' is written: N. after {steps}: {name}(...)"
            )
        why, end = _tail(text, position, final=final)
    except _Incomplete:
        if not final:
            return None
        line_end = text.find("\n", start)
        return LineProblem(
            f"The call {_excerpt(text[start:])} is not closed: end it with ')'.",
            len(text) if line_end < 0 else line_end + 1,
        )
    except _Unreadable as problem:
        line_end = text.find("\n", start)
        return LineProblem(str(problem), len(text) if line_end < 0 else line_end + 1)
    shown_end = len(text) if end < 0 else end
    if name == LANGUAGE_STEP:
        return _language_step(text, start, shown_end, positional, arguments, after, why, end)
    if positional:
        return LineProblem(
            f"The call {_excerpt(text[start:shown_end])} has an argument without a name; write "
            f'arguments as name=value, e.g. {name}(param="value").',
            shown_end,
        )
    return CallLine(name, arguments, after, why, end)


def render_call(call: ParsedToolCall, *, why: bool = True) -> str:
    """`call` as a line of the compact protocol, without its step number."""
    after = _after_text(call.depends_on)
    if call.instruction is not None:
        text = f"{after}{LANGUAGE_STEP}({_ENCODER.encode(call.instruction)})"
    elif isinstance(call.arguments, dict):
        params = ", ".join(
            f"{key}={_value_text(value)}"
            if key.isidentifier()
            else f"{json.dumps(key)}={_value_text(value)}"
            for key, value in call.arguments.items()
        )
        text = f"{after}{call.tool_name}({params})"
    else:  # an array of arguments, kept as the model wrote it (the executor refuses it)
        text = f"{after}{call.tool_name}({_value_text(call.arguments)})"
    if why and call.why:
        text += "  # " + call.why
    return text


def render_calls(calls: Sequence[ParsedToolCall]) -> str:
    """The calls as numbered lines of the compact protocol (the plan a PLAN observation shows)."""
    return "\n".join(f"{step}. {render_call(call)}" for step, call in enumerate(calls, start=1))


def _after_text(depends_on: Sequence[str]) -> str:
    if not depends_on:
        return ""
    steps = [
        call_id.removeprefix("call_") if call_id.startswith("call_") else call_id
        for call_id in depends_on
    ]
    return "after " + ", ".join(steps) + ": "


def _value_text(value: object) -> str:
    # What json.dumps(value, ensure_ascii=False) writes, without the encoder it builds for each
    # call (for that keyword), and for an int without the encoder at all: a run's synthesis
    # prompt renders every call.
    if value.__class__ is int:
        return int.__repr__(value)
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _ENCODER.encode(str(value))


def _arguments(text: str, position: int) -> tuple[list[Any], dict[str, Any], int]:
    """The positional and named arguments from `position` (just after `(`) to the closing `)`;
    and where the text goes on after it."""
    plain = _plain_arguments(text, position)
    if plain is not None:
        return [], plain[0], plain[1]
    return _any_arguments(text, position)


def _plain_arguments(text: str, position: int) -> tuple[dict[str, Any], int] | None:
    """What `_any_arguments` reads when every argument is named and plain (an integer, a string
    without escapes, a JSON or Python word), in a regular-expression match each at a third of
    its cost; None for anything else (that reading then words what is wrong)."""
    named: dict[str, Any] = {}
    if (empty := _NO_ARGUMENTS.match(text, position)) is not None:
        return named, empty.end()
    while (match := _PLAIN_ARGUMENT.match(text, position)) is not None:
        key, number, string, word, closed, trailing = match.group(1, 2, 3, 4, 5, 6)
        if key[0] == '"':
            key = key[1:-1]
        if key in named:
            return None
        named[key] = (
            int(number) if number is not None else string if string is not None else _WORDS[word]
        )
        position = match.end()
        if closed is not None or trailing is not None:
            return named, position
    return None


def _any_arguments(text: str, position: int) -> tuple[list[Any], dict[str, Any], int]:
    positional: list[Any] = []
    named: dict[str, Any] = {}
    position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
    if position >= len(text):
        raise _Incomplete
    if text[position] == ")":
        return positional, named, position + 1
    while True:
        key_match = _KEY.match(text, position)
        key: str | None = None
        if key_match is not None:
            raw = key_match.group(1)
            key = raw[1:-1] if raw.startswith('"') else raw
            position = key_match.end()
        elif named:
            raise _Unreadable(
                f"After {_excerpt(text[:position])} comes an argument without a name; every "
                "argument after a named one needs a name (name=value)."
            )
        value, position = _value(text, position)
        if key is None:
            positional.append(value)
        elif key in named:
            raise _Unreadable(f'The argument "{key}" is given twice; give it once.')
        else:
            named[key] = value
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        if position >= len(text):
            raise _Incomplete
        char = text[position]
        if char == ")":
            return positional, named, position + 1
        if char != ",":
            raise _Unreadable(
                f"Expected ',' or ')' after an argument, here: {_excerpt(text[position:])}; "
                'write arguments as name=value with JSON values, e.g. f(a="x", b=2).'
            )
        position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
        if position >= len(text):
            raise _Incomplete
        if text[position] == ")":  # a trailing comma
            return positional, named, position + 1


def _value(text: str, position: int) -> tuple[Any, int]:
    """The JSON value at `position` (Python's True/False/None too) and where it ends."""
    if position >= len(text):
        raise _Incomplete
    word = _PYTHON_WORDS.match(text, position)
    if word is not None:
        return _PYTHON_VALUES[word.group(1)], word.end()
    try:
        return _DECODER.raw_decode(text, position)
    except json.JSONDecodeError as error:
        if _unclosed(text, position):
            raise _Incomplete from None
        raise _Unreadable(
            f"An argument value is not JSON ({error.msg} here: "
            f"{_excerpt(text[position:])}); strings need double quotes."
        ) from None
    except RecursionError:
        raise _Unreadable("An argument value is nested too deeply.") from None


def _unclosed(text: str, position: int) -> bool:
    """Whether the value from `position` runs to the end of `text` unfinished (a string or
    brackets still open, or a word cut short), so that more text could complete it.

    Only its line is looked at: a value cut off by a line break is broken, not unfinished
    (which also keeps reading a text of many broken lines linear).
    """
    depth = 0
    in_string = False
    escaped = False
    end = text.find("\n", position)
    for char in text[position : len(text) if end < 0 else end]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth < 0:
                return False
        elif depth == 0 and char in ",)":
            return False
    return end < 0


def _tail(text: str, position: int, *, final: bool) -> tuple[str | None, int]:
    """What may follow the closing `)`: a `# why`, then the line's end. Returns the reason and
    where the line ends, or -1 when the stream has not reached the line's end yet."""
    if not final and text.find("\n", position) < 0 and _OPEN_TAIL.match(text, position):
        return None, -1  # the call is complete; its reason, if any, is still being written
    why: str | None = None
    match = _WHY.match(text, position)
    if match is not None:
        why = match.group(1).strip() or None
        position = match.end()
    end = _LINE_END.match(text, position)
    if end is None:
        if not final and text.find("\n", position) < 0:
            raise _Incomplete  # more of the line is on its way; its end will tell
        raise _Unreadable(
            f"Unexpected text after the call: {_excerpt(text[position:])}; end the line after "
            "')' (optionally with '# why')."
        )
    return why, end.end()


def _language_step(
    text: str,
    start: int,
    shown_end: int,
    positional: list[Any],
    named: dict[str, Any],
    after: tuple[int, ...],
    why: str | None,
    end: int,
) -> CallLine | LineProblem:
    values = [*positional, *(named[key] for key in named if key == "instruction")]
    extra = [key for key in named if key != "instruction"]
    if len(values) != 1 or extra or not isinstance(values[0], str) or not values[0].strip():
        return LineProblem(
            f"The language step {_excerpt(text[start:shown_end])} needs exactly one instruction "
            f'text: {LANGUAGE_STEP}("Summarise {{step_1_result}} in one sentence.").',
            shown_end,
        )
    return CallLine(LANGUAGE_STEP, {}, after, why, end, instruction=values[0].strip())


def _excerpt(text: str, limit: int = 80) -> str:
    line = text.strip().split("\n", 1)[0]
    return repr(line if len(line) <= limit else line[:limit] + "…")
