"""The API takes the thread ids the library takes, and its 400 for one it refuses names the
actual reason (the library's own sentence)."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

import pytest

from pes_agent import AgentCore
from pes_agent.threads.ids import thread_id_problem

from ..threads.test_ids import BAD_IDS
from .conftest import ClientFactory

#: Every kind the library refuses that a URL can carry (no URL holds a lone surrogate).
URL_BAD_IDS = {kind: bad for kind, bad in BAD_IDS.items() if kind != "lone-surrogate"}


@pytest.mark.parametrize(
    ("thread_id", "reason"), list(URL_BAD_IDS.values()), ids=list(URL_BAD_IDS.keys())
)
async def test_the_400_for_an_unusable_thread_id_names_the_reason(
    client_for: ClientFactory, agent: AgentCore, thread_id: str, reason: str
) -> None:
    """A run, a config and the approvals filter on a refused id answer 400 invalid_thread_id
    with the library's reason; nothing is stored."""
    client = client_for("admin-token")
    answers = [await client.get("/v1/approvals", params={"thread_id": thread_id})]
    if thread_id:  # an empty path segment names no thread route at all (404)
        path = quote(thread_id, safe="")
        answers += [
            await client.post(f"/v1/threads/{path}/runs", json={"query": "hello"}),
            await client.put(f"/v1/threads/{path}/config", json={}),
        ]
    for answer in answers:
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_thread_id"
        assert error["message"] == thread_id_problem(thread_id)
        assert reason in error["message"]
    assert await agent.storage.list_threads() == []


@pytest.mark.parametrize(
    "thread_id",
    ["日本語\u3000スレッド", "family \U0001f468\u200d\U0001f469\u200d\U0001f467", "a;rm -rf x"],
    ids=["ideographic-space", "emoji-sequence", "shell-characters"],
)
async def test_an_id_the_library_takes_the_api_takes(
    client_for: ClientFactory, agent: AgentCore, thread_id: str
) -> None:
    """Printable ids of any script run over the API and list as the library lists them."""
    client = client_for("admin-token")
    ran = await client.post(f"/v1/threads/{quote(thread_id, safe='')}/runs", json={"query": "hi"})
    assert ran.status_code == 200, ran.text
    assert ran.json()["metadata"]["thread_id"] == thread_id
    assert (await client.get("/v1/threads")).json()["threads"] == [thread_id]
    assert await agent.state.list_threads() == [thread_id]


#: URLs an error message tells the client to call: `POST /v1/...`, up to a space or ")".
PRINTED_URL = re.compile(r"(GET|POST) (/v1/[^\s)]+)")


@pytest.mark.parametrize(
    "thread_id",
    ["a b?c=1#d", "100% sure", "日本語 é", "a;rm -rf x"],
    ids=["query", "percent", "non-ascii", "shell"],
)
async def test_the_urls_an_error_prints_name_the_thread_and_run_it_is_about(
    client_for: ClientFactory, agent: AgentCore, thread_id: str
) -> None:
    """The 409 for a thread with a paused run names the decisions and cancel URLs with each
    path segment percent-encoded: the decisions URL, sent as printed, resumes that very run
    on that thread, and the cancel URL names that run."""
    client = client_for("admin-token")
    runs = f"/v1/threads/{quote(thread_id, safe='')}/runs"
    paused = await client.post(runs, json={"query": "pay please"})
    trace_id = paused.json()["metadata"]["trace_id"]
    refused = await client.post(runs, json={"query": "hello"})
    assert refused.status_code == 409
    printed = {
        path.rsplit("/", 1)[-1]: (method, path)
        for method, path in PRINTED_URL.findall(refused.json()["error"]["message"])
    }
    assert set(printed) == {"decisions", "cancel", "approvals"}
    for _, path in printed.values():
        assert not any(c in path for c in " ?#")
        assert path.isascii()
    assert unquote(printed["cancel"][1]) == f"/v1/runs/{trace_id}/cancel"
    method, path = printed["decisions"]
    assert [unquote(part) for part in path.split("/")] == [
        "",
        "v1",
        "threads",
        thread_id,
        "runs",
        trace_id,
        "decisions",
    ]
    resumed = await client.request(method, path, json={"decisions": {"call_1": {"approve": True}}})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["metadata"]["thread_id"] == thread_id
    assert resumed.json()["metadata"]["trace_id"] == trace_id
    assert await agent.pending_runs(thread_id) == []
