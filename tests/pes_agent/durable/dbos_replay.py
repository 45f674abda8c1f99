"""A DBOS worker in one process that runs a run, then makes DBOS replay it: `python -m ...
ENGINE_DB STORAGE WORKER_ID EFFECTS_FILE` (as `dbos_worker.py`), printing one JSON line of
what it saw.

The replay is DBOS's fork of the run's workflow from its first tool call: a new workflow
whose steps before that one answer from the run's record (the planning call, and the thread's
load kept with it), while the calls, the synthesis and the commit run again. Between the two,
the thread's system prompt is changed: a replay that read the thread again would synthesize
with it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from dbos import DBOS

from pes_agent import AgentProps, ThreadConfig, create_agent
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.testing import ScriptedProvider
from tests.pes_agent.durable.scripted import TOOLS, respond


async def main() -> None:
    engine_db, storage, worker_id = sys.argv[1], sys.argv[2], sys.argv[3]
    engine = DBOSEngine(engine_db, worker_id=worker_id, poll_interval_s=0.05)
    model = ScriptedProvider([respond], repeat=True)
    agent = create_agent(provider=model, tools=TOOLS, storage=storage, engine=engine)
    seen: dict[str, Any] = {}
    async with agent, engine.worker(agent):
        first = await agent.process(AgentProps("Take notes", "t1", trace_id="tr-r"))
        workflow_id = "pes-agent-run-tr-r"
        steps = await DBOS.list_workflow_steps_async(workflow_id, load_output=False)
        seen["steps"] = [step["function_name"] for step in steps]
        first_call = next(s["function_id"] for s in steps if "tool" in s["function_name"])
        await agent.state.set_thread_config("t1", ThreadConfig(system_prompt="Changed since."))
        before = len(model.requests)
        fork = await DBOS.fork_workflow_async(workflow_id, first_call)
        again = await fork.get_result()
        replayed = model.requests[before:]
        seen["statuses"] = [first.metadata.status, again.metadata.status]
        seen["answers"] = [first.response.content, again.response.content]
        seen["replayed_phases"] = [request.phase for request in replayed]
        seen["replayed_prompt"] = "\n".join(m.content for r in replayed for m in r.messages)
        messages = await agent.conversation.get_messages("t1")
        seen["messages"] = [m.content for m in messages]
    await engine.aclose()
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
