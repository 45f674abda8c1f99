"""A run paused for approval keeps its budget: the resume goes on against what it had used,
under the limits in force at the pause, whichever agent resumes it."""

from __future__ import annotations

from typing import Any

from pes_agent import AgentProps, Approve, ObservationType, UsageLimits, create_agent
from pes_agent.testing import ScriptedProvider, plan_json

from .conftest import Ledger, StoreFactory, call

LOOK_THEN_SEND = plan_json(call("c1", "look", q="hi"), call("c2", "send", text="hello"))


async def test_the_resume_goes_on_against_the_tool_calls_used_before_the_pause(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """With tool_calls=1, the call that ran before the pause counts: the approved call is not
    run after the resume, even by an agent built without any limit, and the run stops at the
    limit with nothing saved."""
    async with create_agent(
        provider=ScriptedProvider([LOOK_THEN_SEND]),
        tools=tools,
        storage=open_store(),
        require_approval=["send"],
        usage_limits=UsageLimits(tool_calls=1),
    ) as first:
        paused = await first.process(AgentProps("send it", "t1"))
    assert paused.metadata.status == "awaiting_approval"
    assert ledger.log == ["look:hi"]
    async with create_agent(
        provider=ScriptedProvider(["Sent."]), tools=tools, storage=open_store()
    ) as second:
        stored = (await second.pending_runs("t1"))[0]
        assert (stored.usage_limits, stored.tool_calls) == (UsageLimits(tool_calls=1), 1)
        result = await second.resume("t1", paused.metadata.trace_id, {"c2": Approve()})
        errors = await second.observations.get_observations("t1", types=[ObservationType.ERROR])
        saved = await second.conversation.get_messages("t1")
    assert ledger.log == ["look:hi"]
    assert result.metadata.status == "error"
    assert result.metadata.error == (
        "usage limit reached: tool_calls: 1 used, limit 1; the run needs another tool call"
    )
    assert errors[-1].content["phase"] == "budget"
    assert saved == []


async def test_the_resume_counts_the_tokens_used_before_the_pause(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """The tokens of the planning call before the pause count after the resume: a
    total_tokens limit the planning call alone reached stops the resumed run before its
    synthesis call."""
    async with create_agent(
        provider=ScriptedProvider([LOOK_THEN_SEND]),
        tools=tools,
        storage=open_store(),
        require_approval=["send"],
    ) as probe:
        before = await probe.process(AgentProps("send it", "probe"))
    planning_tokens = before.metadata.usage.total_tokens
    ledger.log.clear()

    limits = UsageLimits(total_tokens=planning_tokens)
    synthesis = ScriptedProvider(["Sent."])
    async with create_agent(
        provider=ScriptedProvider([LOOK_THEN_SEND]),
        tools=tools,
        storage=open_store(),
        require_approval=["send"],
        usage_limits=limits,
    ) as first:
        paused = await first.process(AgentProps("send it", "t1"))
    assert paused.metadata.status == "awaiting_approval"
    async with create_agent(provider=synthesis, tools=tools, storage=open_store()) as second:
        result = await second.resume("t1", paused.metadata.trace_id, {"c2": Approve()})
    assert ledger.log == ["look:hi", "send:hello"]
    assert result.metadata.error == (
        f"usage limit reached: total_tokens: {planning_tokens:,} used, limit "
        f"{planning_tokens:,}; the run needs another model call"
    )
    assert synthesis.requests == []
