"""A model call's usage observation: the usage as `model_dump()` gives it, whatever its class."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from pes_agent import AgentProps, create_agent, tool
from pes_agent.observing.types import ObservationType
from pes_agent.pes.llm_call import _dumped
from pes_agent.testing import ScriptedProvider, ScriptedResponse, plan_call, plan_lines
from pes_agent.usage import Usage


class _WithExtra(Usage):
    model_config = ConfigDict(extra="allow")
    cost_usd: float = 0.0


class _Renamed(Usage):
    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"tokens": self.total_tokens}


def test_the_usage_is_recorded_as_model_dump_gives_it() -> None:
    """A plain usage, a subclass with fields and extras, and one overriding `model_dump` are
    recorded exactly as `model_dump()` returns them, keys in the same order."""
    usages = [
        Usage(input_tokens=3, output_tokens=4, total_tokens=7, requests=1),
        _WithExtra(input_tokens=1, cost_usd=0.5, region="eu"),  # type: ignore[call-arg]
        _Renamed(total_tokens=9),
    ]
    for usage in usages:
        assert list(_dumped(usage).items()) == list(usage.model_dump().items())
    assert _dumped(usages[1])["region"] == "eu"
    assert _dumped(usages[2]) == {"tokens": 9}


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key


async def test_a_runs_usage_is_the_sum_of_its_calls_usage() -> None:
    """The run's usage adds up every count of each answer's usage, a subclass's too, and is
    recorded per call as each answer reported it."""
    planned = _WithExtra(input_tokens=10, output_tokens=3, total_tokens=13, requests=1, cost_usd=1)
    answered = Usage(
        input_tokens=20,
        output_tokens=5,
        total_tokens=27,
        cache_read_tokens=4,
        cache_write_tokens=1,
        reasoning_tokens=2,
        retried_input_tokens=1,
        retried_output_tokens=1,
        requests=2,
    )
    model = ScriptedProvider(
        [
            ScriptedResponse(plan_lines(plan_call(1, "lookup", key="k")), usage=planned),
            ScriptedResponse("Looked it up.", usage=answered),
        ]
    )
    async with create_agent(provider=model, tools=[lookup], storage="memory") as agent:
        result = await agent.process(AgentProps("look it up", "t"))
        recorded = await agent.observations.get_observations(
            "t", types=[ObservationType.LLM_STREAM_METADATA]
        )
    assert result.metadata.status == "success"
    assert result.metadata.usage == Usage() + planned + answered
    assert type(result.metadata.usage) is Usage
    assert [o.content["usage"] for o in recorded] == [planned.model_dump(), answered.model_dump()]
