"""A finished run leaves no reference cycles: what it made is freed when it returns, not when
the garbage collector next comes by (at 10,000 runs at once, that collector's passes over what
cycles keep alive are most of the time lost)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from pes_agent import AgentProps, SequentialExecutor, create_agent
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

from .conftest import call, plan_json

# Three calls: two independent, one taking both results (a dependent released by a call).
PLAN = plan_json(
    call(1, "add", a=1, b=2),
    call(2, "get_city", name="Lyon"),
    call(3, "add", a="{step_1_result}", b=4),
)
# The same plan in the line protocol, streamed slowly: its calls start while it streams.
LINES = (
    '1. add(a=1, b=2)\n2. get_city(name="Lyon")\n3. add(a="{step_1_result}", b=4)\nIntent: sums\n'
)


@pytest.fixture
def collected() -> Iterator[list[Any]]:
    """What the garbage collector finds unreachable (kept, not freed) while the test runs; the
    collector does not run on its own meanwhile."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
    finally:
        gc.collect()
        found.extend(gc.garbage)
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


OURS = ("pes_agent", "ecs_core")


def _ours(garbage: list[Any]) -> list[str]:
    """The objects of pes-agent (its classes, its functions) among `garbage`."""
    names = []
    for thing in garbage:
        kind = type(thing)
        if (kind.__module__ or "").startswith(OURS):
            names.append(kind.__qualname__)
        elif callable(thing) and (getattr(thing, "__module__", None) or "").startswith(OURS):
            names.append(getattr(thing, "__qualname__", repr(thing)))
    return sorted(names)


async def _runs_leave_nothing(agent: Any, collected: list[Any]) -> None:
    for warm_up in range(2):  # caches and pools fill on the first runs
        await agent.process(AgentProps("go", f"warm-{warm_up}"))
    gc.collect()
    gc.garbage.clear()
    for number in range(3):
        result = await agent.process(AgentProps("go", f"t{number}"))
        assert result.metadata.status == "success", result.metadata.error
        assert result.metadata.tool_calls == 3
    gc.collect()
    assert _ours(gc.garbage) == []


@pytest.mark.parametrize("executor", [None, SequentialExecutor()], ids=["dag", "sequential"])
async def test_a_run_of_a_dag_leaves_no_cycles(
    tools: list[Any], collected: list[Any], executor: Any
) -> None:
    model = ScriptedProvider([PLAN, "Done."], repeat=True)
    agent = create_agent(provider=model, tools=tools, executor=executor)
    await _runs_leave_nothing(agent, collected)


async def test_a_run_dispatching_while_the_plan_streams_leaves_no_cycles(
    tools: list[Any], collected: list[Any]
) -> None:
    model = ScriptedProvider([LINES, "Done."], repeat=True, chunk_size=8, chunk_latency_s=0.002)
    agent = create_agent(provider=model, tools=tools)
    await _runs_leave_nothing(agent, collected)


async def test_a_run_with_reevaluation_leaves_no_cycles(
    tools: list[Any], collected: list[Any]
) -> None:
    # The reviser, asked after the first wave, repeats the call still to run: the plan stands.
    kept = json.dumps({"toolCalls": [call(3, "add", a="{step_1_result}", b=4)]})
    answers = {"planning": PLAN, "reevaluation": kept}

    def answer(request: LLMRequest) -> str:
        return answers.get(request.phase, "Done.")

    model = ScriptedProvider([answer], repeat=True)
    agent = create_agent(provider=model, tools=tools, reevaluate="each_wave")
    await _runs_leave_nothing(agent, collected)
