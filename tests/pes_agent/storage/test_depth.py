"""Deeply nested data: stored at most MAX_DEPTH levels deep, read back whole, in a real run."""

from __future__ import annotations

import json
import re
from datetime import datetime
from itertools import accumulate
from typing import Any

import pytest
from pydantic_core import from_json

from pes_agent import AgentProps, Approve, ObservationType, create_agent, tool
from pes_agent.observing.types import Observation
from pes_agent.storage._codec import _SURELY_SHALLOW, _fallback, dump_observation
from pes_agent.storage._depth import MAX_DEPTH, READ_LIMIT, dump_bounded
from pes_agent.testing import ScriptedProvider
from pes_agent.tools.base import ToolResult

from .conftest import StorageFactory
from .test_storage_contract import levels_of, nested

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply the JSON `text` nests arrays and objects (0 for a scalar)."""
    brackets = [c for c in _STRING.sub("", text) if c in _STEP]
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def plan(*calls: tuple[str, str, dict[str, Any]]) -> str:
    tool_calls = [{"callId": c, "toolName": t, "arguments": a} for c, t, a in calls]
    return json.dumps({"intent": "i", "plan": "p", "toolCalls": tool_calls})


async def test_a_run_pausing_after_a_deeply_nested_output_resumes_with_all_of_it(
    open_backend: StorageFactory,
) -> None:
    """A tool output 250 levels deep in a run that pauses for approval: the run is listed,
    resumes in a new agent whose next step gets the whole output, and the observations read
    back; a second such run is cancelled."""

    @tool
    async def dig() -> dict[str, Any]:
        """Return data nested 250 levels deep."""
        return nested(250)

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @tool
    async def measure(data: Any) -> int:
        """How deep the data goes."""
        return levels_of(data)

    tools = [dig, pay, measure]
    steps = plan(
        ("c1", "dig", {}),
        ("c2", "pay", {"amount": 5}),
        ("c3", "measure", {"data": "{step_1_result}"}),
    )
    replies = ScriptedProvider([steps, steps, "Measured."])
    async with create_agent(provider=replies, tools=tools, storage=open_backend()) as first:
        paused = await first.process(AgentProps("dig", "t"))
        other = await first.process(AgentProps("dig", "u"))
        assert paused.metadata.status == other.metadata.status == "awaiting_approval"

    async with create_agent(
        provider=ScriptedProvider(["Measured."]), tools=tools, storage=open_backend()
    ) as second:
        listed = await second.pending_runs()
        assert sorted(run.thread_id for run in listed) == ["t", "u"]
        assert [levels_of(run.results[1].output) for run in listed] == [250, 250]
        done = await second.resume("t", paused.metadata.trace_id, {"c2": Approve()})
        assert done.metadata.status == "success"
        [cancelled] = await second.cancel_pending("u")
        assert cancelled.trace_id == other.metadata.trace_id

        executions = await second.observations.get_observations(
            "t", types=[ObservationType.TOOL_EXECUTION]
        )
        outputs = {e.content["callId"]: e.content["output"] for e in executions}
        assert levels_of(outputs["c1"]) == 250
        assert outputs["c3"] == 250
        assert await second.pending_runs() == []


def test_pydantic_reads_json_read_limit_levels_deep_and_no_deeper() -> None:
    """READ_LIMIT is still pydantic's: the bound and its quick check rely on it."""
    from_json(json.dumps(nested(READ_LIMIT)))
    with pytest.raises(ValueError, match="recursion limit"):
        from_json(json.dumps(nested(READ_LIMIT + 1)))


def test_json_depth_counts_only_brackets_outside_strings() -> None:
    """The tests' measure: brackets and escaped quotes inside strings are not nesting."""
    assert json_depth('"x"') == 0
    assert json_depth("[]") == 1
    assert json_depth('{"a": [1, {"b": "[[[{"}], "c": "\\\\\\"]]]"}') == 3
    assert json_depth(json.dumps(nested(7))) == 7


@pytest.mark.parametrize("levels", [MAX_DEPTH - 3, MAX_DEPTH - 2])
def test_a_record_within_the_limit_is_written_as_it_is(levels: int) -> None:
    """Up to MAX_DEPTH levels (the result's own object and a list take two) nothing changes."""
    result = ToolResult(call_id="c", tool_name="t", status="success", output=[nested(levels)])
    text, flattened = dump_bounded(result)
    assert not flattened
    assert text == result.model_dump_json()
    assert json_depth(text) == levels + 2


def test_a_record_past_the_limit_keeps_every_level_and_reads_back() -> None:
    """One level more and the deepest object is its JSON text: MAX_DEPTH levels, none lost."""
    output = [nested(MAX_DEPTH - 1)]
    result = ToolResult(call_id="c", tool_name="t", status="success", output=output)
    text, flattened = dump_bounded(result)
    assert flattened
    assert json_depth(text) == MAX_DEPTH
    back = ToolResult.model_validate_json(text)
    assert levels_of(back.output[0]) == MAX_DEPTH - 1


def _nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def _shortest_nested(levels: int) -> Any:
    value: Any = 0  # an empty list at the bottom is no level to pydantic's reader
    for _ in range(levels):
        value = [value]
    return value


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "content",
    [
        {"x": 1},
        {"deep": _nested(150)},
        {"deeper": _nested(300)},
        {"loop": _cycle()},
        {"odd": ValueError("not JSON")},
    ],
    ids=["shallow", "deep", "past-pydantic", "cycle", "not-json"],
)
def test_an_observation_is_dumped_as_dump_bounded_dumps_it(content: dict[str, Any]) -> None:
    """dump_observation's shortcut writes what dump_bounded writes."""
    observation = Observation(
        thread_id="t", trace_id="r", type=ObservationType.TOOL_EXECUTION, title="x", content=content
    )
    assert dump_observation(observation) == dump_bounded(observation, fallback=_fallback)[0]


def test_the_shortest_observation_too_deep_to_store_is_still_bounded() -> None:
    """dump_observation skips counting brackets in a text too short to nest MAX_DEPTH levels:
    the shortest observation that does nest deeper is not short enough to be skipped."""
    observation = Observation(
        id="",
        thread_id="",
        trace_id="",
        timestamp=datetime(2000, 1, 1),
        type=ObservationType.PLAN,
        title="",
        content={"": _shortest_nested(MAX_DEPTH - 1)},
        metadata={},
        parent_id="",
    )
    unbounded = observation.model_dump_json()
    assert json_depth(unbounded) == MAX_DEPTH + 1
    # Within a few characters of the bound: a bound any looser would skip this one.
    assert len(unbounded) < _SURELY_SHALLOW + 5
    text = dump_observation(observation)
    assert json_depth(text) == MAX_DEPTH
    assert text == dump_bounded(observation, fallback=_fallback)[0]
