"""OpenTelemetry spans of a run, printed by the console exporter — offline, on a scripted model.

`pes_agent.otel.instrument(agent, tracer_provider)` turns each run into a trace: an
`invoke_agent` span, a `chat {model}` span per model call and an `execute_tool {tool}` span per
tool call, with the GenAI semantic-convention attributes. The two weather lookups run side by
side, so their spans overlap; the summary waits for both. Needs `pip install
'pes-agent[otel]'`; to send the spans to Jaeger instead, see the README's Tracing section.

    python examples/tracing.py
"""

from __future__ import annotations

import asyncio
import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pes_agent import AgentProps, create_agent, tool
from pes_agent.otel import instrument
from pes_agent.testing import ScriptedProvider

TEMPERATURES = {"Oslo": 4, "Lisbon": 19}


@tool
async def weather(city: str) -> dict[str, object]:
    """Today's temperature in a city, in °C."""
    await asyncio.sleep(0.2)  # a slow API: the two lookups overlap
    return {"city": city, "celsius": TEMPERATURES[city]}


@tool
def warmer(a: dict[str, object], b: dict[str, object]) -> str:
    """Say which of two weather reports is warmer."""
    hot, cold = (a, b) if int(str(a["celsius"])) > int(str(b["celsius"])) else (b, a)
    return f"{hot['city']} is warmer than {cold['city']}"


PLAN = json.dumps(
    {
        "intent": "Compare the weather in Oslo and Lisbon.",
        "plan": "1. Look up both cities. 2. Compare.",
        "toolCalls": [
            {"callId": "oslo", "toolName": "weather", "arguments": {"city": "Oslo"}},
            {"callId": "lisbon", "toolName": "weather", "arguments": {"city": "Lisbon"}},
            {
                "callId": "compare",
                "toolName": "warmer",
                "arguments": {"a": "{step_1_result}", "b": "{step_2_result}"},
            },
        ],
    }
)


def timeline(spans: list[ReadableSpan]) -> None:
    """Print the spans as a timeline: offset from the run's start, duration, name."""
    spans = sorted(spans, key=lambda s: s.start_time or 0)
    origin = spans[0].start_time or 0
    print("\n  start ms    took ms  span")
    for span in spans:
        start, end = (span.start_time or 0) - origin, (span.end_time or 0) - (span.start_time or 0)
        indent = "  " if span.parent is not None else ""
        print(f"{start / 1e6:>10.1f} {end / 1e6:>10.1f}  {indent}{span.name}")


async def main() -> None:
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "tracing-demo"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    kept = InMemorySpanExporter()  # for the timeline below
    tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
    model = ScriptedProvider([PLAN, "Lisbon (19 °C) is warmer than Oslo (4 °C)."])
    async with create_agent(provider=model, tools=[weather, warmer]) as agent:
        with instrument(agent, tracer_provider, capture_content=True, agent_name="weather"):
            response = await agent.process(AgentProps("Where is it warmer?", "demo"))
    timeline(list(kept.get_finished_spans()))
    tracer_provider.shutdown()
    print(f"\nanswer: {response.response.content}")


if __name__ == "__main__":
    asyncio.run(main())
