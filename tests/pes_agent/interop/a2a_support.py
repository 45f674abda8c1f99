"""Real uvicorn servers on 127.0.0.1 serving agents over A2A, and a2a-sdk clients for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory

from pes_agent import AgentCore
from pes_agent.server import create_app

from ...helpers import free_port


@asynccontextmanager
async def serving(agent: AgentCore, **options: Any) -> AsyncIterator[str]:
    """`create_app(agent, **options)` served by uvicorn on a free local port: its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(agent, **options), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def a2a_client(
    base_url: str, token: str | None, *, streaming: bool = False, polling: bool = False
) -> AsyncIterator[Client]:
    """a2a-sdk's client for the agent at `base_url`, built from its card, with `token`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()
