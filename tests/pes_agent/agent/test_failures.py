"""Runtime failures end as `error` results with observations; usage mistakes raise at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    ObservationType,
    UsageError,
    create_agent,
)
from pes_agent.testing import ScriptedProvider

from ...helpers import AgentBuilder
from .conftest import Recorder, call, plan_json


async def test_unusable_plan_gets_one_repair_round_trip_quoting_the_error(
    build_agent: AgentBuilder,
    tools: list[Any],
) -> None:
    """Broken planning JSON is sent back once with the parser's error, and the fix is used."""
    broken = 'Intent: add\nPlan: 1. add\nTool Calls: [{"callId": "c1", "toolName": "add",,]'
    model = ScriptedProvider([broken, plan_json(call(1, "add", a=1, b=2)), "3"])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("1+2", "t"))
    assert result.metadata.status == "success"
    assert result.metadata.llm_calls == 3
    repair = model.requests[1]
    assert repair.phase == "repair"
    assert repair.messages[-2].role == "assistant"
    assert repair.messages[-2].content == broken
    assert "could not be used" in repair.messages[-1].content
    assert "Tool Calls" in repair.messages[-1].content


async def test_plan_referring_to_a_later_step_is_repaired(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A placeholder pointing at a later step is a plan error that triggers the repair call."""
    bad = plan_json(call(1, "add", a="{step_2_result}", b=1), call(2, "add", a=1, b=1))
    model = ScriptedProvider([bad, plan_json(call(1, "add", a=1, b=1)), "2"])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "success"
    assert "step_2" in model.requests[1].messages[-1].content or "step 2" in (
        model.requests[1].messages[-1].content
    )


async def test_plan_still_unusable_after_repair_ends_in_error_keeping_the_raw_output(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """Two unusable plans end the run with status error, the raw output in the ERROR record."""
    model = ScriptedProvider(["no json here at all", "still {not json"])
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder, types=[ObservationType.ERROR])
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert "planning failed" in result.metadata.error
    assert result.response.content.startswith("I could not complete this request")
    (error,) = recorder.seen
    assert error.content["phase"] == "planning"
    assert error.content["raw"] == "still {not json"
    assert await agent.conversation.get_messages("t") == []


async def test_script_running_out_is_reported_as_an_error_status(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A scripted model with no response left makes the run end with a clear error."""
    model = ScriptedProvider([plan_json()])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert "synthesis failed" in result.metadata.error
    assert "ran out of responses" in result.metadata.error
    assert await agent.conversation.get_messages("t") == []


async def test_failed_model_call_records_a_stream_error(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A provider failure mid-call is recorded as LLM_STREAM_ERROR and then ERROR."""
    model = ScriptedProvider([])
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder)
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    types = recorder.types()
    assert types.index(ObservationType.LLM_STREAM_ERROR) < types.index(ObservationType.ERROR)
    assert ObservationType.FINAL_RESPONSE not in types


async def test_process_rejects_anything_but_agent_props(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """Passing a bare string to process() raises a UsageError showing the right call."""
    agent = build_agent(provider=ScriptedProvider([]), tools=tools)
    with pytest.raises(UsageError, match=r"AgentProps\("):
        await agent.process("hello")  # type: ignore[arg-type]


def test_agent_props_needs_a_thread_id() -> None:
    """An empty thread id is refused when the props are built."""
    with pytest.raises(ValueError, match="thread_id"):
        AgentProps("hi", "  ")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state_saving": "sometimes"}, "state_saving"),
        ({"history_limit": -1}, "history_limit"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"tool_timeout_s": 0}, "tool_timeout_s"),
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"planner": object()}, "Planner protocol"),
        ({"executor": object()}, "Executor protocol"),
        ({"synthesizer": object()}, "Synthesizer protocol"),
        ({"tools": "add"}, "list of tools"),
        ({"storage": "redis://x"}, "storage"),
    ],
)
def test_create_agent_rejects_bad_arguments_with_the_fix(
    kwargs: dict[str, Any], message: str
) -> None:
    """Each invalid create_agent argument raises a UsageError naming the argument."""
    with pytest.raises(UsageError, match=message):
        create_agent(provider=ScriptedProvider([]), **kwargs)


def test_create_agent_rejects_an_object_that_is_not_a_provider() -> None:
    """A provider that is neither a spec, a config nor a provider object is refused."""
    with pytest.raises(UsageError, match="provider must be"):
        create_agent(provider=42)  # type: ignore[arg-type]


def test_duplicate_tool_names_are_refused(tools: list[Any]) -> None:
    """Registering two tools with one name raises a UsageError naming the tool."""
    with pytest.raises(UsageError, match="add"):
        create_agent(provider=ScriptedProvider([]), tools=[tools[0], tools[0]])


async def test_closed_agent_refuses_to_process(tools: list[Any]) -> None:
    """After aclose(), process() raises a UsageError saying to create a new agent."""
    agent = create_agent(provider=ScriptedProvider([]), tools=tools)
    await agent.aclose()
    with pytest.raises(UsageError, match="closed"):
        await agent.process(AgentProps("q", "t"))


async def test_unreachable_storage_gives_an_error_result_not_an_exception(
    tools: list[Any], tmp_path: Any
) -> None:
    """A store that cannot take the thread lock makes the run end with status error."""
    db = tmp_path / "agent.db"
    (tmp_path / "agent.db-locks").write_text("not a folder")  # where the lock files go
    agent = create_agent(
        provider=ScriptedProvider([plan_json(), "ok"]), tools=tools, storage=f"sqlite:///{db}"
    )
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert result.metadata.error.startswith("loading the thread failed")
    await agent.aclose()


@pytest.mark.parametrize(
    ("field", "value"),
    [("tool_timeout_s", 0), ("tool_timeout_s", -1), ("max_tool_calls", 0), ("history_limit", -1)],
)
def test_run_options_reject_values_create_agent_would_reject(field: str, value: float) -> None:
    """RunOptions refuses a non-positive timeout or call cap and a negative history limit."""
    from pydantic import ValidationError

    from pes_agent import RunOptions

    with pytest.raises(ValidationError, match=field):
        RunOptions(**{field: value})


class _TooFewResults:
    async def execute(self, calls: Any, ctx: Any) -> list[Any]:
        return []


class _DictResults:
    async def execute(self, calls: Any, ctx: Any) -> list[Any]:
        return [{"call_id": call.call_id, "status": "success"} for call in calls]


@pytest.mark.parametrize(
    "executor", [_TooFewResults(), _DictResults()], ids=["too-few-results", "dicts-not-results"]
)
async def test_executor_returning_anything_but_one_tool_result_per_call_is_an_error(
    build_agent: AgentBuilder, tools: list[Any], executor: Any
) -> None:
    """An executor that drops results, or returns one dict per call instead of ToolResults,
    fails the run with a message saying what it must return."""
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "3"])
    agent = build_agent(provider=model, tools=tools, executor=executor)
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert "must return one ToolResult per call" in result.metadata.error


def test_a_provider_object_without_name_and_model_is_refused() -> None:
    """An object with stream() and aclose() but no name/model is not a provider."""

    class Half:
        async def stream(self, request: Any) -> Any:
            yield request

        async def aclose(self) -> None:
            return None

    with pytest.raises(UsageError, match="name, model"):
        create_agent(provider=Half())  # type: ignore[arg-type]


async def test_a_nested_run_on_the_same_thread_fails_at_once(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A tool calling process() for its own thread gets a UsageError, not a deadlock."""
    from pes_agent import tool

    agent_ref: list[Any] = []

    @tool
    async def recurse() -> str:
        """Ask the agent again, on the same thread."""
        await agent_ref[0].process(AgentProps("inner", "t"))
        return "unreachable"

    model = ScriptedProvider([plan_json(call(1, "recurse")), "done"])
    agent = build_agent(provider=model, tools=[recurse])
    agent_ref.append(agent)
    result = await agent.process(AgentProps("outer", "t"))
    assert result.metadata.status == "partial"
    synthesis = next(r for r in model.requests if r.phase == "synthesis").messages[-1].content
    assert "from inside a run on that same thread" in synthesis


async def test_observation_types_may_be_given_in_lower_case(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """subscribe(types=["tool_execution"]) works like ObservationType.TOOL_EXECUTION."""
    seen: list[Any] = []
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "3"])
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(seen.append, types=["tool_execution"])
    await agent.process(AgentProps("q", "t"))
    assert [o.type for o in seen] == [ObservationType.TOOL_EXECUTION]


async def test_a_task_started_during_a_run_may_use_the_thread_after_it(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A follow-up started by a subscriber runs on the same thread once the first run is done."""
    model = ScriptedProvider([plan_json(), "first", plan_json(), "second"])
    agent = build_agent(provider=model, tools=tools)
    follow_ups: list[Any] = []

    def on_final(observation: Any) -> None:
        if not follow_ups:
            follow_ups.append(asyncio.create_task(agent.process(AgentProps("again", "t"))))

    agent.observations.subscribe(on_final, types=[ObservationType.FINAL_RESPONSE])
    await agent.process(AgentProps("q", "t"))
    second = await follow_ups[0]
    assert second.response.content == "second"
