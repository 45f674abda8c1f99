"""Language steps in the executors: one model call per step, its text a result like any other."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pes_agent.errors import ProviderError
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import LANGUAGE_STEP, ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor, LLMResponse, ModelCaller
from pes_agent.providers.base import LLMPhase, PromptMessage, ToolChoice
from pes_agent.tools import ToolRegistry, tool
from pes_agent.tools.base import ToolResult, ToolSchema


class FakeModel:
    """A `ModelCaller` that answers each instruction with `answer(instruction)`."""

    def __init__(self, answer: Callable[[str], str] = lambda text: "done: " + text) -> None:
        self.answer = answer
        self.instructions: list[str] = []
        self.phases: list[LLMPhase] = []
        self.fail = False
        self.delay_s = 0.0

    async def __call__(
        self,
        messages: Sequence[PromptMessage],
        *,
        phase: LLMPhase,
        tools: Sequence[ToolSchema] = (),
        tool_choice: ToolChoice | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        self.phases.append(phase)
        self.instructions.append(messages[-1].content)
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise ProviderError("the model is down", provider="fake")
        return LLMResponse(text=self.answer(messages[-1].content))


received: list[Any] = []


@tool
def fetch(city: str) -> dict[str, Any]:
    """Facts about a city."""
    return {"city": city, "population": 2_100_000}


@tool
def measure(text: str) -> int:
    """The length of a text."""
    received.append(text)
    return len(text)


def context(model: ModelCaller | None, **options: Any) -> ExecutionContext:
    registry = ToolRegistry([fetch, measure])
    return ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        llm=model,
        **options,
    )


def step(call_id: str, instruction: str, *after: str) -> ParsedToolCall:
    return ParsedToolCall(call_id=call_id, instruction=instruction, depends_on=list(after))


@pytest.fixture(params=[ConcurrentExecutor, SequentialExecutor])
def executor(request: pytest.FixtureRequest) -> Executor:
    """Each test runs against both executors."""
    made: Executor = request.param()
    return made


@pytest.fixture(autouse=True)
def _fresh_received() -> None:
    received.clear()


async def test_language_step_result_flows_into_a_later_placeholder_as_text(
    executor: Executor,
) -> None:
    """A step's instruction gets the earlier result as JSON text; its answer feeds a tool."""
    model = FakeModel(lambda text: "Paris is big")
    calls = [
        ParsedToolCall(call_id="c1", tool_name="fetch", arguments={"city": "Paris"}),
        step("c2", "{step_1_result}"),
        ParsedToolCall(call_id="c3", tool_name="measure", arguments={"text": "{step_2_result}"}),
    ]
    results = await executor.execute(calls, context(model))

    assert [r.status for r in results] == ["success", "success", "success"]
    # Exactly one placeholder is still text in an instruction: the dict arrives as JSON.
    assert model.instructions == ['{"city": "Paris", "population": 2100000}']
    assert model.phases == ["language_step"]
    assert results[1] == ToolResult(
        call_id="c2",
        tool_name=LANGUAGE_STEP,
        status="success",
        output="Paris is big",
        duration_ms=results[1].duration_ms,
    )
    assert received == ["Paris is big"]
    assert results[2].output == len("Paris is big")


async def test_placeholder_inside_an_instruction_reaches_into_a_result(
    executor: Executor,
) -> None:
    """`{step_1_result.population}` inside a sentence is filled with that field as text."""
    model = FakeModel()
    calls = [
        ParsedToolCall(call_id="c1", tool_name="fetch", arguments={"city": "Lyon"}),
        step("c2", "Say {step_1_result.population} in words; {not_a_placeholder} stays."),
    ]
    results = await executor.execute(calls, context(model))
    assert model.instructions == ["Say 2100000 in words; {not_a_placeholder} stays."]
    assert results[1].output == "done: Say 2100000 in words; {not_a_placeholder} stays."


async def test_thinking_blocks_are_not_part_of_the_result(executor: Executor) -> None:
    """The step's result is the model's answer without its <think> block, trimmed."""
    model = FakeModel(lambda text: "<think>hmm</think>\n  Bonjour  ")
    results = await executor.execute([step("c1", "Say hello in French.")], context(model))
    assert results[0].output == "Bonjour"


async def test_failing_model_call_is_an_error_result_and_skips_dependents(
    executor: Executor,
) -> None:
    """A provider failure makes the step an error result; its dependent is not run."""
    model = FakeModel()
    model.fail = True
    calls = [
        step("c1", "Summarise."),
        ParsedToolCall(call_id="c2", tool_name="measure", arguments={"text": "{step_1_result}"}),
    ]
    results = await executor.execute(calls, context(model))
    assert results[0].status == "error"
    assert results[0].error == "Language step failed: the model is down"
    assert results[1].error == 'Not run: it depends on step 1 ("c1"), which failed.'
    assert received == []


async def test_empty_answer_is_an_error_result(executor: Executor) -> None:
    """A model that answers nothing does not produce an empty success."""
    results = await executor.execute([step("c1", "Summarise.")], context(FakeModel(lambda _: " ")))
    assert (results[0].status, results[0].error) == (
        "error",
        "Language step failed: the model answered with no text.",
    )


async def test_language_step_without_a_model_caller_is_refused(executor: Executor) -> None:
    """An executor context with no `llm` refuses a language step with a clear error."""
    results = await executor.execute([step("c1", "Summarise.")], context(None))
    assert results[0].status == "error"
    assert "no model caller (ExecutionContext.llm)" in (results[0].error or "")


async def test_language_steps_run_side_by_side_with_tools() -> None:
    """Two independent language steps overlap in the concurrent DAG, like any two calls."""
    model = FakeModel()
    model.delay_s = 0.2
    calls = [step("c1", "One."), step("c2", "Two.")]
    started = asyncio.get_running_loop().time()
    results = await ConcurrentExecutor().execute(calls, context(model))
    elapsed = asyncio.get_running_loop().time() - started
    assert [r.status for r in results] == ["success", "success"]
    assert elapsed < 0.35


async def test_hooks_see_the_filled_instruction() -> None:
    """`on_call_start` of a language step gets the instruction with placeholders filled."""
    seen: list[tuple[str, dict[str, Any]]] = []

    class Hooks:
        async def on_call_start(self, call: ParsedToolCall, arguments: dict[str, Any]) -> None:
            seen.append((call.kind, arguments))

        async def on_call_end(self, call: ParsedToolCall, result: ToolResult) -> None:
            return None

    calls = [
        ParsedToolCall(call_id="c1", tool_name="measure", arguments={"text": "abc"}),
        step("c2", "Double {step_1_result}."),
    ]
    await ConcurrentExecutor().execute(calls, context(FakeModel(), hooks=Hooks()))
    assert seen == [("tool", {"text": "abc"}), ("language", {"instruction": "Double 3."})]
