"""A pes-agent agent served over MCP by `pes_agent.mcp.serve`, for the MCP server tests.

`python agent_server.py PORT` serves it over streamable HTTP on 127.0.0.1:PORT at /mcp. Its
scripted model answers with the user turns its planning call was shown, so a test sees over
the wire whether a second `ask` on a thread was given the first.
"""

from __future__ import annotations

import sys
from typing import Any

from pes_agent import create_agent
from pes_agent.core import AgentCore
from pes_agent.mcp import serve
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_lines


def echo_model() -> ScriptedProvider:
    """A model whose answer is `heard: Q1 | Q2 | ...`, the user turns it planned with."""
    shown: dict[str, list[str]] = {}

    def respond(request: LLMRequest) -> str:
        if request.phase == "planning":
            turns = [message.content for message in request.messages if message.role == "user"]
            shown[request.trace_id] = turns
            return plan_lines(intent="answer from the conversation")
        return "heard: " + " | ".join(shown.pop(request.trace_id, []))

    return ScriptedProvider([respond], repeat=True, name="echo", model="echo")


def echo_agent(**options: Any) -> AgentCore:
    """An agent on the echo model (`create_agent`'s other options as given)."""
    return create_agent(provider=echo_model(), **options)


if __name__ == "__main__":
    serve(echo_agent(), transport="streamable-http", port=int(sys.argv[1]))
