"""The PES pipeline end to end through `create_agent` and `process` on a scripted model."""

from __future__ import annotations

from typing import Any

from pes_agent import (
    AgentProps,
    AgentState,
    LLMParams,
    MessageRole,
    ObservationType,
    RunOptions,
    ThreadConfig,
    ToolContext,
    create_agent,
    tool,
)
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptedResponse

from ...helpers import AgentBuilder
from .conftest import Events, Recorder, call, plan_json


def _synthesis_prompt(model: ScriptedProvider) -> str:
    request = next(r for r in model.requests if r.phase == "synthesis")
    return request.messages[-1].content


async def test_successful_run_plans_executes_and_synthesizes(tools: list[Any]) -> None:
    """A run with three calls returns the synthesized answer, success and full accounting."""
    model = ScriptedProvider(
        [
            plan_json(
                call(1, "add", a=2, b=3),
                call(2, "add", a=10, b=20),
                call(3, "add", a="{step_1_result}", b="<step_2_result>"),
            ),
            "The total is 35.",
        ]
    )
    agent = create_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("Add things up", "t1"))

    assert result.response.content == "The total is 35."
    assert result.response.role is MessageRole.AI
    meta = result.metadata
    assert (meta.status, meta.llm_calls, meta.tool_calls, meta.error) == ("success", 2, 3, None)
    assert meta.thread_id == "t1"
    assert meta.trace_id
    assert meta.usage.input_tokens > 0
    assert meta.usage.output_tokens > 0
    assert meta.usage.total_tokens == meta.usage.input_tokens + meta.usage.output_tokens
    assert meta.total_duration_ms >= meta.phases.execution_ms > 0
    assert '3. add(a="{step_1_result}", b="<step_2_result>") →\n35' in _synthesis_prompt(model)
    await agent.aclose()


async def test_run_saves_user_then_ai_message(build_agent: AgentBuilder, tools: list[Any]) -> None:
    """A successful run appends the user message and then the AI message to the thread."""
    model = ScriptedProvider([plan_json(), "Hello!"])
    agent = build_agent(provider=model, tools=tools)
    await agent.process(AgentProps("Hi", "t1"))
    messages = await agent.conversation.get_messages("t1")
    assert [(m.role, m.content) for m in messages] == [
        (MessageRole.USER, "Hi"),
        (MessageRole.AI, "Hello!"),
    ]


async def test_planning_prompt_lists_enabled_tools_with_schemas_and_protocol(
    build_agent: AgentBuilder,
    tools: list[Any],
) -> None:
    """The planning prompt names each enabled tool with its signature and description, and
    the rules."""
    model = ScriptedProvider([plan_json(), "ok"])
    agent = build_agent(provider=model, tools=tools, system_prompt="You are Ada.")
    await agent.state.set_thread_config("t1", ThreadConfig(enabled_tools=["add"]))
    await agent.process(AgentProps("2+2?", "t1"))
    system = model.requests[0].messages[0]
    assert system.role == "system"
    assert system.content.startswith("You are Ada.")
    assert "# Tools\nadd(a: int, b: int) — Add two integers." in system.content
    assert "{step_N_result}" in system.content
    assert "slow_echo" not in system.content
    assert model.requests[0].messages[-1].content == "2+2?"


async def test_history_limit_keeps_only_the_newest_messages(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """With history_limit=2 the third run's prompt carries only the previous turn."""
    model = ScriptedProvider([plan_json(), "a1", plan_json(), "a2", plan_json(), "a3"])
    agent = build_agent(provider=model, tools=tools, history_limit=2)
    for query in ("q1", "q2", "q3"):
        await agent.process(AgentProps(query, "t1"))
    third = model.requests[4].messages
    assert [m.content for m in third[1:]] == ["q2", "a2", "q3"]
    assert [m.role for m in third[1:]] == ["user", "assistant", "user"]


async def test_unconfigured_thread_uses_agent_defaults(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A thread never configured may use every registered tool and the agent's system prompt."""
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=1)), "2"])
    agent = build_agent(provider=model, tools=tools, system_prompt="Default prompt.")
    result = await agent.process(AgentProps("1+1", "fresh"))
    assert result.metadata.status == "success"
    assert model.requests[0].messages[0].content.startswith("Default prompt.")
    assert await agent.state.get_thread_config("fresh") is None


async def test_thread_config_overrides_system_prompt_and_history(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A thread's own system prompt and history limit replace the agent's defaults."""
    model = ScriptedProvider([plan_json(), "a1", plan_json(), "a2"])
    agent = build_agent(provider=model, tools=tools, system_prompt="Agent prompt.")
    await agent.state.set_thread_config(
        "t1", ThreadConfig(system_prompt="Thread prompt.", history_limit=0)
    )
    await agent.process(AgentProps("q1", "t1"))
    await agent.process(AgentProps("q2", "t1"))
    second = model.requests[2].messages
    assert second[0].content.startswith("Thread prompt.")
    assert [m.content for m in second[1:]] == ["q2"]


async def test_tool_not_enabled_for_thread_never_runs(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """A call to a tool the thread does not enable gets an error result and never executes."""
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "Sorry."])
    agent = build_agent(provider=model, tools=tools)
    await agent.state.set_thread_config("locked", ThreadConfig(enabled_tools=[]))
    result = await agent.process(AgentProps("1+2", "locked"))
    assert result.metadata.status == "partial"
    assert events.log == []
    assert 'Tool "add" is not enabled' in _synthesis_prompt(model)


async def test_run_options_cannot_enable_a_tool_the_thread_disables(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Per-call enabled_tools only narrows the thread's set; it never widens it."""

    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "no"])
    agent = build_agent(provider=model, tools=tools)
    await agent.state.set_thread_config("t", ThreadConfig(enabled_tools=["get_city"]))
    options = RunOptions(enabled_tools=["add", "get_city"])
    result = await agent.process(AgentProps("1+2", "t", options=options))
    assert result.metadata.status == "partial"
    assert events.log == []
    assert "\nadd(" not in model.requests[0].messages[0].content


async def test_unknown_tool_is_an_error_result(build_agent: AgentBuilder, tools: list[Any]) -> None:
    """A call to a tool nobody registered is reported as an error result, not an exception."""
    model = ScriptedProvider([plan_json(call(1, "teleport", to="Mars")), "Cannot."])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("go", "t"))
    assert result.metadata.status == "partial"
    assert 'Tool "teleport" is not' in _synthesis_prompt(model)


async def test_invalid_arguments_are_an_error_result(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Arguments that do not match the schema give an error result and the tool does not run."""
    model = ScriptedProvider([plan_json(call(1, "add", a="two", b=3)), "Cannot."])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps("2+3", "t"))
    assert result.metadata.status == "partial"
    assert events.log == []
    assert '1. add(a="two", b=3) → error' in _synthesis_prompt(model)


async def test_raising_tool_gives_partial_status_and_the_error_reaches_synthesis(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """A tool that raises makes the run partial; its error is observed and shown to synthesis."""
    model = ScriptedProvider(
        [plan_json(call(1, "explode", reason="disk on fire"), call(2, "add", a=1, b=1)), "Half."]
    )
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder, types=[ObservationType.TOOL_EXECUTION])
    result = await agent.process(AgentProps("go", "t"))
    assert result.metadata.status == "partial"
    assert result.metadata.tool_calls == 2
    by_call = {o.content["callId"]: o.content for o in recorder.seen}
    assert by_call["call_1"]["status"] == "error"
    assert "disk on fire" in by_call["call_1"]["error"]
    assert by_call["call_2"]["status"] == "success"
    assert "disk on fire" in _synthesis_prompt(model)
    messages = await agent.conversation.get_messages("t")
    assert [m.metadata["status"] for m in messages if m.role is MessageRole.AI] == ["partial"]


async def test_tool_timeout_gives_an_error_result(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A call running past tool_timeout_s ends as an error result naming the timeout."""
    model = ScriptedProvider([plan_json(call(1, "sleepy", seconds=5)), "Too slow."])
    agent = build_agent(provider=model, tools=tools, tool_timeout_s=0.05)
    result = await agent.process(AgentProps("rest", "t"))
    assert result.metadata.status == "partial"
    assert "timed out" in _synthesis_prompt(model)


async def test_whole_value_placeholder_keeps_the_result_type(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A field path into a dict result passes the raw value (a list) to the next tool."""
    seen: list[Any] = []

    def count(request: LLMRequest) -> str:
        seen.append(request.messages[-1].content)
        return "done"

    @tool
    def size(items: list[str]) -> int:
        """Count items."""
        return len(items)

    model = ScriptedProvider(
        [
            plan_json(
                call(1, "get_city", name="Paris"),
                call(2, "size", items="{step_1_result.districts}"),
                call(3, "slow_echo", text="Paris has {step_1_result.districts} districts"),
            ),
            count,
        ]
    )
    agent = build_agent(provider=model, tools=[*tools, size])
    result = await agent.process(AgentProps("districts?", "t"))
    assert result.metadata.status == "success"
    assert '2. size(items="{step_1_result.districts}") →\n2' in seen[0]
    assert 'Paris has ["north", "south"] districts' in seen[0]


async def test_huge_tool_output_is_truncated_in_the_prompt_but_kept_in_observations(
    build_agent: AgentBuilder,
    recorder: Recorder,
) -> None:
    """Output over the prompt limit is cut with a marker; the observation keeps it whole."""

    @tool
    def dump() -> str:
        """Return a very long text."""
        return "x" * 50_000

    model = ScriptedProvider([plan_json(call(1, "dump")), "long"])
    agent = build_agent(provider=model, tools=[dump])
    agent.observations.subscribe(recorder, types=[ObservationType.TOOL_EXECUTION])
    await agent.process(AgentProps("dump", "t"))
    prompt = _synthesis_prompt(model)
    assert "[truncated 46000 more characters]" in prompt
    assert len(prompt) < 10_000
    assert recorder.seen[0].content["output"] == "x" * 50_000


async def test_output_that_is_not_json_is_shown_with_str(build_agent: AgentBuilder) -> None:
    """A tool returning an arbitrary object is rendered with str() in the synthesis prompt."""

    class Point:
        def __str__(self) -> str:
            return "Point(1, 2)"

    @tool
    def origin() -> Any:
        """Return a point."""
        return Point()

    model = ScriptedProvider([plan_json(call(1, "origin")), "ok"])
    agent = build_agent(provider=model, tools=[origin])
    result = await agent.process(AgentProps("where", "t"))
    assert result.metadata.status == "success"
    assert "Point(1, 2)" in _synthesis_prompt(model)


async def test_plan_with_too_many_calls_refuses_the_rest(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """Calls beyond max_tool_calls are refused with an error result and never run."""
    calls = [call(n, "add", a=n, b=0) for n in range(1, 6)]
    model = ScriptedProvider([plan_json(*calls), "capped"])
    agent = build_agent(provider=model, tools=tools, max_tool_calls=3)
    result = await agent.process(AgentProps("many", "t"))
    assert result.metadata.status == "partial"
    assert sorted(events.log) == ["add:1+0", "add:2+0", "add:3+0"]


async def test_thinking_blocks_become_one_thoughts_observation_each(
    build_agent: AgentBuilder, tools: list[Any], recorder: Recorder
) -> None:
    """Two provider thinking blocks and a <think> block in the text give three THOUGHTS."""
    planning = ScriptedResponse(
        "<think>parser thought</think>" + plan_json(), thinking=["first idea", "second idea"]
    )
    model = ScriptedProvider([planning, "answer"], chunk_size=3)
    agent = build_agent(provider=model, tools=tools)
    agent.observations.subscribe(recorder, types=[ObservationType.THOUGHTS])
    result = await agent.process(AgentProps("think", "t"))
    assert [o.content["text"] for o in recorder.seen] == [
        "first idea",
        "second idea",
        "parser thought",
    ]
    assert result.response.content == "answer"
    assert result.metadata.usage.reasoning_tokens > 0


async def test_implicit_state_saving_saves_changes_made_during_the_run(
    build_agent: AgentBuilder,
) -> None:
    """With state_saving='implicit' a tool's change to context.state is saved with the turn."""

    @tool
    def remember(fact: str, context: ToolContext) -> str:
        """Remember a fact in the thread state."""
        assert context.state is not None
        context.state.data.setdefault("facts", []).append(fact)
        return "noted"

    model = ScriptedProvider([plan_json(call(1, "remember", fact="sky is blue")), "Noted."])
    agent = build_agent(provider=model, tools=[remember], state_saving="implicit")
    await agent.process(AgentProps("remember", "t"))
    state = await agent.state.get_agent_state("t")
    assert state is not None
    assert state.data == {"facts": ["sky is blue"]}
    assert state.version == 1


async def test_explicit_state_saving_ignores_changes_not_saved_explicitly(
    build_agent: AgentBuilder,
) -> None:
    """With the default 'explicit' saving, in-run changes persist only via set_agent_state."""

    @tool
    def remember(fact: str, context: ToolContext) -> str:
        """Remember a fact in the thread state."""
        assert context.state is not None
        context.state.data["fact"] = fact
        return "noted"

    model = ScriptedProvider([plan_json(call(1, "remember", fact="x")), "Noted."])
    agent = build_agent(provider=model, tools=[remember])
    await agent.process(AgentProps("remember", "t"))
    assert await agent.state.get_agent_state("t") is None
    saved = await agent.state.set_agent_state("t", AgentState(data={"fact": "y"}))
    assert saved.version == 1
    loaded = await agent.state.get_agent_state("t")
    assert loaded is not None
    assert loaded.data == {"fact": "y"}


async def test_llm_params_reach_the_provider(build_agent: AgentBuilder, tools: list[Any]) -> None:
    """temperature and max_tokens from create_agent and RunOptions are sent with the request."""

    model = ScriptedProvider([plan_json(), "a", plan_json(), "b"])
    agent = build_agent(provider=model, tools=tools, temperature=0.2, max_tokens=100)
    await agent.process(AgentProps("q", "t"))
    options = RunOptions(llm_params=LLMParams(temperature=0.9, max_tokens=7))
    await agent.process(AgentProps("q", "t", options=options))
    assert [(r.temperature, r.max_tokens) for r in model.requests] == [
        (0.2, 100),
        (0.2, 100),
        (0.9, 7),
        (0.9, 7),
    ]


async def test_synthesis_prompt_says_the_query_and_each_result_under_its_call_once(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """The synthesis call sees the query and every result under the call that made it, and
    nothing the planning call already carried: no tool schema, no plan prose, no intent that
    only restates the query (the thread has no history)."""
    model = ScriptedProvider(
        [plan_json(call(1, "add", a=1, b=2), intent="sum it", plan="1. add the numbers"), "3"]
    )
    agent = build_agent(provider=model, tools=tools)
    await agent.process(AgentProps("what is 1+2", "t"))
    synthesis = model.requests[1]
    prompt = _synthesis_prompt(model)
    assert prompt == "# Query\nwhat is 1+2\n\n# Results\n1. add(a=1, b=2) →\n3"
    assert synthesis.tools == ()
    assert "Add two integers" not in synthesis.messages[0].content


async def test_with_history_the_synthesis_gets_the_intent_instead_of_the_history(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """The history goes to the planning call only; the synthesis gets the intent the planner
    read from it ("in euros" from an earlier turn) in its place."""
    model = ScriptedProvider(
        [
            plan_json(intent="greet"),
            "Hello.",
            plan_json(call(1, "add", a=1, b=2), intent="1+2, answered in euros as asked"),
            "3 euros",
        ]
    )
    agent = build_agent(provider=model, tools=tools)
    await agent.process(AgentProps("hi, answer in euros from now on", "t"))
    await agent.process(AgentProps("what is 1+2", "t"))
    planning, synthesis = model.requests[2], model.requests[3]
    assert any("answer in euros" in m.content for m in planning.messages[1:-1])
    assert [m.role for m in synthesis.messages] == ["system", "user"]
    assert "Hello." not in synthesis.messages[-1].content
    assert "# Intent, with the conversation so far\n1+2, answered in euros as asked" in (
        synthesis.messages[-1].content
    )


async def test_model_text_with_braces_is_never_formatted(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """Braces and format fields in the query and tool output reach the prompt literally."""
    query = "echo {0} {__class__} {step_9_result}"
    model = ScriptedProvider([plan_json(call(1, "slow_echo", text="{x.__dict__}")), "done"])
    agent = build_agent(provider=model, tools=tools)
    result = await agent.process(AgentProps(query, "t"))
    assert result.metadata.status == "success"
    assert query in _synthesis_prompt(model)
    assert "{x.__dict__}" in _synthesis_prompt(model)
    assert model.requests[0].messages[-1].content == query


async def test_threads_can_be_listed_and_deleted_with_everything_under_them(
    build_agent: AgentBuilder,
    tools: list[Any],
) -> None:
    """list_threads names threads that ran; delete_thread removes history, state and records."""
    model = ScriptedProvider([plan_json(), "a", plan_json(), "b"])
    agent = build_agent(provider=model, tools=tools)
    await agent.process(AgentProps("q", "keep"))
    await agent.process(AgentProps("q", "drop"))
    await agent.state.set_agent_state("drop", AgentState(data={"x": 1}))
    assert await agent.state.list_threads() == ["drop", "keep"]
    await agent.state.delete_thread("drop")
    assert await agent.state.list_threads() == ["keep"]
    assert await agent.conversation.get_messages("drop") == []
    assert await agent.observations.get_observations("drop") == []
    assert await agent.state.get_agent_state("drop") is None
    assert len(await agent.conversation.get_messages("keep")) == 2


async def test_enabled_tool_names_that_are_not_registered_are_dropped_with_a_warning(
    build_agent: AgentBuilder,
    tools: list[Any],
) -> None:
    """A typo in a thread's enabled_tools is logged and never shown to the model."""
    from structlog.testing import capture_logs

    model = ScriptedProvider([plan_json(), "ok"])
    agent = build_agent(provider=model, tools=tools)
    await agent.state.set_thread_config("t", ThreadConfig(enabled_tools=["add", "ad"]))
    with capture_logs() as logs:
        result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "success"
    warning = next(e for e in logs if e["event"] == "enabled_tools_not_registered")
    assert warning["tools"] == ["ad"]
    assert "\nad(" not in model.requests[0].messages[0].content
    assert "\nadd(a: int, b: int)" in model.requests[0].messages[0].content


async def test_implicit_saving_keeps_a_state_saved_elsewhere_during_the_run(
    build_agent: AgentBuilder,
) -> None:
    """A state saved while the run goes on is merged with the run's own changes, not lost."""
    agent_ref: list[Any] = []

    @tool
    async def upgrade(context: ToolContext) -> str:
        """Count a visit while the app saves the user's plan elsewhere."""
        assert context.state is not None
        context.state.data["visits"] = context.state.data.get("visits", 0) + 1
        await agent_ref[0].state.set_agent_state("t", AgentState(data={"plan": "pro"}))
        return "ok"

    model = ScriptedProvider([plan_json(call(1, "upgrade")), "done"])
    agent = build_agent(provider=model, tools=[upgrade], state_saving="implicit")
    agent_ref.append(agent)
    result = await agent.process(AgentProps("q", "t"))
    assert result.metadata.status == "success"
    state = await agent.state.get_agent_state("t")
    assert state is not None
    assert state.data == {"plan": "pro", "visits": 1}
    assert state.version == 2


async def test_tools_registered_after_create_agent_can_run(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A tool added to agent.tools later is both shown to the model and executed."""
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "3"])
    agent = build_agent(provider=model, tools=[])
    agent.tools.register(tools[0])
    result = await agent.process(AgentProps("1+2", "t"))
    assert result.metadata.status == "success"
    assert "\nadd(a: int, b: int)" in model.requests[0].messages[0].content


async def test_explicit_state_saves_are_observed_with_the_run_they_belong_to(
    build_agent: AgentBuilder,
) -> None:
    """set_agent_state records STATE_UPDATE: with the run's trace inside a tool, none outside."""
    agent_ref: list[Any] = []

    @tool
    async def save(context: ToolContext) -> str:
        """Save the state explicitly."""
        await agent_ref[0].state.set_agent_state("t", AgentState(data={"step": 1}))
        return "saved"

    model = ScriptedProvider([plan_json(call(1, "save")), "ok"])
    agent = build_agent(provider=model, tools=[save])
    agent_ref.append(agent)
    seen: list[Any] = []
    agent.observations.subscribe(seen.append, types=[ObservationType.STATE_UPDATE])
    result = await agent.process(AgentProps("q", "t"))
    await agent.state.set_agent_state("t", AgentState(data={"step": 2}))
    assert [(o.trace_id, o.content["version"], o.content["saving"]) for o in seen] == [
        (result.metadata.trace_id, 1, "explicit"),
        ("", 2, "explicit"),
    ]
