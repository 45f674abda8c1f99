"""Runs that wait for a person: pausing, resuming in a new agent, denial, expiry, the gate's
reach over every plan shape, in-process decisions and the rules that set gates."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pes_agent import (
    AgentProps,
    Approve,
    Deny,
    NotAwaitingApprovalError,
    ObservationType,
    PendingApproval,
    RunOptions,
    ThreadConfig,
    UsageError,
    create_agent,
)
from pes_agent.core import AgentCore
from pes_agent.testing import ScriptedProvider, plan_json

from .conftest import Ledger, StoreFactory, call

PAY_THEN_LOOK = plan_json(
    call("c1", "look", q="hi"),
    call("c2", "pay", amount=5),
    call("c3", "look", q="{step_2_result}"),
)


def agent_on(store: StoreFactory, tools: list[Any], *replies: str, **options: Any) -> AgentCore:
    return create_agent(
        provider=ScriptedProvider(list(replies)), tools=tools, storage=store(), **options
    )


async def kinds(agent: AgentCore, thread_id: str, kind: ObservationType) -> list[dict[str, Any]]:
    return [o.content for o in await agent.observations.get_observations(thread_id, types=[kind])]


async def test_gated_call_waits_while_independent_calls_run(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """The gated call and its dependent wait; the independent call runs; the run is stored."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK) as agent:
        result = await agent.process(AgentProps("pay", "t1"))
        assert result.metadata.status == "awaiting_approval"
        assert result.metadata.pending_approvals == [
            PendingApproval(call_id="c2", tool_name="pay", arguments={"amount": 5}, step=2)
        ]
        assert ledger.log == ["look:hi"]
        assert await agent.conversation.get_messages("t1") == []
        [paused] = await agent.pending_runs()
        assert (paused.thread_id, paused.trace_id) == ("t1", result.metadata.trace_id)
        assert [r.output for r in paused.results.values()] == ["HI"]
        requested = await kinds(agent, "t1", ObservationType.APPROVAL_REQUESTED)
        assert [(r["callId"], r["arguments"]) for r in requested] == [("c2", {"amount": 5})]


async def test_resume_in_a_new_agent_runs_approved_call_and_saves_one_turn(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A fresh agent on the same store resumes: same trace, placeholders resolved, one turn."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK) as first:
        paused = await first.process(AgentProps("pay", "t1"))
    async with agent_on(open_store, tools, "All paid.") as second:
        result = await second.resume("t1", paused.metadata.trace_id, {"c2": Approve()})
        assert result.metadata.status == "success"
        assert result.metadata.trace_id == paused.metadata.trace_id
        assert ledger.log == ["look:hi", "pay:5", "look:paid 5"]
        messages = await second.conversation.get_messages("t1")
        assert [m.content for m in messages] == ["pay", "All paid."]
        assert await second.pending_runs("t1") == []
        decided = await kinds(second, "t1", ObservationType.APPROVAL_DECIDED)
        assert [(d["callId"], d["decision"]) for d in decided] == [("c2", "approve")]
        with pytest.raises(NotAwaitingApprovalError):
            await second.resume("t1", paused.metadata.trace_id, {"c2": Approve()})


async def test_denied_call_is_an_error_naming_the_reason_and_skips_dependents(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A denial becomes an error result with the reason; what depends on it never runs."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK, "Not paid.") as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
        result = await agent.resume("t1", paused.metadata.trace_id, {"c2": Deny("too much")})
        assert result.metadata.status == "partial"
        assert ledger.log == ["look:hi"]
        executions = await kinds(agent, "t1", ObservationType.TOOL_EXECUTION)
        errors = {e["callId"]: e["error"] for e in executions}
        assert "too much" in errors["c2"]
        assert "depends on step 2" in errors["c3"]
        assert len(await agent.conversation.get_messages("t1")) == 2


async def test_resume_after_the_deadline_denies_pending_calls_as_expired(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """Past approval_timeout_s the pending calls are denied ("approval expired"), even approved."""
    async with agent_on(
        open_store, tools, PAY_THEN_LOOK, "Expired.", approval_timeout_s=0.05
    ) as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
        [stored] = await agent.pending_runs("t1")
        assert stored.deadline is not None
        await asyncio.sleep(0.1)
        result = await agent.resume("t1", paused.metadata.trace_id, {"c2": Approve()})
        assert result.metadata.status == "partial"
        assert "pay:5" not in ledger.log
        decided = await kinds(agent, "t1", ObservationType.APPROVAL_DECIDED)
        assert decided[0]["reason"] == "approval expired"


async def test_waiting_thread_refuses_process_until_cancel_pending(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """process() names resume and cancel_pending; cancelling saves no turn and frees the thread."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK, plan_json(), "Hello.") as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
        with pytest.raises(UsageError, match=r"agent\.resume.*agent\.cancel_pending"):
            await agent.process(AgentProps("again", "t1"))
        [cancelled] = await agent.cancel_pending("t1")
        assert cancelled.trace_id == paused.metadata.trace_id
        errors = await kinds(agent, "t1", ObservationType.ERROR)
        assert errors[-1]["phase"] == "cancelled"
        assert await agent.conversation.get_messages("t1") == []
        result = await agent.process(AgentProps("again", "t1"))
        assert result.metadata.status == "success"
        assert "pay:5" not in ledger.log


async def test_missing_or_unknown_decisions_are_usage_errors_and_the_run_keeps_waiting(
    open_store: StoreFactory, tools: list[Any]
) -> None:
    """Decisions must cover exactly the pending calls; a refused resume leaves the run stored."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK) as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
        trace = paused.metadata.trace_id
        with pytest.raises(UsageError, match="no decision for c2"):
            await agent.resume("t1", trace, {})
        with pytest.raises(UsageError, match="nope"):
            await agent.resume("t1", trace, {"c2": Approve(), "nope": Approve()})
        assert len(await agent.pending_runs("t1")) == 1


async def test_gated_call_depending_on_gated_call_is_pending_with_raw_arguments(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """Both gated calls are pending at once; the dependent's placeholders resolve on resume."""
    plan = plan_json(call("c1", "pay", amount=5), call("c2", "send", text="{step_1_result}"))
    async with agent_on(open_store, tools, plan, "Done.", require_approval=["send"]) as agent:
        paused = await agent.process(AgentProps("pay and tell", "t1"))
        pending = paused.metadata.pending_approvals
        assert [(p.call_id, p.resolved) for p in pending] == [("c1", True), ("c2", False)]
        assert pending[1].arguments == {"text": "{step_1_result}"}
        assert ledger.log == []
        result = await agent.resume(
            "t1", paused.metadata.trace_id, {"c1": Approve(), "c2": Approve()}
        )
        assert result.metadata.status == "success"
        assert ledger.log == ["pay:5", "send:paid 5"]


async def test_language_step_on_a_gated_result_waits_too(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A language step depending on a gated call is not run (no model call) before approval."""
    plan = json.dumps(
        {
            "intent": "x",
            "toolCalls": [
                call("c1", "pay", amount=5),
                {"callId": "c2", "instruction": "Summarise {step_1_result}"},
            ],
        }
    )
    async with agent_on(open_store, tools, plan) as agent:
        result = await agent.process(AgentProps("pay", "t1"))
        assert result.metadata.status == "awaiting_approval"
        assert result.metadata.llm_calls == 1
        assert ledger.log == []


async def test_revised_plan_calling_a_gated_tool_is_gated(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A re-evaluation that adds a call to a gated tool cannot run it without approval."""
    plan = plan_json(call("c1", "look", q="a"), call("c2", "look", q="{step_1_result}"))
    revision = json.dumps({"toolCalls": [call("c3", "pay", amount=9)]})
    async with agent_on(open_store, tools, plan, revision, reevaluate="each_wave") as agent:
        result = await agent.process(AgentProps("pay", "t1"))
        plans = await kinds(agent, "t1", ObservationType.PLAN)
        assert any(p.get("status") == "revised" for p in plans)
        assert result.metadata.status == "awaiting_approval"
        assert [p.tool_name for p in result.metadata.pending_approvals] == ["pay"]
        assert ledger.log == ["look:a"]


async def test_approval_handler_decides_in_process_and_never_pauses(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """With approval_handler the run finishes; each gated call is requested and decided."""
    asked: list[PendingApproval] = []

    async def handler(pending: PendingApproval) -> bool:
        asked.append(pending)
        return isinstance(pending.arguments, dict) and pending.arguments["amount"] < 10

    plan = plan_json(call("c1", "pay", amount=5), call("c2", "pay", amount=50))
    async with agent_on(open_store, tools, plan, "Half paid.", approval_handler=handler) as agent:
        result = await agent.process(AgentProps("pay", "t1"))
        assert result.metadata.status == "partial"
        assert ledger.log == ["pay:5"]
        assert [p.call_id for p in asked] == ["c1", "c2"]
        decided = await kinds(agent, "t1", ObservationType.APPROVAL_DECIDED)
        assert [d["decision"] for d in decided] == ["approve", "deny"]
        assert len(await kinds(agent, "t1", ObservationType.APPROVAL_REQUESTED)) == 2
        assert await agent.pending_runs() == []


async def test_rules_from_agent_thread_and_call_add_gates(
    open_store: StoreFactory, tools: list[Any], ledger: Ledger
) -> None:
    """A predicate, ThreadConfig.require_approval and RunOptions.require_approval each gate."""
    send = plan_json(call("c1", "send", text="hello"))
    look = plan_json(call("c1", "look", q="x"))

    def big(call: Any, context: Any) -> bool:
        return call.tool_name == "look" and context.thread_id == "t-pred"

    async with agent_on(
        open_store, tools, look, send, send, approval_timeout_s=60, require_approval=big
    ) as agent:
        by_predicate = await agent.process(AgentProps("look", "t-pred"))
        await agent.state.set_thread_config("t-thread", ThreadConfig(require_approval=["send"]))
        by_thread = await agent.process(AgentProps("send", "t-thread"))
        by_call = await agent.process(
            AgentProps("send", "t-call", options=RunOptions(require_approval=["send"]))
        )
        for result in (by_predicate, by_thread, by_call):
            assert result.metadata.status == "awaiting_approval"
        assert ledger.log == []


def test_invalid_rules_are_usage_errors() -> None:
    """A single string, a non-callable handler or a bad timeout fail in create_agent."""
    provider = ScriptedProvider([])
    with pytest.raises(UsageError, match="list of tool names"):
        create_agent(provider=provider, require_approval="pay")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="approval_handler"):
        create_agent(provider=provider, approval_handler=True)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="approval_timeout_s"):
        create_agent(provider=provider, approval_timeout_s=0)


async def test_two_stores_claiming_one_paused_run_get_it_once(
    open_store: StoreFactory, tools: list[Any]
) -> None:
    """claim_paused_run is a delete-and-return: of two concurrent claims exactly one wins."""
    async with agent_on(open_store, tools, PAY_THEN_LOOK) as agent:
        paused = await agent.process(AgentProps("pay", "t1"))
    first, second = open_store(), open_store()
    claims = await asyncio.gather(
        first.claim_paused_run("t1", paused.metadata.trace_id),
        second.claim_paused_run("t1", paused.metadata.trace_id),
    )
    assert sorted(claim is None for claim in claims) == [False, True]
    assert await first.get_paused_runs() == []
