"""The agent as an MCP server, through the `mcp` SDK's own client connected in process.

The transports (stdio, streamable HTTP) and the MCP Inspector are in test_server_transports.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp_types import INVALID_PARAMS, CallToolResult

from pes_agent import Approve, tool
from pes_agent.core import AgentCore
from pes_agent.mcp import AskResult, create_server, serve_async
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.threads.reserved import RESERVED_PREFIX

from .servers.agent_server import echo_model

AgentFactory = Callable[..., AgentCore]


@asynccontextmanager
async def connected(agent: AgentCore) -> AsyncIterator[Client]:
    """The SDK's client, connected in process to the server of `agent`."""
    async with Client(create_server(agent), raise_exceptions=True) as client:
        yield client


def answer_of(result: CallToolResult) -> AskResult:
    """The structured result of a successful `ask`, checked against its text."""
    assert result.is_error is False, result.content
    assert result.structured_content is not None
    text = result.content[0]
    assert text.type == "text"
    assert json.loads(text.text) == result.structured_content
    return AskResult.model_validate(result.structured_content)


def error_text(result: CallToolResult) -> str:
    """The message of a tool error."""
    assert result.is_error is True
    assert result.structured_content is None
    text = result.content[0]
    assert text.type == "text"
    return text.text


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (the tests' gated tool; it deletes nothing)."""
    return f"deleted {path}"


def gated_model() -> ScriptedProvider:
    """Plans one call of `delete_file`, then answers."""

    def respond(request: LLMRequest) -> str:
        if request.phase == "planning":
            return plan_lines(plan_call(1, "delete_file", path="notes.txt"), intent="tidy up")
        return "notes.txt is gone."

    return ScriptedProvider([respond], repeat=True)


async def test_lists_ask_with_its_input_and_output_schemas(build_agent: AgentFactory) -> None:
    """`tools/list` shows one tool, ask: query required, thread_id optional, no other key."""
    async with connected(build_agent(provider=echo_model())) as client:
        listed = await client.list_tools()
    [ask] = listed.tools
    assert ask.name == "ask"
    schema = ask.input_schema
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"]["type"] == "string"
    assert {"type": "string"} in schema["properties"]["thread_id"]["anyOf"]
    assert schema["additionalProperties"] is False
    assert ask.output_schema is not None
    assert set(ask.output_schema["required"]) == {"answer", "status", "thread_id", "trace_id"}


async def test_ask_without_thread_starts_a_new_one_each_time(build_agent: AgentFactory) -> None:
    """Each ask without thread_id gets a fresh thread id back, and no history."""
    async with connected(build_agent(provider=echo_model())) as client:
        first = answer_of(await client.call_tool("ask", {"query": "hello"}))
        second = answer_of(await client.call_tool("ask", {"query": "hi again"}))
    assert first.status == "success"
    assert first.answer == "heard: hello"
    assert second.answer == "heard: hi again"
    assert first.thread_id != second.thread_id
    assert first.next_step is None


async def test_two_asks_on_a_thread_share_its_history(build_agent: AgentFactory) -> None:
    """The second ask on the returned thread id is planned with the first turn."""
    async with connected(build_agent(provider=echo_model())) as client:
        first = answer_of(await client.call_tool("ask", {"query": "my name is Ada"}))
        second = answer_of(
            await client.call_tool(
                "ask", {"query": "what is my name?", "thread_id": first.thread_id}
            )
        )
    assert second.thread_id == first.thread_id
    assert second.answer == "heard: my name is Ada | what is my name?"
    assert second.trace_id != first.trace_id


async def test_a_given_thread_id_is_used_as_is(build_agent: AgentFactory) -> None:
    """An ask on a thread id the client chose runs on that thread."""
    agent = build_agent(provider=echo_model())
    async with connected(agent) as client:
        result = answer_of(await client.call_tool("ask", {"query": "q", "thread_id": "team/42"}))
    assert result.thread_id == "team/42"
    assert [m.content for m in await agent.conversation.get_messages("team/42")] == [
        "q",
        "heard: q",
    ]


async def test_thread_histories_are_resources(build_agent: AgentFactory) -> None:
    """The template is listed, each thread is a resource, and reading one gives its turns."""
    async with connected(build_agent(provider=echo_model())) as client:
        first = answer_of(await client.call_tool("ask", {"query": "one", "thread_id": "a b/c"}))
        answer_of(await client.call_tool("ask", {"query": "two", "thread_id": first.thread_id}))
        answer_of(await client.call_tool("ask", {"query": "elsewhere"}))
        templates = await client.list_resource_templates()
        listed = await client.list_resources()
        uri = next(r.uri for r in listed.resources if r.name == "a b/c")
        read = await client.read_resource(uri)
    [template] = templates.resource_templates
    assert template.uri_template == "pes-agent://threads/{thread_id}"
    assert len(listed.resources) == 2
    assert uri == "pes-agent://threads/a%20b%2Fc"
    [contents] = read.contents
    assert contents.mime_type == "application/json"
    history = json.loads(contents.text)  # type: ignore[union-attr]
    assert history["thread_id"] == "a b/c"
    assert [(m["role"], m["content"]) for m in history["messages"]] == [
        ("USER", "one"),
        ("AI", "heard: one"),
        ("USER", "two"),
        ("AI", "heard: one | two"),
    ]


async def test_resources_list_in_pages(build_agent: AgentFactory) -> None:
    """Past a hundred threads, resources/list pages with a cursor, and every thread shows."""
    agent = build_agent(provider=echo_model())
    from pes_agent.threads.messages import ConversationMessage, MessageRole

    for number in range(105):
        thread_id = f"t{number:03}"
        message = ConversationMessage(thread_id=thread_id, role=MessageRole.USER, content="x")
        await agent.storage.add_messages(thread_id, [message])
    async with connected(agent) as client:
        first = await client.list_resources()
        assert first.next_cursor is not None
        rest = await client.list_resources(cursor=first.next_cursor)
    assert len(first.resources) == 100
    assert rest.next_cursor is None
    assert [r.name for r in [*first.resources, *rest.resources]] == [f"t{n:03}" for n in range(105)]


@pytest.mark.parametrize(
    "uri",
    [
        "pes-agent://threads/nobody",
        "pes-agent://elsewhere/x",
        f"pes-agent://threads/{RESERVED_PREFIX}x",
    ],
)
async def test_reading_a_thread_that_is_not_there_is_a_protocol_error(
    build_agent: AgentFactory, uri: str
) -> None:
    """An unknown or unusable thread is an invalid-params error naming the template."""
    async with connected(build_agent(provider=echo_model())) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource(uri)
    assert caught.value.code == INVALID_PARAMS


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "query: Field required"),
        ({"query": 42}, "query: Input should be a valid string"),
        ({"query": ""}, "query: String should have at least 1 character"),
        ({"query": "q", "thread": "t"}, "thread: Extra inputs are not permitted"),
        ({"query": "q", "thread_id": 7}, "thread_id: Input should be a valid string"),
    ],
)
async def test_a_bad_argument_is_a_tool_error(
    build_agent: AgentFactory, arguments: dict[str, Any], expected: str
) -> None:
    """Arguments ask does not take are a tool error saying which and how, and no run starts."""
    model = echo_model()
    async with connected(build_agent(provider=model)) as client:
        message = error_text(await client.call_tool("ask", arguments))
        answer_of(await client.call_tool("ask", {"query": "still serving"}))
    assert expected in message
    assert "ask takes query: str" in message
    assert model.calls == 2  # the good ask's planning and synthesis only


async def test_an_unusable_thread_id_is_a_tool_error(build_agent: AgentFactory) -> None:
    """A thread id the library refuses (reserved prefix) is a tool error with the rule."""
    async with connected(build_agent(provider=echo_model())) as client:
        message = error_text(
            await client.call_tool("ask", {"query": "q", "thread_id": f"{RESERVED_PREFIX}x"})
        )
    assert "may not start with" in message


async def test_an_unknown_tool_is_a_tool_error(build_agent: AgentFactory) -> None:
    """Calling a tool the server lacks is a tool error naming the one it has."""
    async with connected(build_agent(provider=echo_model())) as client:
        message = error_text(await client.call_tool("run", {"query": "q"}))
    assert "one tool, ask" in message


async def test_a_failed_run_is_a_tool_error_naming_thread_and_trace(
    build_agent: AgentFactory,
) -> None:
    """A run that ends in error (its model fails) is a tool error; the next ask still runs."""

    def respond(request: LLMRequest) -> str:
        if "fail" in request.messages[-1].content:
            raise RuntimeError("the model is down")
        if request.phase == "planning":
            return plan_lines(intent="answer")
        return "fine"

    model = ScriptedProvider([respond], repeat=True)
    async with connected(build_agent(provider=model)) as client:
        message = error_text(await client.call_tool("ask", {"query": "fail", "thread_id": "t1"}))
        after = answer_of(await client.call_tool("ask", {"query": "ok", "thread_id": "t1"}))
    assert message.startswith("the run failed: ")
    assert "the model is down" in message
    assert "thread_id t1, trace_id " in message
    assert after.answer == "fine"


async def test_an_unexpected_failure_is_a_tool_error_and_the_server_goes_on(
    build_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug below the adapter (here, `process` raising) is reported as a tool error."""
    agent = build_agent(provider=echo_model())
    process = agent.process
    calls = 0

    async def flaky(props: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("boom")
        return await process(props)

    monkeypatch.setattr(agent, "process", flaky)
    async with connected(agent) as client:
        message = error_text(await client.call_tool("ask", {"query": "q"}))
        answer_of(await client.call_tool("ask", {"query": "again"}))
    assert message == "the agent failed unexpectedly (KeyError: 'boom')"


async def test_a_paused_run_says_how_to_continue(build_agent: AgentFactory) -> None:
    """A run waiting for approval answers awaiting_approval, its calls and the next step;
    the thread refuses new queries until a person resumes the run, then takes them again."""
    agent = build_agent(provider=gated_model(), tools=[delete_file])
    async with connected(agent) as client:
        paused = answer_of(await client.call_tool("ask", {"query": "tidy", "thread_id": "t"}))
        refused = error_text(await client.call_tool("ask", {"query": "more", "thread_id": "t"}))
        [pending] = paused.pending_approvals
        await agent.resume("t", paused.trace_id, {pending.call_id: Approve()})
        after = answer_of(await client.call_tool("ask", {"query": "again", "thread_id": "t"}))
    assert paused.status == "awaiting_approval"
    assert (pending.tool_name, pending.arguments) == ("delete_file", {"path": "notes.txt"})
    assert paused.next_step is not None
    assert "pes-agent approve t" in paused.next_step
    assert "delete_file (call_1)" in paused.next_step
    assert "has a run waiting for approval" in refused
    assert after.status == "awaiting_approval"  # the new query's plan is gated again


async def test_serve_async_refuses_an_unknown_transport(build_agent: AgentFactory) -> None:
    """A transport other than stdio and streamable-http is a usage error saying which exist."""
    from pes_agent.errors import UsageError

    agent = build_agent(provider=echo_model())
    with pytest.raises(UsageError, match='"stdio" or "streamable-http"'):
        await serve_async(agent, transport="sse")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="port must be"):
        await serve_async(agent, transport="streamable-http", port=70000)


async def test_serve_async_refuses_tokens_scoped_to_users(build_agent: AgentFactory) -> None:
    """Tokens mapped to users (the HTTP API's scoping) are refused, saying what to pass."""
    from pes_agent.errors import UsageError

    agent = build_agent(provider=echo_model())
    with pytest.raises(UsageError, match=r"unscoped tokens only, a list: tokens=\[token\]"):
        await serve_async(
            agent,
            transport="streamable-http",
            tokens={"tok": "alice"},  # type: ignore[arg-type]
        )
