"""The planning and synthesis prompts: what their system messages say, and that the runs of
an agent share one system message rather than each building (and holding) a copy."""

from __future__ import annotations

from pes_agent import AgentProps, create_agent, tool
from pes_agent.planning.plan import PlanningOutput
from pes_agent.planning.prompts import build_planning_messages, render_tools
from pes_agent.providers.base import PromptMessage
from pes_agent.retrieval.base import ScoredDocument
from pes_agent.retrieval.passages import PROMPT_MAX_CHARS, render_passages
from pes_agent.synthesis.prompts import build_synthesis_messages
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.threads.messages import ConversationMessage, MessageRole
from pes_agent.tools.base import Tool


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


def _planning(system_prompt: str, tools: list[Tool]) -> str:
    schemas = [t.schema for t in tools]
    messages = build_planning_messages(
        system_prompt=system_prompt, history=[], query="q", tools=schemas
    )
    assert messages[0].role == "system"
    return messages[0].content


def test_the_planning_system_message_holds_prompt_protocol_and_tools() -> None:
    content = _planning("Be brief.", [lookup, shout])
    assert content.startswith("Be brief.\n\n# How to answer\n")
    assert content.endswith("\n\n" + render_tools([lookup.schema, shout.schema]))
    assert "lookup(key" in content
    assert "shout(text" in content
    assert _planning("Be brief.", []).endswith(
        "# Tools\nNo tools are available: write the Intent line only."
    )


def test_equal_inputs_share_one_planning_system_message_and_others_do_not() -> None:
    def system(prompt: str, tools: list[Tool]) -> PromptMessage:
        schemas = [t.schema for t in tools]
        return build_planning_messages(system_prompt=prompt, history=[], query="q", tools=schemas)[
            0
        ]

    first = system("Be brief.", [lookup])
    assert system("Be brief.", [lookup]) is first
    other_prompt = system("Be thorough.", [lookup])
    other_tools = system("Be brief.", [lookup, shout])
    assert other_prompt is not first
    assert "Be thorough." in other_prompt.content
    assert other_tools is not first
    assert "shout(text" in other_tools.content
    assert "shout(" not in first.content


def test_equal_system_prompts_share_one_synthesis_system_message() -> None:
    def system(prompt: str) -> PromptMessage:
        return build_synthesis_messages(
            system_prompt=prompt, history=[], query="q", planning=PlanningOutput(), results=[]
        )[0]

    first = system("Be brief.")
    assert system("Be brief.") is first
    assert first.content.startswith("Be brief.\n\n# How to answer\n")
    other = system("Be thorough.")
    assert other is not first
    assert other.content.startswith("Be thorough.")


async def test_the_runs_of_an_agent_send_the_same_system_messages() -> None:
    plan = plan_lines(plan_call(1, "lookup", key="k"), intent="look")
    model = ScriptedProvider([plan, "Done."], repeat=True)
    agent = create_agent(provider=model, tools=[lookup], system_prompt="Be brief.")
    for thread in ("a", "b"):
        result = await agent.process(AgentProps("go", thread))
        assert result.metadata.status == "success"
    planning = [r.messages[0] for r in model.requests if r.phase == "planning"]
    synthesis = [r.messages[0] for r in model.requests if r.phase == "synthesis"]
    assert len(planning) == len(synthesis) == 2
    assert planning[0] is planning[1]
    assert synthesis[0] is synthesis[1]
    assert planning[0].content.startswith("Be brief.")
    # Each run's query is its own.
    assert [r.messages[-1].content for r in model.requests if r.phase == "planning"] == ["go", "go"]


def test_planning_messages_are_system_then_history_then_the_query_with_its_passages() -> None:
    """The history comes between the system message and the query, oldest first; retrieved
    passages go into the query's message, before it; with neither, two messages."""
    history = [
        ConversationMessage(thread_id="t", role=MessageRole.USER, content="hi"),
        ConversationMessage(thread_id="t", role=MessageRole.AI, content="hello"),
    ]
    passages = [ScoredDocument(id="d1", text="Paris is in France.", score=0.9)]
    messages = build_planning_messages(
        system_prompt="s", history=history, query="q", tools=[], passages=passages
    )
    assert [(m.role, m.content) for m in messages[1:3]] == [("user", "hi"), ("assistant", "hello")]
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[3].content == (
        render_passages(passages, max_chars=PROMPT_MAX_CHARS) + "\n\n# User query\nq"
    )
    assert "Paris is in France." in messages[3].content
    bare = build_planning_messages(system_prompt="s", history=[], query="q", tools=[])
    assert [(m.role, m.content) for m in bare[1:]] == [("user", "q")]
    assert bare[0] is messages[0]
