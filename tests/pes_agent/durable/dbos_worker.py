"""A pes-agent worker process on DBOS, for the durable tests: `python -m ... ENGINE_DB STORAGE
WORKER_ID EFFECTS_FILE`.

Its agent is `scripted.py`'s: tools that append what they do to EFFECTS_FILE, a scripted
model (or, with PES_TEST_MODEL_URL, the OpenAI provider on that test model server, with its
own retries). With PES_TEST_CASSETTE that provider's calls are recorded to the cassette
(`RecordingProvider`); with PES_TEST_CASSETTE_MODE=replay too, the model answers from the
cassette alone (`ReplayProvider`, no server). It prints "ready" once DBOS has launched (and
taken over what an earlier life of WORKER_ID left), and exits 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from pes_agent import ProviderConfig, create_agent
from pes_agent.durable.dbos import DBOSEngine
from pes_agent.protocols import LLMProvider
from pes_agent.providers import create_provider
from pes_agent.testing import RecordingProvider, ReplayProvider, ScriptedProvider
from tests.pes_agent.durable.scripted import TOOLS, approval_options, respond, trace_to_file


def provider() -> LLMProvider | ProviderConfig:
    cassette = os.environ.get("PES_TEST_CASSETTE")
    if cassette is not None and os.environ.get("PES_TEST_CASSETTE_MODE") == "replay":
        return ReplayProvider(cassette)
    url = os.environ.get("PES_TEST_MODEL_URL")
    if url is None:
        return ScriptedProvider([respond], repeat=True)
    config = ProviderConfig("openai", "test-model", api_key="sk-test", base_url=url)
    if cassette is not None:
        return RecordingProvider(create_provider(config), cassette)
    return config


async def main() -> None:
    engine_db, storage, worker_id = sys.argv[1], sys.argv[2], sys.argv[3]
    engine = DBOSEngine(engine_db, worker_id=worker_id, poll_interval_s=0.05)
    agent = create_agent(
        provider=provider(),
        tools=TOOLS,
        storage=storage,
        engine=engine,
        # The test model server answers plans as text, as the scripted model writes them.
        planning_mode="text",
        **approval_options(),
    )
    spans = os.environ.get("PES_TEST_SPANS")
    if spans is not None:
        trace_to_file(agent, spans)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with agent, engine.worker(agent):
        print("ready", flush=True)
        await stop.wait()
    await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main())
