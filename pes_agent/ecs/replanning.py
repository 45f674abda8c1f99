"""`ReplanningSystem` [7]: revises the remaining steps of a plan as the plan goes along.

```python
world.register_system(PlanningSystem(), priority=0)
world.register_system(ReplanningSystem(), priority=7)
agent = world.create_entity(
    LLMComponent(model), ConversationComponent([ChatMessage("user", task)]),
    PlanComponent(["Search", "Compare", "Answer"]), ReplanningComponent(every_n_steps=1),
)
```

After every `every_n_steps` steps completed since the last check (`ReplanningComponent.
checked_step`), one model call (phase ``"replanning"``) sees the entity's conversation and then
a user message listing the steps done and the steps remaining, and answers with the remaining
steps as JSON: an array of strings, or ``{"steps": [...]}``. Code fences, prose and
``<think>`` blocks around the JSON are tolerated (`parse_steps`). The request is not stored:
the conversation stays as the steps left it.

- A reply whose steps differ from the remaining ones replaces them, counts one revision
  (`ReplanningComponent.revisions`) and publishes `PlanRevisedEvent(entity_id, old_steps,
  new_steps)` with the remaining steps before and after. An empty array means nothing is left
  to do: `PlanningSystem` then completes the plan without another call.
- The same steps again, an unparseable reply or a failed call (an `ErrorComponent`) keep the
  plan; none of them is a revision.
- In every case the checkpoint moves to the current step, so each checkpoint asks at most
  once: no reply can make the system loop. After `max_revisions` revisions it asks no more,
  so a model that always revises gets exactly `max_revisions` calls and the plan can grow
  only that many times.

Entities are served concurrently; a finished plan, a finished entity, or one waiting for tools
or a person is left alone. Prompts are built by concatenation, never by formatting model text.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Final

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs._model import call_model
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    ReplanningComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import PlanRevisedEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.planning import _in_tool_round
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger

# The planning parser's JSON finder (bracket matching that knows strings, trailing commas
# tolerated, think blocks cut out) is the one the PES planner trusts: one reader for both.
from pes_agent.planning.model_text import find_json, scan_json, split_thoughts

__all__ = ["REPLANNING_PROMPT", "ReplanningSystem", "numbered", "parse_steps"]

_log = get_logger("pes_agent.ecs.replanning")

REPLANNING_PROMPT: Final = (
    "You revise plans. You are shown the work so far, the steps of the plan already done and "
    "the steps still to do. Decide which steps remain necessary now: keep them, change them, "
    "drop them or add new ones. Answer with a JSON array of strings only, one string per "
    'remaining step in order, e.g. ["Check the totals", "Write the summary"]; answer with the '
    "same steps if they still fit, and with [] if nothing is left to do."
)
"""The replanning call's system prompt."""

_STEP_KEYS: Final = ("step", "description", "text", "title", "action", "task")
# A step written as "1. Do it", "2) Do it" or "- Do it": the marker is the model's, not the step's.
_MARKER: Final = re.compile(r"[ \t]*(?:\d{1,4}[.)]|[-*•])[ \t]+")


def parse_steps(text: str) -> list[str] | None:
    """The steps in a model's reply, or None when it holds no usable list.

    Accepted: the first JSON array whose items are all steps, or an object with a ``"steps"``
    array, anywhere in the text (code fences and prose around it are fine). A step is a
    non-empty string, or an object with a ``"step"`` / ``"description"`` / ``"text"`` /
    ``"title"`` / ``"action"`` / ``"task"`` string; list markers (``"1. "``, ``"- "``) are cut.
    An empty array is a usable answer: no steps.
    """
    _, body = split_thoughts(text, plan_aware=False)
    found = find_json(body, scan_json(body), lambda value: _steps_of(value) is not None)
    if found is None:
        return None
    return _steps_of(found.value)


def numbered(steps: Sequence[str], *, start: int = 1) -> str:
    """Steps as numbered lines (``"1. a"``), built by concatenation; ``"(none)"`` when empty."""
    if not steps:
        return "(none)"
    return "\n".join(str(number) + ". " + step for number, step in enumerate(steps, start))


def _steps_of(value: object) -> list[str] | None:
    if isinstance(value, dict):
        value = next((v for k, v in value.items() if str(k).lower() == "steps"), None)
    if not isinstance(value, list):
        return None
    steps: list[str] = []
    for item in value:
        step = _step_text(item)
        if step is None:
            return None
        steps.append(step)
    return steps


def _step_text(item: object) -> str | None:
    if isinstance(item, dict):
        fields = {str(key).lower(): value for key, value in item.items()}
        item = next((fields[key] for key in _STEP_KEYS if isinstance(fields.get(key), str)), None)
    if not isinstance(item, str):
        return None
    text = item.strip()
    marker = _MARKER.match(text)
    if marker is not None:
        text = text[marker.end() :].strip()
    return text or None


def _status_message(plan: PlanComponent) -> ChatMessage:
    done = plan.steps[: plan.current_step]
    remaining = plan.steps[plan.current_step :]
    # Concatenated, never formatted: the steps are model text and may hold braces.
    text = (
        "Plan progress.\nSteps done:\n"
        + numbered(done)
        + "\nSteps remaining:\n"
        + numbered(remaining, start=len(done) + 1)
        + "\n\nAnswer with the remaining steps as a JSON array of strings."
    )
    return ChatMessage("user", text)


class ReplanningSystem:
    """Revises each plan's remaining steps every `every_n_steps` steps (module docstring)."""

    async def process(self, world: World) -> None:
        """Ask for a revision on every entity whose plan reached its next checkpoint."""
        due: list[tuple[EntityId, PlanComponent, ReplanningComponent]] = []
        for entity, (plan, replanning, _, conversation) in world.query(
            PlanComponent,
            ReplanningComponent,
            LLMComponent,
            ConversationComponent,
            exclude=(TerminalComponent, PendingToolCallsComponent, UserInputComponent),
        ):
            if replanning.checked_step > plan.current_step:
                # A new or restored plan started over: count its steps from where it is.
                replanning.checked_step = plan.current_step
            if (
                plan.completed
                or plan.current_step >= len(plan.steps)
                or plan.current_step - replanning.checked_step < max(replanning.every_n_steps, 1)
                or replanning.revisions >= replanning.max_revisions
                # Mid-step (tool calls out or just answered): nothing to revise yet.
                or _in_tool_round(conversation.messages)
            ):
                continue
            if replanning.every_n_steps < 1:
                replanning.checked_step = plan.current_step
                error = UsageError(
                    "ReplanningComponent needs every_n_steps >= 1, got "
                    + str(replanning.every_n_steps)
                )
                world.add_component(entity, ErrorComponent(error, type(self).__name__))
                continue
            due.append((entity, plan, replanning))
        if len(due) == 1:
            await self._revise(world, *due[0])
        elif due:
            async with asyncio.TaskGroup() as group:
                for entity, plan, replanning in due:
                    group.create_task(self._revise(world, entity, plan, replanning))

    async def _revise(
        self, world: World, entity: EntityId, plan: PlanComponent, replanning: ReplanningComponent
    ) -> None:
        # The checkpoint moves before the call: whatever happens next, this step asked once.
        replanning.checked_step = plan.current_step
        before = list(plan.steps)
        conversation = world.require_component(entity, ConversationComponent)
        try:
            response = await call_model(
                world,
                entity,
                [*conversation.messages, _status_message(plan)],
                phase="replanning",
                system_prompt=REPLANNING_PROMPT,
            )
        except Exception as error:
            # Never raises (but for cancellation): the plan goes on as it was.
            if world.entity_exists(entity):
                world.add_component(entity, ErrorComponent(error, type(self).__name__))
            return
        if (
            not world.entity_exists(entity)
            or world.get_component(entity, PlanComponent) is not plan
            or plan.steps != before
            or plan.current_step != replanning.checked_step
        ):
            return  # the plan changed during the call: the revision would be of another plan
        new = parse_steps(response.text)
        old = plan.steps[plan.current_step :]
        if new is None:
            _log.warning(
                "replanning_reply_unusable",
                entity=entity,
                reply=response.text[:200],
                detail="no JSON array of steps; the plan is kept",
            )
            return
        if new == old:
            return
        plan.steps = [*plan.steps[: plan.current_step], *new]
        replanning.revisions += 1
        await world.events.publish(PlanRevisedEvent(entity, tuple(old), tuple(new)))
