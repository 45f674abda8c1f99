"""Whole PES runs through `create_agent` on the real SDKs, against the wire-compatible server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    ObservationType,
    ProviderConfig,
    RetryPolicy,
    RunOptions,
    ThreadConfig,
    create_agent,
    tool,
)
from tests.pes_agent.cli.cli_tools import ANSWER, PLAN

from .helpers import API_KEY
from .model_server import CutStream, Fault, ModelServer, Reply

PROVIDERS = ["openai", "anthropic"]


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "sky": "sunny", "celsius": 18}


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _agent(server: ModelServer, name: str, **config: Any) -> Any:
    provider = ProviderConfig(
        name,
        "test-model",
        api_key=API_KEY,
        base_url=server.base_url_for(name),
        **config,
    )
    return create_agent(provider=provider, tools=[get_weather, multiply])


@pytest.mark.parametrize("name", PROVIDERS)
async def test_full_run_with_tools_and_usage_totals(model_server: ModelServer, name: str) -> None:
    """Plan, two tool calls and the synthesis run on the real SDK; usage adds up per run."""
    model_server.script(
        Reply(
            PLAN,
            thinking="Two independent lookups.",
            input_tokens=120,
            output_tokens=40,
            cache_read_tokens=100,
            reasoning_tokens=6,
        ),
        Reply(ANSWER, input_tokens=200, output_tokens=20),
    )
    agent = _agent(model_server, name)
    try:
        result = await agent.process(AgentProps("Weather in Paris, and 12*7?", "thread-e2e"))
        thoughts = await agent.observations.get_observations(
            "thread-e2e", types=[ObservationType.THOUGHTS]
        )
        tool_runs = await agent.observations.get_observations(
            "thread-e2e", types=[ObservationType.TOOL_EXECUTION]
        )
    finally:
        await agent.aclose()

    meta = result.metadata
    assert meta.status == "success", meta.error
    assert result.response.content == ANSWER
    assert (meta.llm_calls, meta.tool_calls) == (2, 2)
    # Anthropic counts cache reads apart from input_tokens; ours always include them.
    planning_input = 120 if name == "openai" else 220
    assert meta.usage.input_tokens == planning_input + 200
    assert meta.usage.output_tokens == 60
    assert meta.usage.total_tokens == meta.usage.input_tokens + 60
    assert meta.usage.cache_read_tokens == 100
    assert meta.usage.reasoning_tokens == 6
    assert meta.usage.requests == 2
    assert [o.content.get("text") for o in thoughts] == ["Two independent lookups."]
    assert len(tool_runs) >= 2
    synthesis_prompt = json.dumps(model_server.requests[1].body)
    assert "84" in synthesis_prompt
    assert "sunny" in synthesis_prompt


@pytest.mark.parametrize("name", PROVIDERS)
async def test_retries_inside_a_run_succeed_and_say_so(
    model_server: ModelServer, name: str
) -> None:
    """A 429 and a cut stream are retried; the cut shows as LLM_STREAM_ERROR then a new start."""
    model_server.script(
        Fault(429, retry_after="0"),
        Reply(PLAN),
        CutStream(Reply(ANSWER), after_chunks=3),
        Reply(ANSWER),
    )
    agent = _agent(model_server, name)
    try:
        result = await agent.process(AgentProps("Weather in Paris, and 12*7?", "t-retry"))
        stream_obs = await agent.observations.get_observations(
            "t-retry",
            types=[ObservationType.LLM_STREAM_START, ObservationType.LLM_STREAM_ERROR],
        )
    finally:
        await agent.aclose()

    assert result.metadata.status == "success", result.metadata.error
    assert result.response.content == ANSWER, "the cut attempt's text must be discarded"
    assert len(model_server.requests) == 4
    kinds = [o.type for o in stream_obs]
    assert kinds == [
        ObservationType.LLM_STREAM_START,  # planning
        ObservationType.LLM_STREAM_START,  # synthesis
        ObservationType.LLM_STREAM_ERROR,  # the cut
        ObservationType.LLM_STREAM_START,  # the fresh attempt
    ]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_persistent_failure_ends_as_error_within_bounded_time(
    model_server: ModelServer, name: str
) -> None:
    """A server that always answers 503 ends the run as status error after max_retries + 1."""
    model_server.default = Fault(503, retry_after="0")
    agent = _agent(model_server, name, max_retries=2)
    started = time.perf_counter()
    try:
        result = await agent.process(AgentProps("Weather?", "t-down"))
        errors = await agent.observations.get_observations(
            "t-down", types=[ObservationType.ERROR, ObservationType.LLM_STREAM_ERROR]
        )
    finally:
        await agent.aclose()

    assert time.perf_counter() - started < 10.0
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert "after 3 attempts" in result.metadata.error
    assert len(model_server.requests) == 3
    assert errors, "the failure is recorded as observations"
    everything = result.model_dump_json() + "".join(o.model_dump_json() for o in errors)
    assert API_KEY not in everything


@pytest.mark.parametrize("name", PROVIDERS)
async def test_rejected_key_ends_as_error_with_the_fix(
    model_server: ModelServer, name: str
) -> None:
    """A 401 is not retried; the run's error names the variable to set, never the key."""
    model_server.default = Fault(401)
    agent = _agent(model_server, name)
    try:
        result = await agent.process(AgentProps("Weather?", "t-401"))
    finally:
        await agent.aclose()
    assert result.metadata.status == "error"
    variable = "OPENAI_API_KEY" if name == "openai" else "ANTHROPIC_API_KEY"
    assert variable in (result.metadata.error or "")
    assert API_KEY not in result.model_dump_json()
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("name", PROVIDERS)
async def test_create_agent_retry_policy_times_the_provider_retries(
    model_server: ModelServer, name: str
) -> None:
    """A RetryPolicy passed to create_agent decides the waits between the provider's attempts."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    model_server.script(Fault(500), Fault(500), Reply(PLAN), Reply(ANSWER))
    provider = ProviderConfig(
        name, "test-model", api_key=API_KEY, base_url=model_server.base_url_for(name)
    )
    policy = RetryPolicy(initial_backoff_s=0.25, jitter_s=0.0, sleep=record)
    agent = create_agent(provider=provider, tools=[get_weather, multiply], retry_policy=policy)
    try:
        result = await agent.process(AgentProps("Weather in Paris, and 12*7?", "t"))
    finally:
        await agent.aclose()
    assert result.metadata.status == "success"
    assert waits == [0.25, 0.5]


async def test_run_options_provider_config_overrides_the_agent_provider_for_one_call(
    model_server: ModelServer,
) -> None:
    """RunOptions.provider_config sends that one run to another provider and model."""
    model_server.script(Reply(PLAN), Reply(ANSWER), Reply(PLAN), Reply(ANSWER))
    agent = _agent(model_server, "openai")
    override = ProviderConfig(
        "anthropic",
        "override-model",
        api_key=API_KEY,
        base_url=model_server.base_url_for("anthropic"),
    )
    try:
        first = await agent.process(
            AgentProps("q", "t", options=RunOptions(provider_config=override))
        )
        second = await agent.process(AgentProps("q", "t"))
    finally:
        await agent.aclose()
    assert first.metadata.status == second.metadata.status == "success"
    assert [(r.api, r.body["model"]) for r in model_server.requests] == [
        ("anthropic", "override-model"),
        ("anthropic", "override-model"),
        ("openai", "test-model"),
        ("openai", "test-model"),
    ]


async def test_thread_provider_config_is_used_for_every_run_on_that_thread(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread configured with its own provider runs on it; other threads keep the default."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    model_server.script(Reply(PLAN), Reply(ANSWER), Reply(PLAN), Reply(ANSWER))
    agent = _agent(model_server, "openai")
    thread_provider = ProviderConfig(
        "anthropic", "thread-model", base_url=model_server.base_url_for("anthropic")
    )
    try:
        await agent.state.set_thread_config(
            "special", ThreadConfig(provider_config=thread_provider)
        )
        special = await agent.process(AgentProps("q", "special"))
        plain = await agent.process(AgentProps("q", "plain"))
    finally:
        await agent.aclose()
    assert special.metadata.status == plain.metadata.status == "success"
    assert [(r.api, r.body["model"]) for r in model_server.requests] == [
        ("anthropic", "thread-model"),
        ("anthropic", "thread-model"),
        ("openai", "test-model"),
        ("openai", "test-model"),
    ]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_run_usage_counts_a_cut_attempt_apart_and_in_the_total(
    model_server: ModelServer, name: str
) -> None:
    """The run's usage shows what a synthesis attempt cut midway cost, and adds it to the total."""
    model_server.script(
        Reply(PLAN, input_tokens=100, output_tokens=30),
        CutStream(Reply(ANSWER, input_tokens=200), after_chunks=3),
        Reply(ANSWER, input_tokens=200, output_tokens=20),
    )
    agent = _agent(model_server, name)
    try:
        result = await agent.process(AgentProps("Weather in Paris, and 12*7?", "t-usage"))
        metadata_obs = await agent.observations.get_observations(
            "t-usage", types=[ObservationType.LLM_STREAM_METADATA]
        )
    finally:
        await agent.aclose()

    usage = result.metadata.usage
    assert result.metadata.status == "success", result.metadata.error
    assert (usage.input_tokens, usage.output_tokens) == (300, 50)
    assert (usage.retried_input_tokens, usage.retried_output_tokens) == (200, 3)
    assert usage.total_tokens == 300 + 50 + 200 + 3
    synthesis = metadata_obs[-1].content["usage"]
    assert synthesis["retried_input_tokens"] == 200
