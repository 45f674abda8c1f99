"""A2A, agent to agent: the agent served to other agents, and other agents used as tools.

```python
from pes_agent.interop.a2a import A2AAgent

researcher = A2AAgent("http://127.0.0.1:8001", headers={"Authorization": "Bearer t0k"})
agent = create_agent(provider=..., tools=[researcher, summarize])   # planned like any tool
```

**Serving.** `pes_agent.server.create_app(agent)` serves A2A (protocol 1.0 as `a2a-sdk` speaks
it: SendMessage, SendStreamingMessage, GetTask, CancelTask…, and the 0.3 names such as
`message/send` for clients that ask with them) as JSON-RPC at `POST /a2a`, behind the API's
bearer tokens and user scoping, with the agent card at `/.well-known/agent-card.json` (public:
it names the auth scheme). The SDK's request handler runs it; this module only translates:

- a message starts a run on the thread named by its context id (a new one when it names none)
  and is answered with a Task: `completed` with the answer as an artifact, `failed`,
  `canceled`, or `input-required` when the run waits for approval — its status message lists
  the pending calls (a data part `{"trace_id": …, "pending": [...]}`);
- the next message on that task carries the decisions, a data part
  `{"decisions": {call_id: "approve" | "deny" | {"deny": reason}}}`, or the text "approve" or
  "deny" for every pending call; they resume the run (`AgentCore.resume`);
- cancelling a task cancels its run (or the paused run it waits on);
- tasks are kept in the agent's storage (`TaskRecords`), so they outlive the server process.

**Using.** `A2AAgent(url)` is a tool whose one argument, `message`, is sent to the remote
agent; the text of its answer is the tool's result, which later calls use through
`{step_N_result}`. Needs `pip install 'pes-agent[a2a]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.helpers import (
    get_artifact_text,
    get_data_parts,
    get_message_text,
    new_data_part,
    new_task,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    Task,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_0_3
from a2a.utils.errors import InvalidParamsError
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message as AsgiMessage

from pes_agent.approvals.models import Approve, Decision, Deny, PausedRun
from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.interop._a2a_tasks import StoredTasks, caller_id
from pes_agent.run import AgentFinalResponse, AgentProps, PendingApproval
from pes_agent.server.auth import Caller
from pes_agent.server.errors import ApiError
from pes_agent.server.launch import start_run
from pes_agent.server.runs import RunHandle
from pes_agent.server.state import ApiState
from pes_agent.storage.base import TaskRecords
from pes_agent.threads.ids import thread_id_problem
from pes_agent.tools.base import ToolContext, ToolSchema

__all__ = ["A2AAgent", "A2ASettings", "a2a_routes"]

#: The protocol versions served, newest first (the SDK answers 0.3 requests on the same path).
PROTOCOL_VERSIONS = ("1.0", PROTOCOL_VERSION_0_3)


# -- serving -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class A2ASettings:
    """How the agent presents itself over A2A: `create_app(agent, a2a=A2ASettings(...))`.

    `url`: the absolute JSON-RPC endpoint the card names; by default the address the card
    was asked for, plus `path` (set it behind a proxy that rewrites the host).
    """

    name: str = "pes-agent"
    description: str = "An agent that plans, runs its tools and answers."
    version: str = "1.0.0"
    path: str = "/a2a"
    url: str | None = None


def a2a_routes(
    api: ApiState, settings: A2ASettings, auth: Sequence[Middleware]
) -> tuple[list[Route], Callable[[], Awaitable[None]]]:
    """The A2A routes of the app serving `api.agent` — the card (public) and the JSON-RPC
    endpoint behind the bearer-token middleware `auth`, run by a2a-sdk's request handler —
    and what to await when the app shuts down."""
    storage = api.agent.storage
    if not isinstance(storage, TaskRecords):
        raise UsageError(
            f"serving A2A keeps tasks in the agent's storage, and {storage!r} cannot keep them "
            "(it is no TaskRecords): use a bundled store, or create_app(agent, a2a=False)"
        )
    base_card = _card(api, settings, settings.url or f"http://localhost{settings.path}")
    tasks = StoredTasks(storage)
    handler = _Handler(
        agent_executor=_RunExecutor(api),
        task_store=tasks,
        agent_card=base_card,
        request_context_builder=_Threads(api, tasks),
    )
    [rpc] = create_jsonrpc_routes(
        handler, settings.path, context_builder=_Calls(), enable_v0_3_compat=True
    )
    max_bytes = api.max_body_bytes

    async def endpoint(request: Request) -> Response:
        # The SDK reads the whole body itself: it is read here first, within the API's limit.
        body = await _limited_body(request, max_bytes)
        sent = False

        async def replay() -> AsgiMessage:
            nonlocal sent
            if sent:
                return await request.receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        response: Response = await rpc.endpoint(Request(request.scope, replay))
        return response

    async def card(request: Request) -> Response:
        url = settings.url or str(request.base_url).rstrip("/") + settings.path
        return JSONResponse(agent_card_to_dict(_card(api, settings, url)))

    routes = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]),
        Route(settings.path, endpoint, methods=["POST"], middleware=auth),
    ]
    return routes, handler.aclose


async def _limited_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, "body_too_large", f"the request body is over {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, "body_too_large", f"the request body is over {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _card(api: ApiState, settings: A2ASettings, url: str) -> AgentCard:
    """The agent card: skills from the agent's tools, the bearer scheme when tokens are set."""
    card = AgentCard(
        name=settings.name,
        description=settings.description,
        version=settings.version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in PROTOCOL_VERSIONS
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(id=schema.name, name=schema.name, description=schema.description)
            for schema in api.agent.tools.schemas()
        ],
    )
    for skill in card.skills:
        skill.tags.append("tool")
    if api.tokens.enabled:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


class _Calls(DefaultServerCallContextBuilder):
    """The SDK's call context without the request's credentials: it keeps the headers in the
    context, which the SDK logs at DEBUG level."""

    def build(self, request: Request) -> ServerCallContext:
        """The call context, its headers without `Authorization` and cookies."""
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            context.state["headers"] = {
                name: value
                for name, value in headers.items()
                if name.lower() not in ("authorization", "cookie", "proxy-authorization")
            }
        return context


def _caller(context: ServerCallContext) -> Caller:
    return Caller(caller_id(context))


class _Threads(SimpleRequestContextBuilder):
    """Names each message's thread (its context id, a new one when it gives none) and lets
    the caller through to its own threads only, as the rest of the API does."""

    def __init__(self, api: ApiState, tasks: StoredTasks) -> None:
        super().__init__()
        self._api = api
        self._tasks = tasks

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        """The request context, once the caller may run on its thread."""
        if task_id and not context_id:
            # A message naming only its task goes on that task's thread (the SDK would make
            # up a new context id).
            found = await self._tasks.get(task_id, context)
            context_id = found.context_id if found is not None else None
        built = await super().build(context, params, task_id, context_id, task)
        problem = thread_id_problem(built.context_id)
        if problem is not None:
            raise InvalidParamsError(message=f"contextId is the thread id: {problem}")
        assert built.context_id is not None
        try:
            await self._api.authorize(_caller(context), built.context_id, create=True)
        except ApiError:
            raise InvalidParamsError(message="no such context (thread) for this token") from None
        return built


class _Handler(DefaultRequestHandler):
    """a2a-sdk's request handler, which also cancels a paused run whose task is cancelled
    while no executor holds it (the task was parked before the server restarted)."""

    def __init__(
        self, *, agent_executor: _RunExecutor, task_store: StoredTasks, **options: Any
    ) -> None:
        super().__init__(agent_executor=agent_executor, task_store=task_store, **options)
        self._runs = agent_executor
        self._tasks = task_store

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """Cancel the task, and the run it waits on."""
        before = await self._tasks.get(params.id, context)
        task: Task | None = await super().on_cancel_task(params, context)
        if before is not None and before.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self._runs.api.agent.cancel_pending(before.context_id)
        return task


class _RunExecutor(AgentExecutor):
    """Runs the agent for each message, through the server's own run machinery (`start_run`):
    the run is listed, followed and cancelled like one the HTTP API started."""

    def __init__(self, api: ApiState) -> None:
        self.api = api
        self._running: dict[str, RunHandle] = {}  # task id -> its run, while it executes
        self._cancelled: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Start (or resume) the task's run, then report how it ended."""
        assert context.task_id is not None
        assert context.context_id is not None
        assert context.message is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(
                    context.task_id,
                    context.context_id,
                    TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message],
                )
            )
            handle = await self._start(context, updater)
        else:
            handle = await self._resume(context, updater)
        if handle is None:
            return
        self._running[context.task_id] = handle
        assert handle.task is not None
        try:
            await updater.start_work()
            await asyncio.shield(handle.task)
        except asyncio.CancelledError:
            handle.task.cancel()
            raise
        finally:
            self._running.pop(context.task_id, None)
        if context.task_id in self._cancelled:
            self._cancelled.discard(context.task_id)
            return  # `cancel` reports it
        await _report(updater, handle)

    async def _start(self, context: RequestContext, updater: TaskUpdater) -> RunHandle | None:
        assert context.context_id is not None
        assert context.message is not None
        query = get_message_text(context.message).strip()
        if not query:
            await updater.reject(_says(updater, "send the question as a text part"))
            return None
        props = AgentProps(
            query,
            context.context_id,
            user_id=caller_id(context.call_context),
            trace_id=uuid.uuid4().hex,
        )
        return start_run(self.api, props)

    async def _resume(self, context: RequestContext, updater: TaskUpdater) -> RunHandle | None:
        """The run resumed with the message's decisions; the task asks again (None) when they
        do not decide every pending call."""
        assert context.context_id is not None
        assert context.message is not None
        waiting = await self.api.agent.pending_runs(context.context_id)
        if not waiting:
            await updater.failed(_says(updater, "no run of this task waits for a decision"))
            return None
        paused = waiting[0]
        decisions, problem = read_decisions(context.message, paused.pending)
        if problem is not None:
            await updater.requires_input(_asking(updater, paused, problem))
            return None
        props = paused.props.model_copy(update={"trace_id": paused.trace_id})
        return start_run(self.api, props, resume=decisions)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task's run: the one executing, or the one waiting for decisions."""
        assert context.task_id is not None
        assert context.context_id is not None
        handle = self._running.get(context.task_id)
        if handle is not None and handle.task is not None and not handle.done:
            self._cancelled.add(context.task_id)
            handle.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(handle.task)
        else:
            await self.api.agent.cancel_pending(context.context_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def _report(updater: TaskUpdater, handle: RunHandle) -> None:
    """The task's next state, from how its run ended."""
    if handle.failure is not None:
        _, _, message = handle.failure
        await updater.failed(_says(updater, message))
        return
    response = handle.response
    assert response is not None
    status = response.metadata.status
    if status in ("success", "partial"):
        answer = response.response.content
        await updater.add_artifact([Part(text=answer)], name="answer")
        await updater.complete()
    elif status == "awaiting_approval":
        await updater.requires_input(_pending(updater, response))
    elif status == "cancelled":
        await updater.cancel()
    else:
        await updater.failed(_says(updater, response.metadata.error or response.response.content))


def _says(updater: TaskUpdater, text: str) -> Message:
    return updater.new_agent_message([Part(text=text)])


def _pending(updater: TaskUpdater, response: AgentFinalResponse) -> Message:
    pending = response.metadata.pending_approvals
    calls = ", ".join(f"{p.tool_name} ({p.call_id})" for p in pending)
    text = (
        f"Waiting for approval: {calls}. Answer 'approve' or 'deny', or send a data part "
        '{"decisions": {"<call id>": "approve" | {"deny": "<reason>"}}}.'
    )
    data = {
        "trace_id": response.metadata.trace_id,
        "pending": [p.model_dump(mode="json") for p in pending],
    }
    return updater.new_agent_message([Part(text=text), new_data_part(data)])


def _asking(updater: TaskUpdater, paused: PausedRun, problem: str) -> Message:
    """The question again, saying what was wrong with the answer."""
    pending = ", ".join(f"{p.tool_name} ({p.call_id})" for p in paused.pending)
    return _says(
        updater,
        f"{problem}. Still waiting for approval: {pending}. Answer 'approve' or 'deny', or "
        'send a data part {"decisions": {"<call id>": "approve" | {"deny": "<reason>"}}}.',
    )


def read_decisions(
    message: Message, pending: Sequence[PendingApproval]
) -> tuple[dict[str, Decision], str | None]:
    """The decisions a message carries for the `pending` calls, or what is wrong with it.

    A data part `{"decisions": {call_id: "approve" | "deny" | {"deny": reason}}}` decides
    each call it names (every pending call must be named); else the text "approve" or "deny"
    decides them all.
    """
    for data in get_data_parts(message.parts):
        if isinstance(data, dict) and "decisions" in data:
            return _named_decisions(data["decisions"], [p.call_id for p in pending])
    text = get_message_text(message).strip().lower().rstrip(".!")
    if text in ("approve", "approved", "yes"):
        return {p.call_id: Approve() for p in pending}, None
    if text in ("deny", "denied", "no"):
        return {p.call_id: Deny() for p in pending}, None
    return {}, "The message decides nothing"


def _named_decisions(given: object, pending: list[str]) -> tuple[dict[str, Decision], str | None]:
    if not isinstance(given, dict):
        return {}, "'decisions' must map call ids to a decision"
    decisions: dict[str, Decision] = {}
    for call_id, value in given.items():
        if call_id not in pending:
            return {}, f"{call_id!r} is not a call waiting for approval"
        if value == "approve":
            decisions[call_id] = Approve()
        elif value == "deny":
            decisions[call_id] = Deny()
        elif isinstance(value, dict) and set(value) == {"deny"}:
            reason = value["deny"]
            decisions[call_id] = Deny(reason if isinstance(reason, str) and reason else None)
        else:
            return {}, f"the decision for {call_id!r} must be 'approve' or {{'deny': reason}}"
    missing = [call_id for call_id in pending if call_id not in decisions]
    if missing:
        return {}, f"No decision for {', '.join(missing)}"
    return decisions, None


# -- using a remote agent as a tool ------------------------------------------------------------

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask the agent, in plain words."}
    },
    "required": ["message"],
    "additionalProperties": False,
}


class A2AAgent:
    """A remote A2A agent as a tool: `A2AAgent(url, headers={"Authorization": "Bearer …"})`.

    Its one argument, `message`, is sent to the agent at `url` (whose card is read once, at
    the first call, or up front with `await tool.read_card()` so that its description reaches
    the planner); the text of the answer is the result. A remote error, a task that fails,
    is cancelled or asks for input, and no answer within `timeout_s` are error results naming
    the agent. `headers` (tokens) go to that agent only: they are never logged, recorded or
    put in an error's text. `name` is the tool's name (by default made from the URL).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        name: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UsageError(
                f"A2AAgent needs the agent's base URL, e.g. 'http://127.0.0.1:8000', not {url!r}"
            )
        if timeout_s <= 0:
            raise UsageError("timeout_s must be > 0 seconds, e.g. 120")
        self._url = url.rstrip("/")
        self._headers = dict(headers or {})
        self._name = name or _tool_name(self._url)
        self._timeout_s = timeout_s
        self._card: AgentCard | None = None
        self._card_lock = asyncio.Lock()

    def __repr__(self) -> str:
        # Never the headers: they hold tokens.
        return f"A2AAgent({_safe_url(self._url)!r}, name={self._name!r})"

    @property
    def schema(self) -> ToolSchema:
        """One `message` string; the card's description once it was read."""
        if self._card is None:
            description = f"Ask the remote agent at {_safe_url(self._url)} (over A2A)."
        else:
            description = f"Ask {self._card.name}: {self._card.description}".strip()
        return ToolSchema(name=self._name, description=description, input_schema=_INPUT_SCHEMA)

    @property
    def card(self) -> AgentCard | None:
        """The agent's card, once read."""
        return self._card

    async def read_card(self) -> AgentCard:
        """Read the agent's card (once: later calls return it).

        Raises:
            ToolExecutionError: The card could not be read; the message names the agent.
        """
        async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout_s) as http:
            return await self._read_card(http)

    async def _read_card(self, http: httpx.AsyncClient) -> AgentCard:
        async with self._card_lock:
            if self._card is None:
                try:
                    self._card = await A2ACardResolver(http, self._url).get_agent_card()
                except (A2AClientError, httpx.HTTPError) as error:
                    raise self._error(f"its card could not be read ({_reason(error)})") from None
            return self._card

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        """Send `arguments["message"]` to the agent and return the text of its answer."""
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            raise self._error("'message' must be a non-empty string")
        try:
            async with asyncio.timeout(self._timeout_s):
                task = await self._ask(message)
        except TimeoutError:
            raise self._error(f"no answer within {self._timeout_s:g} s") from None
        except (A2AClientError, httpx.HTTPError) as error:
            raise self._error(_reason(error)) from None
        return self._answer(task)

    async def _ask(self, text: str) -> Task:
        async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout_s) as http:
            card = await self._read_card(http)
            config = ClientConfig(httpx_client=http, streaming=False)
            client = ClientFactory(config).create(card)
            request = SendMessageRequest(
                message=Message(
                    role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)]
                )
            )
            async for event in client.send_message(request):
                if event.HasField("task"):
                    return event.task
                if event.HasField("message"):
                    # An agent may answer with a bare message: a completed task of its text.
                    task = Task(id="", context_id=event.message.context_id)
                    task.status.state = TaskState.TASK_STATE_COMPLETED
                    task.artifacts.add(parts=event.message.parts)
                    return task
        raise self._error("it answered with neither a task nor a message")

    def _answer(self, task: Task) -> str:
        state = task.status.state
        if state == TaskState.TASK_STATE_COMPLETED:
            return "\n".join(get_artifact_text(artifact) for artifact in task.artifacts)
        said = get_message_text(task.status.message) if task.status.HasField("message") else ""
        what = TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        raise self._error(f"its task {task.id} ended {what}" + (f": {said}" if said else ""))

    def _error(self, reason: str) -> ToolExecutionError:
        return ToolExecutionError(
            f"the A2A agent {self._name!r} at {_safe_url(self._url)}: {reason}",
            tool_name=self._name,
        )


def _tool_name(url: str) -> str:
    parts = urlsplit(url)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{parts.hostname or ''}_{parts.port or ''}{parts.path}")
    return ("a2a_" + slug.strip("_"))[:64]


def _safe_url(url: str) -> str:
    """`url` without a user name, password, query or fragment (which may hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _reason(error: BaseException) -> str:
    """What went wrong, in one line, without the request (its headers hold tokens)."""
    cause = error if isinstance(error, httpx.HTTPStatusError) else error.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return f"HTTP {cause.response.status_code} {cause.response.reason_phrase}".strip()
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:300]
