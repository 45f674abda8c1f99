"""A thread's message history, saved through a `Storage`."""

from __future__ import annotations

from collections.abc import Sequence

from pes_agent.errors import UsageError
from pes_agent.storage.base import Storage
from pes_agent.threads.ids import check_thread_id
from pes_agent.threads.messages import ConversationMessage

__all__ = ["ConversationManager"]


class ConversationManager:
    """Add and read the messages of a thread, oldest first (an agent's `agent.conversation`)."""

    def __init__(self, storage: Storage) -> None:
        """Keep the messages in `storage`.

        Args:
            storage: Where the messages are kept.
        """
        self._storage = storage

    async def add_messages(self, thread_id: str, messages: Sequence[ConversationMessage]) -> None:
        """Append `messages` to the thread's history, in order.

        Args:
            thread_id: The thread the messages belong to.
            messages: The messages, each made with this `thread_id`.

        Raises:
            UsageError: `thread_id` is not a usable thread id, or a message is not a
                `ConversationMessage` of this thread.
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        for message in messages:
            if not isinstance(message, ConversationMessage):
                raise UsageError(
                    f"add_messages takes ConversationMessage objects, got {type(message).__name__}"
                )
            if message.thread_id != thread_id:
                raise UsageError(
                    f"message {message.message_id} belongs to thread {message.thread_id!r}, "
                    f"not {thread_id!r}; create it with thread_id={thread_id!r}"
                )
        await self._storage.add_messages(thread_id, list(messages))

    async def get_messages(
        self, thread_id: str, *, limit: int | None = None
    ) -> list[ConversationMessage]:
        """Read the newest `limit` messages of the thread.

        Args:
            thread_id: The thread to read.
            limit: How many of the newest messages to return; None for all.

        Returns:
            The messages, oldest first.

        Raises:
            UsageError: `thread_id` is not a usable thread id, or `limit` is negative.
        StorageError: The store could not be read or written; `transient` says whether
            trying again may help.
        """
        check_thread_id(thread_id)
        if limit is not None and limit < 0:
            raise UsageError(f"limit must be >= 0 or None, got {limit}")
        return await self._storage.get_messages(thread_id, limit=limit)
