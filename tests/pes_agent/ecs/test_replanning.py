"""ReplanningSystem: JSON revisions of the remaining steps, bounded and never looping."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import structlog

from ecs_core import EntityId, ErrorComponent, Runner, TerminalComponent, World
from pes_agent import ProviderError
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PlanComponent,
    ReplanningComponent,
)
from pes_agent.ecs.events import PlanRevisedEvent, PlanStepCompletedEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.planning import PlanningSystem
from pes_agent.ecs.replanning import REPLANNING_PROMPT, ReplanningSystem, numbered, parse_steps
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider

from .conftest import EventLog

TASK = ChatMessage("user", "Plan a trip.")

Reply = str | Callable[[LLMRequest], str]


class Model:
    """A scripted model answering plan steps with "done k" and replanning calls with `revise`."""

    def __init__(self, revise: Reply) -> None:
        self.revise = revise
        self.steps = 0
        self.provider = ScriptedProvider([self._answer], repeat=True)

    def _answer(self, request: LLMRequest) -> str:
        if request.phase == "replanning":
            return self.revise(request) if callable(self.revise) else self.revise
        self.steps += 1
        return "done " + str(self.steps)

    def replanning_requests(self) -> list[LLMRequest]:
        return [r for r in self.provider.requests if r.phase == "replanning"]


def failing(request: LLMRequest) -> str:
    """A replanning reply that fails like a provider outage."""
    raise RuntimeError("model down")


@pytest.fixture
def systems(world: World) -> World:
    world.register_system(PlanningSystem(), priority=0)
    world.register_system(ReplanningSystem(), priority=7)
    return world


def planner(
    world: World, model: Model, steps: list[str], replanning: ReplanningComponent
) -> EntityId:
    return world.create_entity(
        LLMComponent(model.provider),
        ConversationComponent([TASK]),
        PlanComponent(list(steps)),
        replanning,
    )


def plan_of(world: World, entity: EntityId) -> PlanComponent:
    return world.require_component(entity, PlanComponent)


@pytest.mark.usefixtures("systems")
async def test_a_completed_step_asks_for_the_remaining_steps_and_replaces_them(
    world: World,
) -> None:
    """After step 1 the model sees done and remaining steps; its JSON replaces the remaining
    steps, one revision is counted and PlanRevisedEvent carries the steps before and after."""
    model = Model('["Book the train", "Pack"]')
    log = EventLog(world, PlanRevisedEvent)
    entity = planner(world, model, ["Pick a city", "Book a flight", "Pack"], ReplanningComponent())
    await world.process()
    request = model.replanning_requests()[0]
    assert request.messages[0].content == REPLANNING_PROMPT
    assert request.messages[-1].role == "user"
    assert request.messages[-1].content == (
        "Plan progress.\nSteps done:\n1. Pick a city\nSteps remaining:\n2. Book a flight\n"
        "3. Pack\n\nAnswer with the remaining steps as a JSON array of strings."
    )
    assert plan_of(world, entity).steps == ["Pick a city", "Book the train", "Pack"]
    assert log.events == [
        PlanRevisedEvent(entity, ("Book a flight", "Pack"), ("Book the train", "Pack"))
    ]
    replanning = world.require_component(entity, ReplanningComponent)
    assert (replanning.revisions, replanning.checked_step) == (1, 1)
    # The replanning exchange is not stored: the conversation ends with the step's answer.
    assert world.require_component(entity, ConversationComponent).messages[-1].content == "done 1"


@pytest.mark.usefixtures("systems")
async def test_fenced_json_with_prose_and_a_steps_object_is_read(world: World) -> None:
    """A reply with prose, a code fence, a {"steps": [...]} object and list markers is usable."""
    reply = 'Sure, here you go:\n```json\n{"steps": ["1. Book the train", "2. Pack"]}\n```\nBye.'
    model = Model(reply)
    entity = planner(world, model, ["Pick", "Fly", "Pack"], ReplanningComponent())
    await world.process()
    assert plan_of(world, entity).steps == ["Pick", "Book the train", "Pack"]


@pytest.mark.usefixtures("systems")
async def test_an_unparseable_reply_keeps_the_plan_and_never_loops(world: World) -> None:
    """Prose without JSON keeps the plan (logged), counts no revision, and each checkpoint asks
    exactly once: a 3-step plan costs 3 step calls and 2 replanning calls."""
    model = Model("I think the plan is fine as it is.")
    log = EventLog(world, PlanRevisedEvent)
    entity = planner(world, model, ["a", "b", "c"], ReplanningComponent())
    with structlog.testing.capture_logs() as logs:
        result = await Runner().run(world, until=entity, max_ticks=20)
    assert result.ticks == 3
    assert plan_of(world, entity).steps == ["a", "b", "c"]
    assert (model.steps, len(model.replanning_requests())) == (3, 2)
    assert log.events == []
    assert world.require_component(entity, ReplanningComponent).revisions == 0
    assert [e["event"] for e in logs].count("replanning_reply_unusable") == 2


async def test_a_failed_call_keeps_the_plan_and_advances_the_checkpoint(world: World) -> None:
    """A failing replanning call leaves an ErrorComponent and the plan as it was."""
    world.register_system(ReplanningSystem(), priority=7)
    model = Model(failing)
    entity = planner(world, model, ["a", "b"], ReplanningComponent())
    plan_of(world, entity).current_step = 1  # as if PlanningSystem had just finished step 1
    await world.process()
    error = world.require_component(entity, ErrorComponent)
    assert isinstance(error.error, ProviderError)
    assert error.system_name == "ReplanningSystem"
    assert plan_of(world, entity).steps == ["a", "b"]
    assert world.require_component(entity, ReplanningComponent).checked_step == 1


@pytest.mark.parametrize("reply", [failing, "no JSON at all"], ids=["failed", "unparseable"])
async def test_a_checkpoint_is_asked_about_once_whatever_the_reply(
    world: World, reply: Reply
) -> None:
    """A failed or unusable reply is not retried on later ticks while the step stays put."""
    world.register_system(ReplanningSystem(), priority=7)
    model = Model(reply)
    entity = planner(world, model, ["a", "b"], ReplanningComponent())
    plan_of(world, entity).current_step = 1
    for _ in range(4):
        await world.process()
        world.try_remove_component(entity, ErrorComponent)
    assert len(model.replanning_requests()) == 1
    assert plan_of(world, entity).steps == ["a", "b"]
    assert world.require_component(entity, ReplanningComponent).revisions == 0


@pytest.mark.usefixtures("systems")
async def test_max_revisions_bounds_revisions_when_the_model_always_revises(world: World) -> None:
    """A model that replaces the remaining steps every time gets max_revisions calls; the plan
    then runs its remaining steps and completes."""
    count = 0

    def always_new(request: LLMRequest) -> str:
        nonlocal count
        count += 1
        return '["r' + str(count) + 'a", "r' + str(count) + 'b"]'

    model = Model(always_new)
    log = EventLog(world, PlanRevisedEvent, PlanStepCompletedEvent)
    entity = planner(world, model, ["a", "b"], ReplanningComponent(max_revisions=3))
    result = await Runner().run(world, until=entity, max_ticks=30)
    assert result.finished
    assert world.require_component(entity, TerminalComponent).reason == "plan_completed"
    assert len(model.replanning_requests()) == 3
    assert len(log.of(PlanRevisedEvent)) == 3
    assert world.require_component(entity, ReplanningComponent).revisions == 3
    assert plan_of(world, entity).steps == ["a", "r1a", "r2a", "r3a", "r3b"]
    assert model.steps == 5


@pytest.mark.usefixtures("systems")
async def test_every_n_steps_spaces_the_checks_and_the_same_steps_are_no_revision(
    world: World,
) -> None:
    """With every_n_steps=2 a 5-step plan is checked after steps 2 and 4; a reply repeating the
    remaining steps changes nothing and publishes nothing."""

    def same(request: LLMRequest) -> str:
        remaining = request.messages[-1].content.split("Steps remaining:\n")[1].split("\n\n")[0]
        steps = [line.split(". ", 1)[1] for line in remaining.splitlines()]
        return "[" + ", ".join('"' + step + '"' for step in steps) + "]"

    model = Model(same)
    log = EventLog(world, PlanRevisedEvent)
    entity = planner(world, model, ["a", "b", "c", "d", "e"], ReplanningComponent(every_n_steps=2))
    await Runner().run(world, until=entity, max_ticks=20)
    done = [
        r.messages[-1].content.split("Steps done:\n")[1].split("\nSteps remaining")[0]
        for r in model.replanning_requests()
    ]
    assert done == ["1. a\n2. b", "1. a\n2. b\n3. c\n4. d"]
    assert log.events == []
    assert world.require_component(entity, ReplanningComponent).revisions == 0


@pytest.mark.usefixtures("systems")
async def test_an_empty_revision_completes_the_plan_without_another_step(world: World) -> None:
    """`[]` means nothing is left: the next tick completes the plan with no step call."""
    model = Model("[]")
    entity = planner(world, model, ["a", "b", "c"], ReplanningComponent())
    result = await Runner().run(world, until=entity, max_ticks=10)
    assert result.finished
    assert plan_of(world, entity).steps == ["a"]
    assert plan_of(world, entity).completed
    assert model.steps == 1


@pytest.mark.usefixtures("systems")
async def test_step_text_with_braces_is_never_formatted(world: World) -> None:
    """Steps holding format fields reach the prompt and the plan exactly as written."""
    model = Model('["use {step_1_result}", "{0} and {}"]')
    entity = planner(world, model, ["{steps}", "x {y}"], ReplanningComponent())
    await world.process()
    prompt = model.replanning_requests()[0].messages[-1].content
    assert "1. {steps}\n" in prompt
    assert "2. x {y}\n" in prompt
    assert plan_of(world, entity).steps == ["{steps}", "use {step_1_result}", "{0} and {}"]


async def test_a_non_positive_interval_is_an_error_reported_once_per_step(world: World) -> None:
    """every_n_steps=0 makes no call and leaves a UsageError, not one per tick."""
    world.register_system(ReplanningSystem(), priority=7)
    model = Model("[]")
    entity = planner(world, model, ["a", "b"], ReplanningComponent(every_n_steps=0))
    plan_of(world, entity).current_step = 1
    await world.process()
    assert isinstance(world.require_component(entity, ErrorComponent).error, UsageError)
    world.remove_component(entity, ErrorComponent)
    await world.process()
    assert not world.has_component(entity, ErrorComponent)
    assert model.provider.calls == 0


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ('["a", "b"]', ["a", "b"]),
        ("[]", []),
        ('{"steps": ["a"]}', ["a"]),
        ('{"Steps": [{"step": "a"}, {"description": "b"}]}', ["a", "b"]),
        ('Plan:\n```json\n["1. a", "2) b", "- c",]\n```', ["a", "b", "c"]),
        ('<think>maybe ["x"]</think>\n["a"]', ["a"]),
        ('Note [1] first. ["a"]', ["a"]),
    ],
)
def test_parse_steps_reads_what_models_write(text: str, steps: list[str]) -> None:
    """Arrays, steps objects, fences, trailing commas, markers and think blocks are handled."""
    assert parse_steps(text) == steps


@pytest.mark.parametrize(
    "text", ["no json here", '["a", 3]', '{"plan": "a"}', '["a", "  "]', '["a"', ""]
)
def test_parse_steps_refuses_what_is_not_a_step_list(text: str) -> None:
    """Prose, non-string items, other objects, blank steps and broken JSON give None."""
    assert parse_steps(text) is None


def test_numbered_lists_steps_from_the_given_number() -> None:
    """Steps are numbered from `start`; no steps read "(none)"."""
    assert numbered(["a", "b"], start=3) == "3. a\n4. b"
    assert numbered([]) == "(none)"
