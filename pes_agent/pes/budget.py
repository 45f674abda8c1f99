"""A run's usage limits, and what it has spent against them.

`RunBudget` is a run resource (`RunResources.budget`) built from the run's resolved
`UsageLimits`. The run's model caller asks it before each model call and after each answer;
its tool invoker (`RunBudget.invoker`) asks it before each tool call. The first check that
fails is kept as the run's `breach` and raised as `UsageLimitExceeded`:
- the executor lets it through (it does not become an error result), so the run's calls
  still in flight are cancelled with their task group;
- a planning stream that is still being written stops at its next piece (calls it started
  can have crossed the limit);
- the phase that was under way fails with phase `budget` (`PhaseSystem`), so the run ends
  `error` with an ERROR observation naming the limit and nothing saved.

Since the breach is kept, the run stops even when something between the check and the phase
(a custom executor catching every exception, say) swallowed the exception.
"""

from __future__ import annotations

from typing import Any

from pes_agent.errors import UsageLimitExceeded
from pes_agent.tools.base import Tool, ToolContext
from pes_agent.tools.invoker import ToolInvoker
from pes_agent.usage import Usage, UsageLimits

__all__ = ["BudgetedInvoker", "RunBudget"]


class RunBudget:
    """One run's `UsageLimits` and its tool calls so far; the first breach is kept.

    A run resumed after a pause for approval goes on against what it had `spent` (model
    calls and tokens) and the tool calls it had started before the pause.
    """

    __slots__ = ("breach", "limits", "spent", "tool_calls")

    def __init__(
        self, limits: UsageLimits, *, spent: Usage | None = None, tool_calls: int = 0
    ) -> None:
        self.limits = limits
        #: What the run used before it paused (nothing for a run that never paused).
        self.spent = spent if spent is not None else Usage()
        self.tool_calls = tool_calls
        #: The first limit the run would have crossed; None while it is within them.
        self.breach: UsageLimitExceeded | None = None

    def before_request(self, usage: Usage, requests: int) -> None:
        """Raise `UsageLimitExceeded` if the run has no room for another model call."""
        self._raise_breach()
        spent = self.spent
        try:
            self.limits.check_before_request(usage + spent, requests + spent.requests)
        except UsageLimitExceeded as error:
            self._keep(error)
            raise

    def after_response(self, usage: Usage) -> None:
        """Raise `UsageLimitExceeded` if the tokens used so far cross a token limit."""
        try:
            self.limits.check_tokens(usage + self.spent)
        except UsageLimitExceeded as error:
            self._keep(error)
            raise

    def take_tool_call(self) -> None:
        """Count a tool call about to start; raise `UsageLimitExceeded` if there is no room."""
        self._raise_breach()
        try:
            self.limits.check_before_tool_call(self.tool_calls)
        except UsageLimitExceeded as error:
            self._keep(error)
            raise
        self.tool_calls += 1

    def invoker(self, inner: ToolInvoker) -> ToolInvoker:
        """`inner`, asking this budget before each call when tool calls are limited."""
        return inner if self.limits.tool_calls is None else BudgetedInvoker(self, inner)

    def _raise_breach(self) -> None:
        if self.breach is not None:
            raise self.breach

    def _keep(self, error: UsageLimitExceeded) -> None:
        if self.breach is None:
            self.breach = error


class BudgetedInvoker:
    """A `ToolInvoker` that takes a tool call from a `RunBudget` before passing it on."""

    __slots__ = ("_budget", "_inner")

    def __init__(self, budget: RunBudget, inner: ToolInvoker) -> None:
        self._budget = budget
        self._inner = inner

    async def invoke(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
        """The tool's output for `arguments`, if the budget has room for the call.

        Args:
            tool: The tool to call.
            arguments: Its resolved, validated arguments.
            context: The call's context.

        Returns:
            What the tool returned.

        Raises:
            UsageLimitExceeded: The run has used all its tool calls; the tool is not called.
        """
        self._budget.take_tool_call()
        return await self._inner.invoke(tool, arguments, context)
