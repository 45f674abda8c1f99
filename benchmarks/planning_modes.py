"""Planning modes: how many repair round-trips each needs on recorded-looking planning replies.

The replies are data, one file per typical model mistake, in `tests/pes_agent/planning/replies/`:
prose around the JSON, code fences, trailing commas, OpenAI-shaped calls, arguments as strings,
missing fields, wrong call shapes, invalid JSON, bad placeholders, cycles, unknown tools, ...
Each file holds the reply as a model wrote it in text mode (`text`), what a schema-constrained
server returns for the same turn (`structured`, `submit_plan`; the fixed plan when absent) and
the plan a repair gets back (`fixed`, or `text_repair`).

Every run is a real `create_agent(...).process(...)` through the real `openai` and `anthropic`
SDKs against the loopback model server of the tests, so requests, the planner, the parser, the
repair round-trip and the executor are the library's own. What is simulated is the model: no
model is called, and the structured answers are hand-written stand-ins for what constrained
decoding would give (shape and syntax mistakes cannot occur there; bad placeholders, cycles,
repeated callIds, truncation, and free text inside OpenAI's string-encoded `arguments` can).

Modes (rows): `text`; `structured` on OpenAI (`json_schema`); `structured` on Anthropic (forced
`submit_plan`); `auto` on an OpenAI-compatible server that answers 400 to `response_format`
(it falls back once, then plans in text). Columns: replies, plans usable at once, repair
round-trips, runs still unusable after the repair (status error), partial runs (a call the
executor refused: an unknown tool, arguments that are not an object), and model calls.

    .venv/bin/python benchmarks/planning_modes.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from _table import print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pes_agent import AgentProps, ProviderConfig, RetryPolicy, create_agent, tool
from pes_agent.config import PlanningMode
from pes_agent.planning.structured import SUBMIT_PLAN
from tests.pes_agent.providers.model_server import Call, Fault, ModelServer, RecordedRequest, Reply

REPLIES = Path(__file__).resolve().parents[1] / "tests" / "pes_agent" / "planning" / "replies"
KEY = "sk-bench-0000000000000000"
# What the test server's "compatible" endpoint says when it does not take response_format.
REFUSAL = "Unrecognized request argument supplied: response_format"

Channel = Literal["text", "json_schema", "submit_plan"]

SIMULATED = (
    "Simulated: no model is called. 'text' replays each reply as recorded; the structured rows "
    "replay\nhand-written stand-ins for what a schema-constrained server returns for the same "
    "turn (see the\n'structured'/'submit_plan'/'note' fields of each file). Requests, planner, "
    "parser, repair and\nexecutor are real, through the real SDKs on the loopback server. A "
    "repair answers with the\ncase's fixed plan ('text_repair' where the model fails again)."
)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"18°C and sunny in {city}"


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12*7+5."""
    return "89" if expression.replace(" ", "") == "12*7+5" else "unsupported"


@tool
def search(query: str, recent: bool = False) -> str:
    """Search the news; recent=True for the last month only."""
    return f"{query}: a first headline; {query}: a second headline"


@tool
def summarize(text: str) -> str:
    """Summarise a text in one sentence."""
    return "In short: " + text[:60]


TOOLS = [get_weather, calculator, search, summarize]


@dataclass(frozen=True, slots=True)
class Mode:
    label: str
    provider: Literal["openai", "anthropic"]
    planning_mode: PlanningMode
    channel: Channel
    refuses_response_format: bool = False


MODES = (
    Mode("text", "openai", "text", "text"),
    Mode("structured: OpenAI json_schema", "openai", "structured", "json_schema"),
    Mode("structured: Anthropic submit_plan", "anthropic", "structured", "submit_plan"),
    Mode(
        "auto: server refuses json_schema", "openai", "auto", "text", refuses_response_format=True
    ),
)


@dataclass(slots=True)
class Tally:
    replies: int = 0
    usable_at_once: int = 0
    repairs: int = 0
    unusable: int = 0
    partial: int = 0
    model_calls: int = 0
    per_case: dict[str, int] = field(default_factory=dict)


def load_cases() -> dict[str, dict[str, Any]]:
    """Every recorded reply, by file name (without `.json`), in file order."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(REPLIES.glob("*.json"))}


def strict_form(plan: dict[str, Any] | str) -> str:
    """`plan` as a strict json_schema server returns it: every field present, unused ones null,
    each call's arguments a JSON string (text that is already a string stays as written)."""
    if isinstance(plan, str):
        return plan
    calls = []
    for call in plan.get("toolCalls", []):
        arguments = call.get("arguments", {})
        calls.append(
            {
                "callId": call["callId"],
                "toolName": call.get("toolName"),
                "instruction": call.get("instruction"),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "dependsOn": call.get("dependsOn", []),
            }
        )
    return json.dumps(
        {
            "title": plan.get("title", ""),
            "intent": plan.get("intent", ""),
            "plan": plan.get("plan", ""),
            "toolCalls": calls,
        }
    )


def planning_reply(channel: Channel, plan: dict[str, Any] | str) -> Reply:
    """The server's answer carrying `plan` in `channel`'s form."""
    if channel == "text":
        return Reply(plan if isinstance(plan, str) else json.dumps(plan))
    if channel == "json_schema":
        return Reply(strict_form(plan))
    # A forced tool's input as streamed; text that is not JSON is sent as it is.
    return Reply(tool_calls=(Call(SUBMIT_PLAN, plan if isinstance(plan, str) else dict(plan)),))


def is_repair(request: RecordedRequest) -> bool:
    """Whether the agent is asking for a repair: the last turn quotes the problems, as text
    (text, json_schema) or as the submit_plan call's tool result."""
    content = request.body["messages"][-1].get("content")
    if isinstance(content, str):
        return "could not be used" in content
    return any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content or ()
    )


class Script:
    """Answers one case's requests: the plan, a repair if asked, then whatever else (language
    steps, synthesis) with a short text; counts what it was asked."""

    def __init__(self, case: dict[str, Any], mode: Mode, *, refuse_first: bool) -> None:
        self.case = case
        self.mode = mode
        self.refuse_first = refuse_first
        self.calls = 0
        self.repairs = 0
        self.planned = False

    def _plan(self, key: str) -> dict[str, Any] | str:
        case = self.case
        value: dict[str, Any] | str = case.get(key, case["fixed"])
        return value

    def __call__(self, request: RecordedRequest) -> Reply | Fault:
        self.calls += 1
        channel = self.mode.channel
        if self.refuse_first:
            self.refuse_first = False
            return Fault(400, REFUSAL, echo_credentials=False)
        if not self.planned:
            self.planned = True
            key = {"text": "text", "json_schema": "structured", "submit_plan": "submit_plan"}
            return planning_reply(channel, self._plan(key[channel]))
        if is_repair(request):
            self.repairs += 1
            repaired = self.case.get("text_repair") if channel == "text" else None
            return planning_reply(channel, repaired or self.case["fixed"])
        return Reply("Done.")


async def measure(mode: Mode, cases: dict[str, dict[str, Any]]) -> Tally:
    """Replay every case through one agent in `mode` (one agent, so `auto` remembers)."""
    tally = Tally()
    async with ModelServer() as server:
        config = ProviderConfig(
            mode.provider, "bench-model", api_key=KEY, base_url=server.base_url_for(mode.provider)
        )
        async with create_agent(
            provider=config,
            tools=TOOLS,
            planning_mode=mode.planning_mode,
            retry_policy=RetryPolicy(initial_backoff_s=0, jitter_s=0),
        ) as agent:
            refuse = mode.refuses_response_format
            for name, case in cases.items():
                script = Script(case, mode, refuse_first=refuse)
                refuse = False  # a server refuses once; the agent must remember it
                server.default = script
                result = await agent.process(AgentProps(case["query"], f"case-{name}"))
                status = result.metadata.status
                tally.replies += 1
                tally.repairs += script.repairs
                tally.usable_at_once += script.repairs == 0 and status != "error"
                tally.unusable += status == "error"
                tally.partial += status == "partial"
                tally.model_calls += script.calls
                tally.per_case[name] = script.repairs if status != "error" else -1
    return tally


def repair_cell(value: int) -> str:
    return "failed" if value < 0 else str(value)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    # A refused option and unusable plans log warnings by design; the table says what happened.
    logging.getLogger("pes_agent").setLevel(logging.CRITICAL)

    cases = load_cases()
    tallies = {mode.label: await measure(mode, cases) for mode in MODES}
    if args.json:
        print(
            json.dumps(
                {
                    "cases": len(cases),
                    "note": SIMULATED,
                    "modes": {
                        label: {
                            "replies": t.replies,
                            "usable_at_once": t.usable_at_once,
                            "repairs": t.repairs,
                            "unusable": t.unusable,
                            "partial": t.partial,
                            "model_calls": t.model_calls,
                            "per_case": t.per_case,
                        }
                        for label, t in tallies.items()
                    },
                },
                indent=2,
            )
        )
        return

    print_table(
        f"Planning modes on {len(cases)} recorded-looking replies (model SIMULATED, see below)",
        [
            "mode",
            "replies",
            "usable at once",
            "repair round-trips",
            "unusable after repair",
            "partial runs",
            "model calls",
        ],
        [
            [label, t.replies, t.usable_at_once, t.repairs, t.unusable, t.partial, t.model_calls]
            for label, t in tallies.items()
        ],
    )
    labels = list(tallies)
    short = ["text", "json_schema", "submit_plan", "auto/refused"]
    print_table(
        "Repair round-trips per reply ('failed': still unusable after the repair)",
        ["reply", *short],
        [
            [name, *(repair_cell(tallies[label].per_case[name]) for label in labels)]
            for name in cases
        ],
    )
    print("\n" + SIMULATED)


if __name__ == "__main__":
    asyncio.run(main())
