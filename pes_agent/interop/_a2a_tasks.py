"""a2a-sdk's `TaskStore` on the agent's storage (`TaskRecords`), so that A2A tasks live beside
the threads they run on and survive a restart of the server.

A task is kept as its JSON (the SDK's own `MessageToDict` form) under its id, with its context
id as the thread and the caller's user id as its owner: a token scoped to a user sees only that
user's tasks, an unscoped one (or a server without tokens) sees them all, as with threads.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from pes_agent.errors import StorageError
from pes_agent.observing.logs import get_logger
from pes_agent.storage.base import TaskRecord, TaskRecords

__all__ = ["StoredTasks", "caller_id"]

_log = get_logger("pes_agent.interop.a2a")


def caller_id(context: ServerCallContext) -> str | None:
    """The user id of the request's token (`Caller.display_name`), None for an unscoped one."""
    return context.user.user_name or None


class StoredTasks(TaskStore):
    """A2A tasks as records of the agent's storage (a `TaskRecords` store)."""

    def __init__(self, records: TaskRecords) -> None:
        self._records = records

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save `task`; the caller owns it unless it was saved before (its owner stays)."""
        body = MessageToDict(task)
        owner = caller_id(context) or ""
        await self._records.save_task_record(TaskRecord(task.id, task.context_id, owner, body))

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, if the caller may see it (another user's reads as absent)."""
        record = await self._records.get_task_record(task_id)
        if record is None or not _sees(context, record):
            return None
        return _task(record)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks, filtered, ordered and paged as the SDK's own stores do."""
        records = await self._records.list_task_records(
            owner=caller_id(context), thread_id=params.context_id or None
        )
        # The SDK's in-memory store holds the listing rules (filters, order, page tokens):
        # it is handed this caller's tasks and answers, so both stores list alike.
        page = InMemoryTaskStore(owner_resolver=lambda _: "", use_copying=False)
        for record in records:
            try:
                await page.save(_task(record), context)
            except StorageError as error:
                _log.warning("a2a_task_skipped", task_id=record.task_id, reason=error.message)
        return await page.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task if the caller may see it."""
        record = await self._records.get_task_record(task_id)
        if record is not None and _sees(context, record):
            await self._records.delete_task_record(task_id)


def _sees(context: ServerCallContext, record: TaskRecord) -> bool:
    user = caller_id(context)
    return user is None or record.owner == user


def _task(record: TaskRecord) -> Task:
    try:
        return ParseDict(record.body, Task(), ignore_unknown_fields=True)
    except ParseError as error:
        raise StorageError(
            f"the A2A task {record.task_id!r} of thread {record.thread_id!r} is damaged and "
            f"cannot be read ({' '.join(str(error).split())[:200]}); delete it with "
            "delete_task_record() or delete the thread",
            thread_id=record.thread_id,
        ) from None
