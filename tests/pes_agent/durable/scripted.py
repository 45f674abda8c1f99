"""The worker processes' agent parts, shared by every engine's worker script: tools that
append what they do to the effects file (argv[4]: a line per side effect, flushed at once,
so a test can count how often each happened across worker deaths) and a scripted model that
plans `PLAN` (or another of `PLANS`, named by PES_TEST_PLAN) and answers "All done."."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from pes_agent import LLMRequest, PendingApproval, ToolContext, tool
from pes_agent.core import AgentCore
from pes_agent.testing import plan_call, plan_lines

PLAN = plan_lines(
    plan_call(1, "note", text="a"),
    plan_call(2, "slow_note", text="b", seconds=float(os.environ.get("PES_TEST_SLOW_S", "2"))),
    plan_call(3, "note", text="{step_1_result}-c"),
    plan_call(4, "note", text="{step_2_result}-d"),
    intent="notes, one of them slow",
)
# PES_TEST_PLAN=pay: a plan whose payments wait for approval (the tool `pay` is gated).
PAY_PLAN = plan_lines(
    plan_call(1, "note", text="x"),
    plan_call(2, "pay", amount=5),
    plan_call(3, "pay", amount=7),
    intent="two payments",
)
# PES_TEST_PLAN=state: a call that changes the run's state (saved with the turn: implicit).
STATE_PLAN = plan_lines(
    plan_call(1, "remember", key="colour", value="green"),
    plan_call(2, "note", text="y"),
    intent="remember a colour",
)
# PES_TEST_PLAN=fan: five independent calls finishing in the reverse of their plan order,
# then one that needs them all.
FAN_PLAN = plan_lines(
    *(plan_call(n, "slow_note", text=f"f{n}", seconds=0.1 * (6 - n)) for n in range(1, 6)),
    plan_call(6, "note", text="{step_1_result}{step_3_result}{step_5_result}"),
    intent="fan out, fan in",
)
# PES_TEST_PLAN=ask: calls an `approval_handler` decides (`ask_handler`), one slow, then one
# that needs the slow one's result.
ASK_PLAN = plan_lines(
    plan_call(1, "slow_note", text="b", seconds=float(os.environ.get("PES_TEST_SLOW_S", "2"))),
    plan_call(2, "pay", amount=7),
    plan_call(3, "note", text="{step_1_result}-after"),
    intent="a slow note and a payment, each approved or not by the handler",
)
PLANS = {"pay": PAY_PLAN, "state": STATE_PLAN, "fan": FAN_PLAN, "ask": ASK_PLAN}
# PES_TEST_ANSWER: the synthesis's answer (a long one streams many tokens).
ANSWER = os.environ.get("PES_TEST_ANSWER", "All done.")


def effects_file() -> Path:
    return Path(sys.argv[4])


def log_effect(line: str) -> None:
    with effects_file().open("a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


@tool
async def note(text: str) -> str:
    """Write a note; returns it in capitals."""
    log_effect(f"note {text}")
    return text.upper()


@tool
async def slow_note(text: str, seconds: float) -> str:
    """Write a note after `seconds`."""
    log_effect(f"slow-start {text}")
    await asyncio.sleep(seconds)
    log_effect(f"slow-done {text}")
    return text.upper()


@tool
async def pay(amount: int) -> str:
    """Pay `amount` euros."""
    log_effect(f"pay {amount}")
    return f"paid {amount}"


@tool
async def remember(key: str, value: str, context: ToolContext) -> str:
    """Keep `value` under `key` in the thread's state."""
    assert context.state is not None
    context.state.data[key] = value
    log_effect(f"remember {key}")
    return "kept"


TOOLS = [note, slow_note, pay, remember]


async def ask_handler(pending: PendingApproval) -> bool:
    """An in-run approval handler: notes that it was asked, then approves the tools named in
    PES_TEST_APPROVE (comma-separated), so two workers may answer differently."""
    log_effect(f"asked {pending.tool_name}")
    return pending.tool_name in os.environ.get("PES_TEST_APPROVE", "").split(",")


def approval_options() -> dict[str, Any]:
    """The workers' approval rules: `pay` pauses the run; with PES_TEST_APPROVE set, the
    handler decides `pay` and `slow_note` in the run instead."""
    if "PES_TEST_APPROVE" not in os.environ:
        return {"require_approval": ["pay"]}
    return {"require_approval": ["pay", "slow_note"], "approval_handler": ask_handler}


def respond(request: LLMRequest) -> str:
    if request.phase != "planning":
        return ANSWER
    return PLANS.get(os.environ.get("PES_TEST_PLAN", ""), PLAN)


def trace_to_file(agent: AgentCore, path: str) -> None:
    """Trace the agent's runs (`pes_agent.otel`), each span a JSON line in `path` as it ends
    (written and flushed at once: a SIGKILL loses only the spans still open)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from pes_agent.otel import instrument

    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open as long as the process
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
        )
    )
    instrument(agent, tracer_provider)
