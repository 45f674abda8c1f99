"""A stored decision is law: whichever agent resumes a paused run, with whatever rules, a denied
call never runs and a call that waited for approval never runs without an Approve."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    Approve,
    Deny,
    NotAwaitingApprovalError,
    ObservationType,
    ParsedToolCall,
    create_agent,
    tool,
)
from pes_agent.approvals import ApprovalContext, ApprovalGate
from pes_agent.core import AgentCore
from pes_agent.testing import ScriptedProvider, plan_json

from .conftest import Ledger, StoreFactory, call

LOOK_SEND_LOOK = plan_json(
    call("c1", "look", q="hi"),
    call("c2", "send", text="all my savings"),
    call("c3", "look", q="{step_2_result}"),
)


def agent_on(store: StoreFactory, tools: list[Any], *replies: str, **options: Any) -> AgentCore:
    return create_agent(
        provider=ScriptedProvider(list(replies)), tools=tools, storage=store(), **options
    )


async def test_deny_is_law_when_the_resuming_agent_lacks_the_rule(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """An agent without `require_approval` resuming with Deny never runs the denied call."""
    async with agent_on(open_store, tools, LOOK_SEND_LOOK, require_approval=["send"]) as first:
        paused = await first.process(AgentProps("send it", "t1"))
    assert paused.metadata.status == "awaiting_approval"
    async with agent_on(open_store, tools, "Nothing was sent.") as second:
        result = await second.resume("t1", paused.metadata.trace_id, {"c2": Deny("too much")})
        executions = await second.observations.get_observations(
            "t1", types=[ObservationType.TOOL_EXECUTION]
        )
    assert ledger.log == ["look:hi"]
    assert result.metadata.status == "partial"
    errors = {e.content["callId"]: e.content.get("error") for e in executions}
    assert "too much" in errors["c2"]
    assert "depends on step 2" in errors["c3"]


async def test_approve_runs_the_call_in_an_agent_without_the_rule(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """The same resume with Approve runs the call once, and its dependent after it."""
    async with agent_on(open_store, tools, LOOK_SEND_LOOK, require_approval=["send"]) as first:
        paused = await first.process(AgentProps("send it", "t1"))
    async with agent_on(open_store, tools, "Sent.") as second:
        result = await second.resume("t1", paused.metadata.trace_id, {"c2": Approve()})
    assert result.metadata.status == "success"
    assert ledger.log == ["look:hi", "send:all my savings", "look:sent"]


async def test_paused_run_stores_the_rules_in_force(
    open_store: StoreFactory, tools: list[Any]
) -> None:
    """The stored run names every gated tool (named and flagged) and whether a predicate gated."""

    def never(call: ParsedToolCall, context: ApprovalContext) -> bool:
        return False

    async with (
        agent_on(open_store, tools, LOOK_SEND_LOOK, require_approval=["send"]) as by_name,
        agent_on(
            open_store, tools, plan_json(call("p", "pay", amount=1)), require_approval=never
        ) as flagged,
    ):
        await by_name.process(AgentProps("send it", "t1"))
        await flagged.process(AgentProps("pay", "t2"))
        [named] = await by_name.pending_runs("t1")
        [predicated] = await flagged.pending_runs("t2")
    assert (named.require_approval, named.approval_predicate) == (["pay", "send"], False)
    assert (predicated.require_approval, predicated.approval_predicate) == (["pay"], True)


async def test_a_held_call_a_missing_predicate_would_judge_waits_for_a_person(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A call held behind a pending one, which only the pausing agent's predicate could judge,
    pauses again in an agent without that predicate instead of running unasked."""

    def big_sends(call: ParsedToolCall, context: ApprovalContext) -> bool:
        return call.tool_name == "send" and "paid" in str(call.arguments.get("text"))

    plan = plan_json(call("c1", "pay", amount=500), call("c2", "send", text="{step_1_result}"))
    async with agent_on(open_store, tools, plan, require_approval=big_sends) as first:
        paused = await first.process(AgentProps("pay and tell", "t1"))
    assert [p.call_id for p in paused.metadata.pending_approvals] == ["c1"]
    async with agent_on(open_store, tools, "Paid; the message waits.") as second:
        again = await second.resume("t1", paused.metadata.trace_id, {"c1": Approve()})
        assert ledger.log == ["pay:500"]
        assert again.metadata.status == "awaiting_approval"
        assert [(p.call_id, p.arguments) for p in again.metadata.pending_approvals] == [
            ("c2", {"text": "paid 500"})
        ]
        done = await second.resume("t1", paused.metadata.trace_id, {"c2": Deny("not now")})
    assert done.metadata.status == "partial"
    assert ledger.log == ["pay:500"]


def test_a_gate_without_rules_still_goes_through_a_stored_decision() -> None:
    """A call with a decision requires it even where no rule names its tool."""
    gate = ApprovalGate(
        tools={},
        names=frozenset(),
        predicate=None,
        context=ApprovalContext(thread_id="t1", trace_id="r1"),
        decisions={"c2": Deny("no")},
    )
    send = ParsedToolCall(call_id="c2", tool_name="send", arguments={"text": "x"})
    other = ParsedToolCall(call_id="c3", tool_name="send", arguments={"text": "x"})
    assert gate.requires(send)
    assert not gate.requires(other)


async def test_a_resume_losing_the_race_is_told_while_the_winner_runs(
    open_store: StoreFactory, ledger: Ledger
) -> None:
    """Of two resumes of one run through two stores (two processes), the loser raises
    NotAwaitingApprovalError while the winner's approved call still runs, rather than waiting
    for the thread until the winner's whole run is over."""
    started, release = asyncio.Event(), asyncio.Event()

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        started.set()
        await release.wait()
        ledger.log.append(f"pay:{amount}")
        return "paid"

    plan = plan_json(call("c1", "pay", amount=5))
    async with agent_on(open_store, [pay], plan) as first:
        paused = await first.process(AgentProps("pay", "t1"))
    trace = paused.metadata.trace_id
    async with (
        agent_on(open_store, [pay], "Paid.") as winner,
        agent_on(open_store, [pay], "Paid.") as loser,
    ):
        winning = asyncio.create_task(winner.resume("t1", trace, {"c1": Approve()}))
        await started.wait()
        losing = asyncio.create_task(loser.resume("t1", trace, {"c1": Approve()}))
        # The bound keeps a regression from hanging the suite (the winner waits on `release`).
        done, _ = await asyncio.wait(
            [losing, winning], timeout=60, return_when=asyncio.FIRST_COMPLETED
        )
        release.set()
        if losing not in done:
            await asyncio.gather(losing, return_exceptions=True)
        assert done == {losing}
        with pytest.raises(NotAwaitingApprovalError):
            losing.result()
        result = await winning
    assert result.metadata.status == "success"
    assert ledger.log == ["pay:5"]
