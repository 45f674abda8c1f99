"""What the API's routes share: the agent, its owner records, the runs of this process and the
other workers, kept as `app.state.api` (an `ApiState`), and the rules every route applies the
same way (who may touch a thread, whether a request may choose the provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request

from pes_agent.core import AgentCore
from pes_agent.durable.effects import EngineRun
from pes_agent.server.auth import Caller, OwnerStore, TokenTable
from pes_agent.server.errors import ApiError
from pes_agent.server.inputs import read_body
from pes_agent.server.runs import RunFeeds, RunRegistry
from pes_agent.server.workers import SharedRun, WorkerDirectory

__all__ = ["ApiEndpoint", "ApiState"]

M = TypeVar("M", bound=BaseModel)


class ApiEndpoint(HTTPEndpoint):
    """An API path: a method per HTTP method it takes (`get`, `post`…), each given the request
    (its `request.user` the `Caller`, once the route's bearer-token check let it in)."""

    @property
    def api(self) -> ApiState:
        """The `ApiState` of the app serving this request."""
        api: ApiState = self.scope["app"].state.api
        return api


class ApiState:
    """The parts the routes share, and the checks they all make the same way."""

    def __init__(
        self,
        agent: AgentCore,
        tokens: TokenTable,
        *,
        max_body_bytes: int,
        allow_provider_config: bool,
        registry: RunRegistry,
        workers: WorkerDirectory,
    ) -> None:
        self.agent = agent
        self.tokens = tokens
        # Owner records are bookkeeping: saved without STATE_UPDATE observations.
        self.owners = OwnerStore(agent.storage)
        self.max_body_bytes = max_body_bytes
        self.allow_provider_config = allow_provider_config
        self.runs = registry
        self.feeds = RunFeeds(agent.observations, agent.stream)
        self.workers = workers
        self._background: set[asyncio.Task[Any]] = set()

    async def body(
        self,
        request: Request,
        model: type[M],
        *,
        extra: Literal["forbid", "allow", "ignore"] = "forbid",
    ) -> M:
        """The JSON body as a `model`, at most `max_body_bytes` long (`read_body`)."""
        return await read_body(request, model, max_bytes=self.max_body_bytes, extra=extra)

    def run_headers(self, trace_id: str) -> dict[str, str]:
        """The headers naming a run and the worker answering for it."""
        return {"X-Trace-Id": trace_id, "X-Worker-Id": self.workers.worker_id}

    async def authorize(self, caller: Caller, thread_id: str, *, create: bool = False) -> None:
        """Let a scoped caller through to its own threads only (unknown ones look absent)."""
        if caller.user_id is None:
            return
        owner = await self.owners.owner(thread_id)
        if owner == caller.user_id:
            return
        if (
            owner is None
            and create
            and not await self._exists(thread_id)
            and await self.owners.claim(thread_id, caller.user_id) == caller.user_id
        ):
            return
        raise ApiError(404, "thread_not_found", "no such thread")

    async def owns(self, caller: Caller, thread_id: str) -> bool:
        """Whether `thread_id` is the scoped `caller`'s."""
        return await self.owners.owner(thread_id) == caller.user_id

    async def _exists(self, thread_id: str) -> bool:
        """Whether anything of the thread is stored: a run that saved no turn yet (paused,
        failed, cancelled) leaves only observations, and makes the thread someone's too."""
        state = self.agent.state
        return (
            await state.get_thread_config(thread_id) is not None
            or await state.get_agent_state(thread_id) is not None
            or bool(await self.agent.conversation.get_messages(thread_id, limit=1))
            or bool(await self.agent.pending_runs(thread_id))
            or bool(await self.agent.observations.get_observations(thread_id))
        )

    async def find_run(self, trace_id: str) -> SharedRun | None:
        """The run `trace_id` when another process executes it or lately finished it: on an
        agent with a durable engine, as the engine knows it (any worker, any server process
        submitted it), else as the other server workers' records say."""
        engine = self.agent.engine
        if engine is None:
            return await self.workers.find(trace_id)
        return await self._shared(await engine.find(trace_id))

    async def running_elsewhere(self, thread_id: str) -> set[str]:
        """The trace ids of the runs of `thread_id` that go on in another process: on an
        agent with a durable engine, as the engine knows them (whichever server process
        submitted them), else as the other server workers' records say."""
        engine = self.agent.engine
        if engine is None:
            return {
                run.trace_id
                for run in await self.workers.others()
                if run.running and run.thread_id == thread_id
            }
        return {run.trace_id for run in await engine.running(thread_id)}

    async def request_cancel(self, trace_id: str) -> SharedRun | None:
        """Cancel the run `trace_id` executing elsewhere: through the engine (it stops
        wherever it runs), else by asking the server worker executing it. Returns the run as
        found (ended already: left alone), None when nobody knows it."""
        engine = self.agent.engine
        if engine is None:
            return await self.workers.request_cancel(trace_id)
        return await self._shared(await engine.cancel(trace_id))

    async def _shared(self, run: EngineRun | None) -> SharedRun | None:
        if run is None:
            return None
        return SharedRun(
            trace_id=run.trace_id,
            thread_id=run.thread_id,
            # The thread's owner: a scoped caller sees the runs of its own threads only.
            user_id=await self.owners.owner(run.thread_id),
            worker_id=run.worker_id or "",
            status="running" if run.running else run.status,
        )

    def check_provider(self, has_provider_config: bool) -> None:
        """Refuse a request choosing the provider, unless the app allows it."""
        if has_provider_config and not self.allow_provider_config:
            # A client-chosen provider could send the server's API keys to any base URL.
            raise ApiError(
                403,
                "provider_config_forbidden",
                "this server does not let requests choose the provider "
                "(create_app(..., allow_provider_config=True) allows it)",
            )

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` after the request that asked for it ended (kept until it is done)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # The name tests/pes_agent/server/test_runs_control.py calls it by.
    _spawn = spawn

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Let the work spawned for clients that left (cancel requests to other workers)
        reach the store before it closes; what is still going after `timeout_s` is cancelled."""
        if not self._background:
            return
        _, pending = await asyncio.wait(set(self._background), timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
