"""Reading a plan while it streams, to start each call the moment it is written.

`PlanStreamReader` is the `StreamListener` of a planning call: it is handed the answer's text
piece by piece and submits each call as soon as the call is complete — in the compact protocol
at the call's closing `)` (nothing later on its line can change it; its `# why` reaches the
final plan through `read`), in a JSON plan (the text protocol's JSON, or a structured
`response_format` answer) when the call's object closes inside `"calls"` / `"toolCalls"`.

It reads calls exactly as `OutputParser` reads them (`read_call_line`,
`tool_call_from_json`), so the calls it submits are the first calls of the plan the parser
returns at the end; and it is cautious: at the first thing it cannot read — an answer in
another form (ART's sections, prose before the JSON), a call with a mistake, a repeated call
id — it submits nothing more and leaves the plan to the parser. Whatever it submitted, the
final plan is the authority (`pes_agent.pes.dispatch`).

When the provider restarts the stream (`on_restart`), the reader reads the new answer from the
start and submits only the calls past those it submitted already; a call that differs from
the one submitted at its place stops it (the final plan will not start with them, and they
are discarded).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Literal

from pes_agent.observing.logs import get_logger
from pes_agent.planning.call_lines import CALL_LINE_START, CallLine, read_call_line
from pes_agent.planning.model_text import JSONProblem, loads_json
from pes_agent.planning.parser import tool_call_from_json
from pes_agent.planning.plan import ParsedToolCall, same_call

__all__ = ["PlanStreamReader"]

_Mode = Literal["start", "lines", "json", "done"]

_log = get_logger("pes_agent.planning")

_THINK_OPEN: Final = re.compile(r"<(think|thinking)[ \t]*>", re.IGNORECASE)
_LABEL: Final = re.compile(
    r"[ \t]*(?:[#*]+[ \t]*)?(?:title|intent|plan|tool[ \t_-]?calls?)[ \t]*(?:\*\*)?:",
    re.IGNORECASE,
)
_FENCE: Final = re.compile(r"[ \t]*```")
# The longest first line the reader waits on before deciding the answer is not one it streams.
_UNDECIDED_CHARS: Final = 400
_CALL_KEYS: Final = frozenset({"calls", "toolcalls"})


class PlanStreamReader:
    """Submits the calls of a planning answer as they stream (see the module docstring)."""

    __slots__ = (
        "_count",
        "_cursor",
        "_depth",
        "_early",
        "_element",
        "_escaped",
        "_ids",
        "_in_calls",
        "_in_string",
        "_key",
        "_mode",
        "_scanned",
        "_string",
        "_submit",
        "_text",
        "read",
        "stopped",
        "submitted",
    )

    def __init__(self, submit: Callable[[ParsedToolCall], None]) -> None:
        self._submit = submit
        #: The calls submitted, in plan order (kept across restarts). A tuple grown by copy
        #: (a plan has a handful of calls): an empty one is shared, where an empty list would
        #: be one more object per run for the collector while the model is still to answer.
        self.submitted: tuple[ParsedToolCall, ...] = ()
        #: Set at the first thing the reader cannot read: nothing more is submitted.
        self.stopped = False
        #: The calls read from lines, by (line, step), for the parser not to read them again.
        self.read: dict[tuple[str, int], ParsedToolCall] = {}
        self._start_over()

    def on_text(self, text: str) -> None:
        """Read the next piece of the answer; submit the calls it completes."""
        if self.stopped or self._mode == "done":
            return
        self._text += text
        try:
            if self._mode == "start":
                self._decide()
            if self._mode == "lines":
                self._read_lines()
            elif self._mode == "json":
                self._read_json()
        except Exception:
            # Reading early is an optimisation: a bug in it must not fail the model call.
            # Nothing more is submitted; the parser reads the answer at the end.
            _log.exception("plan_stream_reader_failed")
            self.stopped = True

    def on_tool_input(self, call_id: str, name: str, text: str) -> None:
        """Native tool calls are not read here (`PlanChannel` hands a `submit_plan` call's
        arguments to `on_text`: they are the plan)."""

    def on_restart(self) -> None:
        """The answer starts over: read it from the start (what was submitted stays)."""
        self.read.clear()
        self._start_over()

    def _start_over(self) -> None:
        self._text = ""
        self._cursor = 0
        # The call submitted from the line being read, at its `)`, before the line ended; and
        # how far that line was looked at for a `)`.
        self._early: ParsedToolCall | None = None
        self._scanned = 0
        self._mode: _Mode = "start"
        self._count = 0  # calls read from this answer
        self._ids: set[str] | None = None  # made at the first call (none while it waits)
        # JSON: nesting depth, string state, the last key at depth 1, the calls array.
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._string = -1  # where the string being read started
        self._key = ""
        self._in_calls = False
        self._element = -1  # where the call object being read started

    # -- deciding the answer's form ------------------------------------------------------------

    def _decide(self) -> None:
        """Skip thinking and fences, then tell a JSON plan from call lines from anything else."""
        text = self._text
        while self._mode == "start":
            position = self._cursor
            while position < len(text) and text[position] in " \t\r\n":
                position += 1
            if position >= len(text):
                return
            rest = text[position:]
            # Each pattern is tried only where its first character is (most answers open
            # with a call or a brace).
            think = _THINK_OPEN.match(rest) if rest[0] == "<" else None
            if think is not None:
                close = re.search(rf"</{think.group(1)}[ \t]*>", rest, re.IGNORECASE)
                if close is None:
                    return  # wait for the thought to end
                self._cursor = position + close.end()
                continue
            line_end = text.find("\n", position)
            if rest[0] == "`" and _FENCE.match(rest):
                if line_end < 0:
                    return
                self._cursor = line_end + 1
                continue
            if rest.startswith("{"):
                self._mode = "json"
                self._cursor = position
                return
            if CALL_LINE_START.match(text, position) is not None:
                self._mode = "lines"
                self._cursor = position
                return
            if line_end >= 0 or len(rest) > _UNDECIDED_CHARS or "(" in rest:
                self._mode = "done"  # sections, prose: the parser reads it at the end
            return

    # -- the compact protocol: a call per line ---------------------------------------------------

    def _read_lines(self) -> None:
        text = self._text
        while not self.stopped and self._mode == "lines":
            line_end = text.find("\n", self._cursor)
            if line_end < 0:
                self._read_open_line(text)
                return
            line = text[self._cursor : line_end]
            self._cursor = line_end + 1
            early, self._early = self._early, None
            # A call first: no label line starts like a call (a label's word is followed by
            # `:`, a call's name by `(`), so a call line is matched once.
            found = read_call_line(line)
            if found is None:
                if _LABEL.match(line):
                    self._mode = "done"  # the intent: the calls are over
                continue  # not a call (read_call_line looks for CALL_LINE_START first)
            if not isinstance(found, CallLine):
                self.stopped = True  # the parser reports it; the plan will be repaired
                continue
            step = self._count if early is not None else self._count + 1
            try:
                call = found.call(step)
            except ValueError:
                self.stopped = True  # the call's shape: the parser reports it
                continue
            self.read[line, step] = call
            if early is None:
                self._emit(call)
            elif not same_call(call, early):
                self.stopped = True  # cannot happen while read_call_line keeps its word

    def _read_open_line(self, text: str) -> None:
        """Submit the call of the line still streaming once its `)` is in."""
        if self._early is not None:
            return  # submitted already; the line's end completes its reading
        scan_from = max(self._scanned, self._cursor)
        self._scanned = len(text)
        if text.find(")", scan_from) < 0:
            return  # no call closes in what arrived
        found = read_call_line(text, self._cursor, final=False)
        if not isinstance(found, CallLine):
            return  # not complete (or a mistake): the line's end decides
        try:
            call = found.call(self._count + 1)
        except ValueError:
            return
        self._early = call
        self._emit(call)

    # -- a JSON plan: each object of its "calls" array ---------------------------------------------

    def _read_json(self) -> None:
        text = self._text
        index = self._cursor
        end = len(text)
        while index < end and not self.stopped and self._mode == "json":
            char = text[index]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                    if self._depth == 1:
                        self._key = text[self._string + 1 : index]
            elif char == '"':
                self._in_string = True
                self._string = index
            elif char in "[{":
                if char == "[" and self._depth == 1 and _normalised(self._key) in _CALL_KEYS:
                    self._in_calls = True
                elif char == "{" and self._in_calls and self._depth == 2:
                    self._element = index
                elif self._in_calls and self._depth == 2:
                    self.stopped = True  # a call that is not an object: left to the parser
                self._depth += 1
            elif char in "]}":
                self._depth -= 1
                if self._in_calls and self._depth == 2 and char == "}" and self._element >= 0:
                    self._call_object(text[self._element : index + 1])
                    self._element = -1
                elif self._in_calls and self._depth == 1:
                    self._mode = "done"  # the calls array is closed
                elif self._depth <= 0:
                    self._mode = "done"
            elif char == "," and self._depth == 1:
                self._key = ""
            index += 1
        self._cursor = index

    def _call_object(self, text: str) -> None:
        try:
            entry = loads_json(text)
        except JSONProblem:
            self.stopped = True
            return
        call = tool_call_from_json(entry, self._count + 1)
        if isinstance(call, str):
            self.stopped = True
            return
        self._emit(call)

    def _emit(self, call: ParsedToolCall) -> None:
        """Submit `call` (this answer's next), unless it was submitted before a restart."""
        ids = self._ids
        if ids is None:
            self._ids = {call.call_id}
        elif call.call_id in ids:
            self.stopped = True  # a repeated call id: the plan is unusable
            return
        else:
            ids.add(call.call_id)
        index = self._count
        self._count += 1
        if index < len(self.submitted):
            if not same_call(self.submitted[index], call):
                self.stopped = True  # the restarted answer differs from what runs
            return
        self.submitted = (*self.submitted, call)
        self._submit(call)


def _normalised(key: str) -> str:
    return "".join(char for char in key.lower() if char.isalnum())
