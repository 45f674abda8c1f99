"""One rule for thread ids: the library refuses what the HTTP API refuses, with a `UsageError`
that says why, and data stored before the rule still reads back."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pes_agent import (
    THREAD_ID_MAX_LENGTH,
    AgentCore,
    AgentProps,
    AgentState,
    Approve,
    ConversationMessage,
    MessageRole,
    ThreadConfig,
    UsageError,
    check_thread_id,
    create_agent,
    thread_id_problem,
    tool,
)
from pes_agent.testing import ScriptedProvider

#: Each kind of id the rule refuses, with a piece of the reason it gives.
BAD_IDS = {
    "empty": ("", "non-empty"),
    "spaces": ("   ", "non-empty"),
    "newline": ("a\nb", "U+000A at position 1"),
    "nul": ("a\x00b", "U+0000"),
    "tab": ("\tx", "U+0009"),
    "delete": ("a\x7f", "U+007F"),
    "c1": ("a\x85b", "U+0085"),
    "line-separator": ("a\u2028b", "U+2028"),
    "bidi-override": ("abc\u202edcba", "U+202E"),
    "lone-surrogate": ("a\ud800", "lone surrogate U+D800"),
    "too-long": ("x" * (THREAD_ID_MAX_LENGTH + 1), "201 characters long; use at most 200"),
    "reserved": ("pes-agent-server:worker:w", "may not start with 'pes-agent-server:'"),
}
BAD = pytest.mark.parametrize(
    ("thread_id", "reason"), list(BAD_IDS.values()), ids=list(BAD_IDS.keys())
)


@BAD
def test_the_rule_names_what_is_wrong(thread_id: str, reason: str) -> None:
    """Blank, control characters, lone surrogates, over 200 characters and the reserved prefix
    are each refused with a sentence naming the problem; `check_thread_id` raises it."""
    problem = thread_id_problem(thread_id)
    assert problem is not None
    assert reason in problem
    with pytest.raises(UsageError) as raised:
        check_thread_id(thread_id)
    assert str(raised.value) == problem


@pytest.mark.parametrize(
    "thread_id",
    [
        "thread-1",
        "x" * THREAD_ID_MAX_LENGTH,
        " padded ",
        "user/42",
        "日本語\u3000スレッド",  # an ideographic space is a space, not a control character
        "family \U0001f468\u200d\U0001f469\u200d\U0001f467",  # emoji joined by U+200D
        "a;rm -rf x",
        "pes-agent-server",  # the prefix is the whole "pes-agent-server:"
    ],
)
def test_the_rule_accepts_printable_ids_of_any_script(thread_id: str) -> None:
    """Ids up to 200 characters of printable text in any script (emoji sequences too) pass."""
    assert thread_id_problem(thread_id) is None
    assert check_thread_id(thread_id) == thread_id


def test_a_thread_id_that_is_not_a_string_is_refused() -> None:
    """A number is no thread id; the message says what to pass."""
    with pytest.raises(UsageError, match=r"must be a string, e\.g\. 'thread-1'; got int"):
        check_thread_id(7)


@BAD
def test_agent_props_raises_a_usage_error_positionally_or_by_keyword(
    thread_id: str, reason: str
) -> None:
    """`AgentProps` refuses the id with a `UsageError` (not pydantic's ValidationError),
    however it is passed."""
    with pytest.raises(UsageError, match=re.escape(reason)):
        AgentProps("q", thread_id)
    with pytest.raises(UsageError, match=re.escape(reason)):
        AgentProps(query="q", thread_id=thread_id)


def test_agent_props_without_a_thread_id_says_how_to_pass_one() -> None:
    """Forgetting the thread id is a `UsageError` showing the call."""
    with pytest.raises(UsageError, match=r'AgentProps\("your question", "thread-1"\)'):
        AgentProps("q")


@pytest.fixture
def agent() -> AgentCore:
    return create_agent(provider=ScriptedProvider([]))


@BAD
async def test_every_library_entry_point_refuses_the_id_and_stores_nothing(
    agent: AgentCore, thread_id: str, reason: str
) -> None:
    """process (props validated from data), resume, pending_runs, cancel_pending, the state,
    conversation and observation APIs all raise the same `UsageError`; nothing is stored."""
    props = AgentProps.model_validate({"query": "q", "thread_id": thread_id})
    message = ConversationMessage(thread_id=thread_id, role=MessageRole.USER, content="hi")
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: agent.process(props),
        lambda: agent.resume(thread_id, "trace-1", {"call_1": Approve()}),
        lambda: agent.pending_runs(thread_id),
        lambda: agent.cancel_pending(thread_id),
        lambda: agent.state.get_thread_config(thread_id),
        lambda: agent.state.set_thread_config(thread_id, ThreadConfig()),
        lambda: agent.state.get_agent_state(thread_id),
        lambda: agent.state.set_agent_state(thread_id, AgentState(data={"a": 1})),
        lambda: agent.state.load_context(thread_id),
        lambda: agent.state.delete_thread(thread_id),
        lambda: agent.conversation.add_messages(thread_id, [message]),
        lambda: agent.conversation.get_messages(thread_id),
        lambda: agent.observations.get_observations(thread_id),
    ]
    async with agent:
        for make_call in calls:
            with pytest.raises(UsageError, match=re.escape(reason)):
                await make_call()
        assert await agent.storage.list_threads() == []


async def test_a_run_paused_under_an_id_refused_now_still_lists(tmp_path: Path) -> None:
    """A paused run stored by an older version under an id the rule now refuses reads back:
    `pending_runs()` lists it with the others instead of failing."""

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    plan = json.dumps(
        {
            "intent": "pay",
            "plan": "1. pay",
            "toolCalls": [{"callId": "c1", "toolName": "pay", "arguments": {"amount": 5}}],
        }
    )
    path = tmp_path / "agent.db"
    async with create_agent(
        provider=ScriptedProvider([plan, plan]), tools=[pay], storage=f"sqlite:///{path}"
    ) as agent:
        old = await agent.process(AgentProps("pay", "old"))
        await agent.process(AgentProps("pay", "new"))
    assert old.metadata.status == "awaiting_approval"
    # What an older pes-agent, without the rule, could have written.
    with sqlite3.connect(path) as conn:
        (body,) = conn.execute("SELECT body FROM paused_runs WHERE thread_id = 'old'").fetchone()
        stored = json.loads(body)
        stored["thread_id"] = stored["props"]["thread_id"] = "old\nline"
        conn.execute(
            "UPDATE paused_runs SET thread_id = ?, body = ? WHERE thread_id = 'old'",
            ("old\nline", json.dumps(stored)),
        )
    conn.close()
    async with create_agent(provider=ScriptedProvider([]), storage=f"sqlite:///{path}") as agent:
        listed = {run.thread_id: run for run in await agent.pending_runs()}
    assert set(listed) == {"old\nline", "new"}
    assert listed["old\nline"].props.thread_id == "old\nline"
