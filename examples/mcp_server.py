"""The small MCP server that examples/mcp_tools.py uses: a shop's prices and stock.

Built with the official SDK's `MCPServer` (formerly FastMCP). The agent starts it over stdio
as `python examples/mcp_server.py --stdio`; run without `--stdio` it only says so.
"""

from __future__ import annotations

import sys

PRICES = {"widget": 2.5, "gadget": 12.0, "gizmo": 7.25}
STOCK = {"widget": 140, "gadget": 3, "gizmo": 0}


def main() -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("shop", log_level="WARNING")

    @server.tool()
    def unit_price(item: str) -> float:
        """The price of one item, in euros."""
        if item not in PRICES:
            raise ToolError(f"unknown item {item!r}; known: {', '.join(PRICES)}")
        return PRICES[item]

    @server.tool()
    def in_stock(item: str) -> int:
        """How many of an item are in stock."""
        return STOCK.get(item, 0)

    server.run()  # stdio: until the agent closes our stdin


if __name__ == "__main__":
    if "--stdio" in sys.argv:
        main()
    else:
        print("This is the MCP server of examples/mcp_tools.py; run that example instead.")
