"""CompactionSystem: one summarising call folds the older history, pair-safe and loop-free."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs import compaction as compaction_module
from pes_agent.ecs._history import SUMMARY_NAME
from pes_agent.ecs.compaction import (
    CompactionSystem,
    estimate_tokens,
    message_tokens,
    tokenizer_name,
)
from pes_agent.ecs.components import CompactionComponent, ConversationComponent, LLMComponent
from pes_agent.ecs.events import CompactionCompleteEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.services import close_services
from pes_agent.errors import ProviderError, RunError, ScriptExhaustedError
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptEntry

SYSTEM = ChatMessage("system", "You are terse.")


def turn(n: int) -> list[ChatMessage]:
    """One exchange of about 25 tokens each way."""
    return [ChatMessage("user", f"question {n} " + "x" * 90), ChatMessage("assistant", f"a{n}")]


def tool_group(tag: str, calls: int) -> list[ChatMessage]:
    ids = [f"{tag}{n}" for n in range(calls)]
    ask = ChatMessage("assistant", "", tool_calls=[ToolCall(i, "lookup", {"q": i}) for i in ids])
    return [ask, *(ChatMessage("tool", f"found {i}", tool_call_id=i) for i in ids)]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    world = World()
    world.register_system(CompactionSystem(), priority=20)
    yield world
    await close_services(world)


def agent(
    world: World,
    messages: list[ChatMessage],
    script: list[ScriptEntry],
    *,
    threshold: int = 60,
    keep_recent: int = 2,
) -> tuple[EntityId, ScriptedProvider, list[CompactionCompleteEvent]]:
    model = ScriptedProvider(script)
    events: list[CompactionCompleteEvent] = []
    world.events.subscribe(CompactionCompleteEvent, events.append)
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent(messages),
        CompactionComponent(threshold_tokens=threshold, keep_recent=keep_recent),
    )
    return entity, model, events


def history(world: World, entity: EntityId) -> list[ChatMessage]:
    conversation = world.get_component(entity, ConversationComponent)
    assert conversation is not None
    return conversation.messages


async def test_under_threshold_makes_no_call(world: World) -> None:
    """A conversation within its token budget is left alone, without a model call."""
    messages = [SYSTEM, *turn(1)]
    entity, model, events = agent(world, list(messages), [], threshold=1000)
    await world.process()
    assert model.calls == 0
    assert history(world, entity) == messages
    assert events == []


async def test_older_part_becomes_one_summary_after_the_system_message(world: World) -> None:
    """Over the budget, one compaction call replaces all but the recent messages by a summary."""
    older = [*turn(1), *turn(2)]
    recent = turn(3)
    entity, model, events = agent(world, [SYSTEM, *older, *recent], ["They asked 1 and 2."])
    await world.process()
    assert model.calls == 1
    request = model.requests[0]
    assert request.phase == "compaction"
    prompt = "\n".join(m.content for m in request.messages)
    assert "question 1" in prompt
    assert "question 2" in prompt
    assert "question 3" not in prompt
    summary = history(world, entity)[1]
    assert (summary.role, summary.name) == ("system", SUMMARY_NAME)
    assert summary.content.endswith("They asked 1 and 2.")
    assert history(world, entity) == [SYSTEM, summary, *recent]
    assert [(e.entity_id, e.removed_count, e.summary) for e in events] == [
        (entity, 4, "They asked 1 and 2.")
    ]


async def test_recent_cut_inside_tool_group_summarises_the_whole_group(world: World) -> None:
    """When keep_recent would split a tool group, the group is summarised whole: pairs stay."""
    group = tool_group("c", 3)
    last = ChatMessage("assistant", "done")
    messages = [SYSTEM, *turn(1), *group, last]
    # keep_recent=3 would start the recent part at the second tool result.
    entity, model, _ = agent(world, messages, ["summary"], threshold=20, keep_recent=3)
    await world.process()
    assert history(world, entity)[2:] == [last]
    prompt = model.requests[0].messages[-1].content
    assert all(f"found c{n}" in prompt for n in range(3))
    assert "lookup" in prompt


async def test_failed_call_leaves_error_and_history_intact(world: World) -> None:
    """A failing compaction call puts an ErrorComponent on the entity and changes no message."""

    def broken(request: LLMRequest) -> str:
        raise ConnectionError("model down")

    messages = [SYSTEM, *turn(1), *turn(2), *turn(3)]
    entity, _, events = agent(world, list(messages), [broken])
    await world.process()
    error = world.get_component(entity, ErrorComponent)
    assert error is not None
    assert isinstance(error.error, ProviderError)
    assert error.system_name == "CompactionSystem"
    assert history(world, entity) == messages
    assert events == []


async def test_a_failing_model_is_not_called_again_until_the_history_grows(
    world: World,
) -> None:
    """After a failure, idle ticks make no call; new messages allow one; three failures stop it."""

    def broken(request: LLMRequest) -> str:
        raise ConnectionError("model down")

    entity, model, _ = agent(world, [SYSTEM, *turn(1), *turn(2), *turn(3)], [broken], threshold=60)
    model.repeat = True
    for _ in range(5):
        await world.process()
        world.try_remove_component(entity, ErrorComponent)
    assert model.calls == 1
    for n in range(4, 9):
        history(world, entity).extend(turn(n))
        await world.process()
        world.try_remove_component(entity, ErrorComponent)
    assert model.calls == 3  # the third failure in a row stops compaction
    compaction = world.get_component(entity, CompactionComponent)
    assert compaction is not None
    assert compaction.failures == 3


async def test_exhausted_script_is_an_error_not_a_crash(world: World) -> None:
    """A scripted model with no response left fails this entity only, history intact."""
    messages = [SYSTEM, *turn(1), *turn(2), *turn(3)]
    entity, _, _ = agent(world, list(messages), [])
    other, _, _ = agent(world, [SYSTEM, *turn(1), *turn(2), *turn(3)], ["fine"])
    await world.process()
    error = world.get_component(entity, ErrorComponent)
    assert error is not None
    assert isinstance(error.error, ScriptExhaustedError)
    assert history(world, entity) == messages
    assert history(world, other)[1].name == SUMMARY_NAME


async def test_empty_summary_is_an_error_and_keeps_history(world: World) -> None:
    """A blank answer is not a summary: the history stays and the entity gets an error."""
    messages = [SYSTEM, *turn(1), *turn(2), *turn(3)]
    entity, _, _ = agent(world, list(messages), ["   "])
    await world.process()
    error = world.get_component(entity, ErrorComponent)
    assert error is not None
    assert isinstance(error.error, RunError)
    assert history(world, entity) == messages


async def test_large_summary_is_clipped_and_never_compacted_again_in_a_loop(
    world: World,
) -> None:
    """A summary longer than the budget is clipped, and later ticks make no further call."""
    huge = "word " * 2000
    entity, model, events = agent(world, [SYSTEM, *turn(1), *turn(2), *turn(3)], [huge])
    for _ in range(5):
        await world.process()
    assert model.calls == 1
    assert world.get_component(entity, ErrorComponent) is None
    assert len(events) == 1
    summary = history(world, entity)[1]
    assert estimate_tokens(summary.content) <= 60 // 2 + 15
    assert summary.content.endswith("[…]")


async def test_next_compaction_folds_the_earlier_summary(world: World) -> None:
    """New history past the budget is summarised together with the previous summary."""
    entity, model, _ = agent(world, [SYSTEM, *turn(1), *turn(2), *turn(3)], ["S1", "S2"])
    await world.process()
    history(world, entity).extend([*turn(4), *turn(5)])
    await world.process()
    assert model.calls == 2
    assert "[earlier summary] S1" in model.requests[1].messages[-1].content
    messages = history(world, entity)
    assert [m.name for m in messages].count(SUMMARY_NAME) == 1
    assert messages[:2] == [SYSTEM, ChatMessage("system", messages[1].content, name=SUMMARY_NAME)]
    assert messages[1].content.endswith("S2")
    assert messages[2:] == turn(5)


async def test_without_system_message_summary_leads_and_is_folded_next_time(
    world: World,
) -> None:
    """With no system message the summary comes first, and is still folded, not stacked."""
    entity, _, _ = agent(world, [*turn(1), *turn(2), *turn(3)], ["S1", "S2"])
    await world.process()
    assert history(world, entity)[0].name == SUMMARY_NAME
    history(world, entity).extend([*turn(4), *turn(5)])
    await world.process()
    messages = history(world, entity)
    assert [m.name for m in messages] == [SUMMARY_NAME, None, None]
    assert messages[0].content.endswith("S2")


async def test_messages_added_during_the_call_are_kept(world: World) -> None:
    """Messages appended while the summary streams stay after the summary."""
    late = ChatMessage("user", "arrived during the call")
    messages = [SYSTEM, *turn(1), *turn(2), *turn(3)]

    def summarise(request: LLMRequest) -> str:
        messages.append(late)
        return "summary"

    entity, _, _ = agent(world, messages, [summarise])
    await world.process()
    assert history(world, entity)[-3:] == [*turn(3), late]


async def test_finished_entities_are_not_compacted(world: World) -> None:
    """An entity carrying a TerminalComponent costs no compaction call."""
    entity, model, _ = agent(world, [SYSTEM, *turn(1), *turn(2), *turn(3)], ["summary"])
    world.add_component(entity, TerminalComponent("reasoning_complete"))
    await world.process()
    assert model.calls == 0


def test_token_estimate_without_tiktoken_is_four_characters_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without tiktoken a token is about four characters, rounded up, and the name says so."""
    monkeypatch.setattr(compaction_module, "_encoder", lambda: None)
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("") == 0
    assert tokenizer_name() == "~4 chars/token"
    calls = ChatMessage("assistant", "", tool_calls=[ToolCall("1", "add", {"a": 1})])
    assert message_tokens([ChatMessage("user", "abcd"), calls]) == 1 + 4  # 'add({"a": 1})'


def test_token_estimate_uses_tiktoken_when_installed() -> None:
    """With tiktoken installed the count is o200k_base's."""
    tiktoken = pytest.importorskip("tiktoken")
    text = "Compaction keeps the conversation within budget."
    assert tokenizer_name() == "tiktoken o200k_base"
    assert estimate_tokens(text) == len(tiktoken.get_encoding("o200k_base").encode(text))
