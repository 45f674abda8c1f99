"""What an evaluator reads: one run's response and observations (`AgentRun`), and the task that
makes one per case of a dataset.

```python
run = await run_agent(agent, "Lisbon or Porto this weekend?")
run.status, run.tool_names, run.plan_depth     # "success", ("get_weather", ...), 3
report = await dataset.evaluate(agent_task(agent))
```

Nothing here needs pydantic-evals: an `AgentRun` is plain data a test can assert on directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pes_agent.core import AgentCore
from pes_agent.execution.dag import CallGraph
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.run import AgentFinalResponse, AgentProps, RunStatus
from pes_agent.usage import Usage

__all__ = ["AgentRun", "ExecutedCall", "agent_task", "plan_depth", "run_agent"]


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """A tool call the run started: its name and arguments (placeholders resolved), and how it
    ended (`status` None when the run stopped before the call finished)."""

    call_id: str
    tool_name: str
    arguments: Any
    status: str | None = None
    output: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One finished run: the response `agent.process` returned and the observations it recorded.

    The properties read both: `answer`, `status`, `usage`, the calls the run executed
    (`tool_calls`, `tool_names`, in the order they started) and the depth of its plan's DAG
    (`plan_depth`).
    """

    response: AgentFinalResponse
    observations: tuple[Observation, ...] = ()

    @property
    def answer(self) -> str:
        """The answer's text."""
        return self.response.response.content

    @property
    def status(self) -> RunStatus:
        """How the run ended: `"success"`, `"partial"`, `"error"`, ..."""
        return self.response.metadata.status

    @property
    def usage(self) -> Usage:
        """The tokens and requests the run's model calls used."""
        return self.response.metadata.usage

    @property
    def thread_id(self) -> str:
        """The thread the run answered on."""
        return self.response.metadata.thread_id

    @property
    def trace_id(self) -> str:
        """The run's id."""
        return self.response.metadata.trace_id

    @property
    def tool_calls(self) -> tuple[ExecutedCall, ...]:
        """The tool calls the run executed (started), in the order they started; calls
        refused or skipped before starting are not among them, nor are language steps."""
        ended = {
            o.content.get("callId"): o.content
            for o in self.observations
            if o.type is ObservationType.TOOL_EXECUTION
        }
        calls: list[ExecutedCall] = []
        for observation in self.observations:
            content = observation.content
            if observation.type is not ObservationType.TOOL_CALL:
                continue
            if content.get("kind", "tool") != "tool":
                continue
            end = ended.get(content.get("callId"), {})
            calls.append(
                ExecutedCall(
                    call_id=str(content.get("callId", "")),
                    tool_name=str(content.get("toolName", "")),
                    arguments=content.get("arguments"),
                    status=end.get("status"),
                    output=end.get("output"),
                    error=end.get("error"),
                )
            )
        return tuple(calls)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the executed tool calls, in the order they started."""
        return tuple(call.tool_name for call in self.tool_calls)

    @property
    def plan_depth(self) -> int:
        """The depth of the plan's DAG: 1 when every call is independent, 0 with no calls.

        The depth of the run's last plan that was ready to run (`PLAN` observations with
        status `ready`, or `revised` when an adaptive plan was revised)."""
        plans = [
            o.content["toolCalls"]
            for o in self.observations
            if o.type is ObservationType.PLAN
            and o.content.get("status") in ("ready", "revised")
            and isinstance(o.content.get("toolCalls"), list)
        ]
        if not plans:
            return 0
        return plan_depth([ParsedToolCall.model_validate(call) for call in plans[-1]])


def plan_depth(calls: Sequence[ParsedToolCall]) -> int:
    """The number of calls on the longest chain of dependencies among `calls`.

    Args:
        calls: A plan's calls; dependencies are their `{step_N_result}` placeholders and
            `dependsOn` ids, as the executor reads them.

    Returns:
        0 for no calls, 1 when none depends on another, else the longest chain's length.
    """
    graph = CallGraph.build(calls)
    depths: dict[int, int] = {}

    def depth(index: int, seen: frozenset[int]) -> int:
        if index in depths:
            return depths[index]
        # A cycle is a plan error (its calls never run); it must not recurse forever here.
        before = [d for d in graph.dependencies[index] if d not in seen]
        found = 1 + max((depth(d, seen | {index}) for d in before), default=0)
        depths[index] = found
        return found

    return max((depth(index, frozenset()) for index in range(len(calls))), default=0)


async def run_agent(agent: AgentCore, query: str, thread_id: str | None = None) -> AgentRun:
    """Ask `agent` one question and keep what the run did, for evaluators to read.

    Args:
        agent: The agent to run (inside `agent.override(...)` the overrides apply).
        query: The question.
        thread_id: The thread to ask on; a new one (`eval-…`) when None, so each case starts
            without history.

    Returns:
        The run's response and its observations (read from the agent's observation store by
        the run's trace id).

    Raises:
        UsageError: `agent.process` refused the request (a bad thread id, a closed agent).
    """
    thread = thread_id or f"eval-{uuid.uuid4().hex[:12]}"
    response = await agent.process(AgentProps(query, thread))
    observations = await agent.observations.get_observations(
        thread, trace_id=response.metadata.trace_id
    )
    return AgentRun(response, tuple(observations))


def agent_task(agent: AgentCore) -> Callable[[str], Awaitable[AgentRun]]:
    """The task to hand to `pydantic_evals.Dataset.evaluate`: each case's inputs (the query)
    run on a new thread.

    Args:
        agent: The agent every case runs on.

    Returns:
        `async def task(query: str) -> AgentRun`.
    """

    async def task(query: str) -> AgentRun:
        return await run_agent(agent, query)

    task.__name__ = "agent_task"
    return task
