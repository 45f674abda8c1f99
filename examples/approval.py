"""Runs that wait for a person: a money transfer pauses for approval, another agent resumes it.

`transfer_money` is made with `@tool(requires_approval=True)`. The first agent plans a balance
check and the transfer for two requests; the checks run, the transfers do not: `process()`
returns `status="awaiting_approval"` with the pending call, and the paused run is kept in the
SQLite file. That agent is then closed. A second agent — a new `create_agent` on the same file,
as a web handler in another process would build — lists the waiting runs with `pending_runs()`
and resumes them with `resume(thread_id, trace_id, decisions)`: one approved (the transfer runs,
once), one denied with a reason (it never runs; the model is told why).

    python examples/approval.py                                  # offline, scripted model
    PES_MODEL=openai:gpt-4o-mini python examples/approval.py     # a real model (needs its key)

On the command line the same flow is `pes-agent run --no-input ...` (exit code 4), then
`pes-agent approve THREAD [--deny CALL_ID=REASON]`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile

from pes_agent import AgentCore, AgentProps, LLMRequest, configure_logging, create_agent, tool
from pes_agent.approvals import Approve, Decision, Deny
from pes_agent.testing import ScriptedProvider

BALANCES = {"checking": 1200}
SENT: list[str] = []  # every transfer that really ran


@tool
def check_balance(account: str) -> int:
    """The balance of an account, in euros."""
    return BALANCES.get(account, 0)


@tool(requires_approval=True)
def transfer_money(amount: int, to: str) -> str:
    """Send `amount` euros from the checking account to `to`."""
    SENT.append(f"{amount} EUR to {to}")
    BALANCES["checking"] -= amount
    return f"sent {amount} EUR to {to}; {BALANCES['checking']} EUR left"


def scripted(request: LLMRequest) -> str:
    """The offline model: plans the check and the transfer a query asks for, then reports."""
    last = request.messages[-1].content
    if request.phase == "planning":
        found = re.search(r"Send (\d+) EUR to (\w+)", last)
        amount, to = (int(found[1]), found[2]) if found else (0, "nobody")
        balance = {"account": "checking"}
        transfer = {"amount": amount, "to": to}
        calls = [
            {"callId": "balance", "toolName": "check_balance", "arguments": balance},
            {"callId": "transfer", "toolName": "transfer_money", "arguments": transfer},
        ]
        return json.dumps({"intent": f"send {amount} EUR to {to}", "toolCalls": calls})
    denied = re.search(r"approval was denied \((.*?)\)", last)
    if denied:
        return f"I did not send the money: the transfer was denied ({denied[1]})."
    sent = re.search(r"sent \d+ EUR to \w+; \d+ EUR left", last)
    return f"Done: {sent[0] if sent else 'the transfer ran'}."


def make_agent(model: str | None, storage: str) -> AgentCore:
    """An agent on `storage`; each call builds a new one, as another process would."""
    return create_agent(
        provider=model or ScriptedProvider([scripted], repeat=True),
        tools=[check_balance, transfer_money],
        storage=storage,
        system_prompt="You move money for the user. Check the balance before a transfer.",
    )


async def main() -> None:
    configure_logging("WARNING")
    provider = os.environ.get("PES_MODEL", "openai:gpt-4o-mini")
    model: str | None = provider  # None: the scripted model
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(provider.split(":")[0])
    if key and not os.environ.get(key):
        print(f"[offline] {key} is not set: using a scripted model instead of {provider}")
        model = None
    requests = {"rent": "Send 250 EUR to Alice", "gift": "Send 5000 EUR to Mallory"}

    with tempfile.TemporaryDirectory() as scratch:
        storage = f"sqlite:///{os.path.join(scratch, 'agent.db')}"
        print("== the first agent: each run pauses before the transfer")
        async with make_agent(model, storage) as first:
            for thread, query in requests.items():
                result = await first.process(AgentProps(query, thread))
                print(f"  {thread}: {query!r} -> {result.metadata.status}")
                for call in result.metadata.pending_approvals:
                    print(f"    waiting: {call.call_id} {call.tool_name} {call.arguments}")
        print(f"  transfers made so far: {SENT or 'none'}")

        print("\n== a second agent on the same file decides")
        async with make_agent(model, storage) as second:
            waiting = await second.pending_runs()
            if not waiting:
                print("  nothing waits for approval (the model planned no transfer)")
            for paused in waiting:
                # A person decides here (a web form, a chat button); this example stands in
                # for them with a rule: up to 1000 EUR is fine.
                amounts = [p.arguments.get("amount", 0) for p in paused.pending
                           if isinstance(p.arguments, dict)]  # fmt: skip
                too_much = any(not isinstance(a, int) or a > 1000 for a in amounts)
                decision: Decision = Deny("above the 1000 EUR limit") if too_much else Approve()
                decisions = {p.call_id: decision for p in paused.pending}
                said = "approve" if isinstance(decision, Approve) else f"deny ({decision.reason})"
                print(f"  {paused.thread_id}: {paused.props.query!r} -> {said}")
                result = await second.resume(paused.thread_id, paused.trace_id, decisions)
                print(f"    {result.metadata.status}: {result.response.content}")
            print(f"  still waiting: {len(await second.pending_runs())}")
    print(f"\ntransfers made: {SENT or 'none'} (each at most once)")


if __name__ == "__main__":
    asyncio.run(main())
