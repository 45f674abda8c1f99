"""Tools from an MCP server next to a local tool, in one plan — offline, on a scripted model.

`examples/mcp_server.py` (built with the official `mcp` SDK) runs as a subprocess over stdio;
`create_agent(tools=[order_total, shop])` lists its tools with their JSON schemas when the agent
opens (`async with`), so the planner sees them like local ones. The scripted plan asks the
server for a price and the stock, passes the price to the local `order_total` through a
`{step_1_result}` placeholder, then asks for an item the server does not know: that call comes
back as an error result naming the server. Leaving `async with` stops the server process.

    pip install 'pes-agent[mcp]'
    python examples/mcp_tools.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from pes_agent import AgentProps, ObservationType, create_agent, tool
from pes_agent.mcp import MCPServer
from pes_agent.testing import ScriptedProvider

SERVER = Path(__file__).with_name("mcp_server.py")

PLAN = {
    "title": "Price an order",
    "intent": "Work out what 40 widgets cost and whether they are in stock",
    "plan": "1. price 2. stock 3. total 4. a typo'd item",
    "toolCalls": [
        {"callId": "c1", "toolName": "unit_price", "arguments": {"item": "widget"}},
        {"callId": "c2", "toolName": "in_stock", "arguments": {"item": "widget"}},
        {
            "callId": "c3",
            "toolName": "order_total",
            "arguments": {"unit_price": "{step_1_result}", "quantity": 40},
        },
        {"callId": "c4", "toolName": "unit_price", "arguments": {"item": "widgit"}},
    ],
}
ANSWER = "40 widgets cost 105.00 euros with shipping, and 140 are in stock."


@tool
def order_total(unit_price: float, quantity: int) -> float:
    """The total of an order: price times quantity, plus 5 euros shipping below 200 euros."""
    subtotal = unit_price * quantity
    return round(subtotal + (5.0 if subtotal < 200 else 0.0), 2)


async def main() -> None:
    shop = MCPServer.stdio(sys.executable, str(SERVER), "--stdio", name="shop")
    model = ScriptedProvider([json.dumps(PLAN), ANSWER])
    async with create_agent(provider=model, tools=[order_total, shop]) as agent:
        print("tools:", ", ".join(agent.tools.names))
        result = await agent.process(AgentProps("What do 40 widgets cost?", "order-1"))
        for seen in await agent.observations.get_observations(
            "order-1", types=[ObservationType.TOOL_EXECUTION]
        ):
            call = seen.content
            shown = call["output"] if call["status"] == "success" else call["error"]
            print(f"  {call['toolName']:<12} {call['status']:<8} {shown}")
    print(f"{result.metadata.status}: {result.response.content}")


if __name__ == "__main__":
    asyncio.run(main())
