"""Reading model text: thinking blocks cut out, JSON values found by bracket matching.

The planning parser (`pes_agent.planning.parser`) reads plans with these, and so do the ECS
systems that read JSON from a model's answer (`ReplanningSystem`'s steps, the tree search's
scores), so every reader in the package tolerates the same things:

- `split_thoughts(text, plan_aware=...)` cuts `<think>…</think>` and `<thinking>…</thinking>`
  blocks out of the text and returns them apart (see its docstring for unclosed and stray
  tags; `plan_aware` is for planning output, where `SECTION_LABEL` and a line opening with `{`
  or a code fence start the plan).
- `scan_json(text)` matches brackets in one linear pass that knows JSON strings and escapes,
  so prose, code fences and nested arrays around or inside the JSON do not matter;
  `find_json(text, scan, preferred)` decodes the first outermost value `preferred` accepts.
- `loads_json` / `decode_json` decode with trailing commas outside strings and raw line
  breaks inside strings tolerated; what cannot be read raises `JSONProblem`, whose message
  says where, worded for the model (it is sent back in repair round-trips).

```python
from pes_agent.planning.model_text import find_json, scan_json, split_thoughts

_, body = split_thoughts(reply, plan_aware=False)
found = find_json(body, scan_json(body), lambda value: isinstance(value, list))
steps = found.value if found is not None else None
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "SECTION_LABEL",
    "Decoded",
    "JSONProblem",
    "JSONRegion",
    "JSONScan",
    "decode_json",
    "find_json",
    "loads_json",
    "scan_json",
    "split_thoughts",
]

_THINK_TAG: Final = re.compile(r"<(/?)(?:think|thinking)[ \t]*>", re.IGNORECASE)
# Every quantifier is over a distinct character class, so matching is linear.
#: A section label of ART's plan format at the start of a line: "Intent:", "**Plan:**",
#: "## Tool Calls:", "tool_calls:" (group 1 is the label's name).
SECTION_LABEL: Final = re.compile(
    r"^[ \t]*(?:[#*]+[ \t]*)?(title|intent|plan|tool[ \t_-]?calls?)[ \t]*(?:\*\*)?:(?:\*\*)?",
    re.IGNORECASE | re.MULTILINE,
)
# A line where a plan begins, used to end a <think> block that was never closed.
_PLAN_LINE: Final = re.compile(r"^[ \t]*(?:\{|```)", re.MULTILINE)
# The characters that matter to bracket matching; everything else is skipped by the regex engine.
_STRUCTURAL: Final = re.compile(r'[\[\]{}"\\]')
_COMMA_OR_STRING: Final = re.compile(r'[",\\]')
_SPACE_THEN_CLOSER: Final = re.compile(r"[ \t\r\n]*[\]}]")
_CLOSERS: Final = {"[": "]", "{": "}"}


# --------------------------------------------------------------------------------------------
# Thinking blocks
# --------------------------------------------------------------------------------------------


def split_thoughts(text: str, *, plan_aware: bool) -> tuple[list[str], str]:
    """Cut `<think>` blocks out of `text`; return (thoughts, the rest).

    `plan_aware` ends a never-closed block where a plan begins and keeps a stray leading
    `</think>` from swallowing section labels; for a final answer the usual convention holds
    (an unclosed block runs to the end).
    """
    if "<" not in text:
        # No tag can be there: most answers (a plan's call lines, a synthesis) skip the scan.
        return [], text
    thoughts: list[str] = []
    kept: list[str] = []
    position = 0
    opened_at: int | None = None
    for tag in _THINK_TAG.finditer(text):
        closing = tag.group(1) == "/"
        if opened_at is not None:
            if closing:
                thoughts.append(text[opened_at : tag.start()])
                position = tag.end()
                opened_at = None
            continue  # an opening tag inside a thought is part of the thought
        if not closing:
            kept.append(text[position : tag.start()])
            opened_at = tag.end()
        elif position == 0 and not (plan_aware and SECTION_LABEL.search(text, 0, tag.start())):
            thoughts.append(text[: tag.start()])  # the opening tag was in the prompt
            position = tag.end()
        else:
            kept.append(text[position : tag.start()])  # a stray closing tag: drop only the tag
            position = tag.end()
    if opened_at is not None:
        end = len(text)
        if plan_aware:
            starts = [
                match.start()
                for match in (
                    SECTION_LABEL.search(text, opened_at),
                    _PLAN_LINE.search(text, opened_at),
                )
                if match is not None
            ]
            end = min(starts, default=end)
        thoughts.append(text[opened_at:end])
        position = end
    kept.append(text[position:])
    return [thought.strip() for thought in thoughts if thought.strip()], "".join(kept)


# --------------------------------------------------------------------------------------------
# Finding JSON in text
# --------------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class JSONRegion:
    """A bracketed region `text[start:end]`; `closed` is False when its brackets never matched."""

    start: int
    end: int
    closed: bool


@dataclass(slots=True)
class JSONScan:
    """The bracketed regions of a text, from `scan_json`."""

    top: list[JSONRegion]  # outermost regions, in text order
    stranded: list[JSONRegion]  # outermost matched regions inside a region that never closed


@dataclass(slots=True, frozen=True)
class Decoded:
    """A JSON value decoded from the region starting at `start`."""

    start: int
    value: object


class JSONProblem(Exception):
    """Why a piece of text is not JSON, worded for the model."""


def scan_json(text: str) -> JSONScan:
    """Match brackets in one pass, knowing JSON strings and escapes.

    Outside any bracket the text is prose, so quotes there do not start strings. A closing
    bracket of the wrong kind abandons the region it was in and the scan carries on after it,
    which keeps the pass linear however broken the text is.
    """
    pairs: list[tuple[int, int, int]] = []  # (start, end, depth)
    broken: list[JSONRegion] = []
    stack: list[tuple[str, int]] = []
    in_string = False
    escaped_at = -1
    for match in _STRUCTURAL.finditer(text):
        index = match.start()
        if index == escaped_at:
            continue
        char = text[index]
        if in_string:
            if char == "\\":
                escaped_at = index + 1
            elif char == '"':
                in_string = False
        elif char in _CLOSERS:
            stack.append((char, index))
        elif not stack:
            continue  # quotes, backslashes and stray closers in prose
        elif char == '"':
            in_string = True
        elif char in "]}":
            if _CLOSERS[stack[-1][0]] == char:
                start = stack.pop()[1]
                pairs.append((start, index + 1, len(stack)))
            else:
                broken.append(JSONRegion(stack[0][1], index + 1, closed=False))
                stack.clear()
    if stack:
        broken.append(JSONRegion(stack[0][1], len(text), closed=False))

    top = [JSONRegion(start, end, closed=True) for start, end, depth in pairs if depth == 0]
    top.extend(broken)
    top.sort(key=lambda item: item.start)
    stranded: list[JSONRegion] = []
    reach = -1
    for start, end, depth in sorted(pairs, key=lambda pair: (pair[0], -pair[1])):
        if start >= reach:
            reach = end
            if depth > 0:
                stranded.append(JSONRegion(start, end, closed=True))
    return JSONScan(top, stranded)


def find_json(
    text: str, scan: JSONScan, preferred: Callable[[object], bool], *, objects_only: bool = False
) -> Decoded | None:
    """The first outermost JSON value `preferred` accepts, else one inside broken brackets."""
    for group in (scan.top, scan.stranded):
        for item in group:
            if not item.closed or (objects_only and text[item.start] != "{"):
                continue
            try:
                value = loads_json(text[item.start : item.end])
            except JSONProblem:
                continue
            if preferred(value):
                return Decoded(item.start, value)
    return None


def decode_json(snippet: str, *, whole: bool) -> object:
    """Decode `snippet`; with `whole=False`, decode what can be read from its start."""
    if whole:
        return loads_json(snippet)
    try:
        return json.JSONDecoder(strict=False).raw_decode(_blank_trailing_commas(snippet))[0]
    except (ValueError, RecursionError) as error:
        raise JSONProblem(_describe(error, snippet)) from None


def loads_json(snippet: str) -> object:
    """Decode `snippet` as one JSON value, tolerating trailing commas; raises `JSONProblem`."""
    try:
        return json.loads(snippet, strict=False)
    except (ValueError, RecursionError) as first:
        if "," not in snippet or not isinstance(first, json.JSONDecodeError):
            raise JSONProblem(_describe(first, snippet)) from None
    try:
        return json.loads(_blank_trailing_commas(snippet), strict=False)
    except (ValueError, RecursionError) as error:
        # Commas were blanked, not deleted, so the error's position holds in `snippet` too.
        raise JSONProblem(_describe(error, snippet)) from None


def _describe(error: BaseException, snippet: str) -> str:
    if isinstance(error, json.JSONDecodeError):
        before = snippet[max(0, error.pos - 30) : error.pos]
        after = snippet[error.pos : error.pos + 30]
        return (
            f"{error.msg.removesuffix(' at')} at line {error.lineno} column {error.colno}, "
            f"here: {before + '⟨here⟩' + after!r}"
        )
    if isinstance(error, RecursionError):
        return "it is nested too deeply"
    if "digits" in str(error):
        return "it contains a number too long to read"
    return str(error)


def _blank_trailing_commas(snippet: str) -> str:
    """Replace each comma that directly precedes `]` or `}` (outside strings) with a space.

    Blanking instead of deleting keeps the positions in a later error message true.
    """
    commas: list[int] = []
    in_string = False
    escaped_at = -1
    for match in _COMMA_OR_STRING.finditer(snippet):
        index = match.start()
        if index == escaped_at:
            continue
        char = snippet[index]
        if char == "\\":
            if in_string:
                escaped_at = index + 1
        elif char == '"':
            in_string = not in_string
        elif not in_string and _SPACE_THEN_CLOSER.match(snippet, index + 1):
            commas.append(index)
    if not commas:
        return snippet
    chars = list(snippet)
    for index in commas:
        chars[index] = " "
    return "".join(chars)
