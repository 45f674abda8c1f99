"""Threads: listing and deleting them, their messages, observations and config, and the live
feed of everything stored on one (`/v1/threads…`)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pes_agent.config import ThreadConfig
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.server.auth import Caller, is_reserved_thread
from pes_agent.server.errors import ApiError
from pes_agent.server.feeds import ThreadFeed
from pes_agent.server.inputs import int_param, resume_from, thread_id_of
from pes_agent.server.launch import HEARTBEAT_S, event_stream
from pes_agent.server.models import MessageList, ObservationList, ThreadList
from pes_agent.server.state import ApiEndpoint

__all__ = ["routes"]


def routes(auth: Sequence[Middleware]) -> list[Route]:
    """The thread routes, each behind the bearer-token middleware `auth`."""
    return [
        Route("/v1/threads", Threads, methods=["GET"], middleware=auth),
        Route("/v1/threads/{thread_id}", Thread, methods=["DELETE"], middleware=auth),
        Route("/v1/threads/{thread_id}/messages", Messages, methods=["GET"], middleware=auth),
        Route(
            "/v1/threads/{thread_id}/observations", Observations, methods=["GET"], middleware=auth
        ),
        Route("/v1/threads/{thread_id}/config", Config, methods=["GET", "PUT"], middleware=auth),
        Route("/v1/threads/{thread_id}/events", ThreadEvents, methods=["GET"], middleware=auth),
    ]


class Threads(ApiEndpoint):
    """The threads a caller sees."""

    async def get(self, request: Request) -> Response:
        """The caller's threads (every thread for an unscoped caller)."""
        caller: Caller = request.user
        api = self.api
        threads = [t for t in await api.agent.state.list_threads() if not is_reserved_thread(t)]
        if caller.scoped:
            threads = [t for t in threads if await api.owns(caller, t)]
        return JSONResponse(ThreadList(threads=threads).model_dump(mode="json"))


class Thread(ApiEndpoint):
    """One thread."""

    async def delete(self, request: Request) -> Response:
        """Delete the thread, unless a run executes on it."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        await api.authorize(caller, thread_id)
        if any(run.thread_id == thread_id for run in api.runs.running()) or (
            await api.running_elsewhere(thread_id)
        ):
            raise ApiError(409, "run_in_progress", "a run is executing on this thread")
        # The owner record stays: the id remains its user's (see pes_agent.server.auth).
        await api.agent.state.delete_thread(thread_id)
        api.runs.forget_thread(thread_id)
        return Response(status_code=204)


class Messages(ApiEndpoint):
    """A thread's conversation."""

    async def get(self, request: Request) -> Response:
        """The thread's conversation, the last `limit` messages."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        limit = int_param(request, "limit")
        await api.authorize(caller, thread_id)
        messages = await api.agent.conversation.get_messages(thread_id, limit=limit)
        return JSONResponse(MessageList(messages=messages).model_dump(mode="json"))


class Observations(ApiEndpoint):
    """A thread's observations."""

    async def get(self, request: Request) -> Response:
        """The thread's observations, filtered by type and trace id, paged with `after`."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        types = request.query_params.getlist("type") or None
        after = request.query_params.get("after")
        limit = int_param(request, "limit")
        trace_id = request.query_params.get("trace_id")
        await api.authorize(caller, thread_id)
        observations = api.agent.observations
        try:
            found = await observations.get_observations(thread_id, types=types, trace_id=trace_id)
        except ConfigurationError:
            raise  # the store is unusable (a 503), not the parameters
        except UsageError as error:
            raise ApiError(400, "invalid_parameter", str(error)) from None
        if after is not None:
            ids = [o.id for o in found]
            if after not in ids:
                # Filters may hide the cursor: look for it among all of the thread's.
                everything = await observations.get_observations(thread_id)
                order = {o.id: n for n, o in enumerate(everything)}
                if after not in order:
                    raise ApiError(
                        404,
                        "cursor_not_found",
                        "after names no observation of this thread: pass an observation's id "
                        "or the next_after of an earlier answer",
                    )
                found = [o for o in found if order[o.id] > order[after]]
            else:
                found = found[ids.index(after) + 1 :]
        if limit is not None:
            found = found[:limit]
        next_after = found[-1].id if found else after
        body = ObservationList(observations=found, next_after=next_after)
        return JSONResponse(body.model_dump(mode="json"))


class Config(ApiEndpoint):
    """A thread's config."""

    async def get(self, request: Request) -> Response:
        """The thread's config, without its provider config."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        await api.authorize(caller, thread_id)
        config = await api.agent.state.get_thread_config(thread_id)
        if config is None:
            raise ApiError(404, "config_not_found", "this thread was never configured")
        # A provider config may hold an API key: never sent back.
        return JSONResponse(config.model_dump(mode="json", exclude={"provider_config"}))

    async def put(self, request: Request) -> Response:
        """Set the thread's config (creating the thread for a scoped caller)."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        config = await api.body(request, ThreadConfig)
        api.check_provider(config.provider_config is not None)
        await api.authorize(caller, thread_id, create=True)
        try:
            await api.agent.state.set_thread_config(thread_id, config)
        except ConfigurationError as error:
            # A provider config holding an API key, which storage never saves; else the store
            # could not be opened (answered 503 by the app's exception handler).
            if config.provider_config is None or config.provider_config.api_key is None:
                raise
            raise ApiError(422, "invalid_config", str(error)) from None
        except UsageError as error:
            raise ApiError(422, "invalid_config", str(error)) from None
        return JSONResponse(config.model_dump(mode="json", exclude={"provider_config"}))


class ThreadEvents(ApiEndpoint):
    """A thread's live feed."""

    async def get(self, request: Request) -> Response:
        """Everything stored on the thread from now on (or since `Last-Event-ID`), as events."""
        caller: Caller = request.user
        api = self.api
        thread_id = thread_id_of(request)
        await api.authorize(caller, thread_id)
        # Subscribed before the response starts: once `subscribed` arrives nothing is missed.
        feed = await ThreadFeed.open(api.agent, thread_id, resume_from(request))
        return event_stream(feed.events(heartbeat_s=HEARTBEAT_S))
