"""Custom tools: sync, async and pydantic-typed functions, a class-based tool, ToolContext.

Prints the JSON Schema the model sees for each tool, then an agent uses all four.

    python examples/custom_tools.py [PROVIDER]      # e.g. openai:gpt-4o-mini (the default)

Without the provider's API key it says so and runs offline on a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from pes_agent import (
    AgentProps,
    LLMProvider,
    Tool,
    ToolContext,
    ToolSchema,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider


class Order(BaseModel):
    sku: str = Field(description="Stock-keeping unit, e.g. 'TEA-01'")
    quantity: int = Field(ge=1, le=100)
    gift_wrap: bool = False


@tool  # sync: runs in a worker thread, so it never blocks the event loop
def convert(celsius: float, unit: Literal["F", "K"] = "F") -> float:
    """Convert a Celsius temperature to Fahrenheit or Kelvin.

    Args:
        celsius: Degrees Celsius.
        unit: The unit to convert to.
    """
    return round(celsius * 9 / 5 + 32 if unit == "F" else celsius + 273.15, 1)


@tool(timeout_s=5)  # async, with its own timeout; `context` is injected, not shown to the model
async def forecast(
    city: Annotated[str, Field(description="City name, e.g. 'Oslo'")],
    context: ToolContext,
    days: Annotated[int, Field(ge=1, le=7, description="Days ahead")] = 3,
) -> dict[str, Any]:
    """Daily high temperatures (Celsius) for a city."""
    await asyncio.sleep(0.05)  # an HTTP call in real life
    return {"city": city, "highs": [11 + day for day in range(days)], "for_user": context.user_id}


@tool  # a pydantic model argument: the model sends an object, the function gets an Order
def place_order(order: Order, note: str | None = None) -> dict[str, Any]:
    """Order an item for delivery."""
    return {"order_id": "ORD-1", **order.model_dump(), "note": note}


class StockLevel:
    """A class-based tool: any object with a `schema` and an `async execute`."""

    schema = ToolSchema(
        name="stock_level",
        description="Units in stock for a SKU.",
        input_schema={"type": "object", "properties": {"sku": {"type": "string"}}},
    )

    def __init__(self, stock: dict[str, int]) -> None:
        self._stock = stock

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> int:
        return self._stock.get(arguments.get("sku", ""), 0)


# What the offline model answers when asked to plan (a real model writes the same shape).
PLAN = """{"intent": "Oslo's forecast in Fahrenheit; order 2 TEA-01 if in stock.",
 "plan": "1. Forecast Oslo and check the stock at once.\\n2. Convert.\\n3. Order.",
 "toolCalls": [
  {"callId": "fc", "toolName": "forecast", "arguments": {"city": "Oslo", "days": 2}},
  {"callId": "st", "toolName": "stock_level", "arguments": {"sku": "TEA-01"}},
  {"callId": "cv", "toolName": "convert", "arguments": {"celsius": "{step_1_result.highs[1]}"}},
  {"callId": "or", "toolName": "place_order", "dependsOn": ["st"],
   "arguments": {"order": {"sku": "TEA-01", "quantity": 2}, "note": "leave at the door"}}]}"""


async def main(provider: str) -> None:
    configure_logging("WARNING")
    tools: list[Tool] = [convert, forecast, place_order, StockLevel({"TEA-01": 12})]
    for schema in (t.schema for t in tools):
        print(f"{schema.name}: {schema.description}\n  {json.dumps(schema.input_schema)}")
    model: str | LLMProvider = provider
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(provider.split(":")[0])
    if key and not os.environ.get(key):
        print(f"\n[offline] {key} is not set: using a scripted model instead of {provider}")
        model = ScriptedProvider([PLAN, "Tomorrow Oslo reaches 53.6 °F; 2 × TEA-01 ordered."])
    async with create_agent(provider=model, tools=tools) as agent:
        query = "Oslo's forecast for tomorrow in Fahrenheit, and order 2 TEA-01 if in stock."
        result = await agent.process(AgentProps(query, "tools-demo", user_id="ada"))
        log = await agent.observations.get_observations("tools-demo", types=["TOOL_EXECUTION"])
    for observation in log:
        content = observation.content
        print(f"  {content['toolName']}: {content['status']} -> {content['output']}")
    print(f"\n{result.response.content}\nstatus={result.metadata.status}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "openai:gpt-4o-mini"))
