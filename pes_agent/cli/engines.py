"""`--engine URL`: the durable engine a command submits runs to (`run`, `serve`) or works for
(`worker`), with its mistakes as one-line usage errors (exit code 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from pes_agent.cli.errors import CLIError

if TYPE_CHECKING:
    from pes_agent.durable import DurableEngine

__all__ = ["ENGINE_HELP", "close_engine", "open_engine", "shown_url"]

ENGINE_HELP = (
    "a durable engine: dbos+sqlite:///PATH, dbos+postgresql://USER@HOST/DB or "
    "temporal://HOST:PORT (needs pip install 'pes-agent[dbos]' or 'pes-agent[temporal]')"
)


def open_engine(
    url: str, *, worker_id: str | None = None, task_queue: str | None = None
) -> DurableEngine:
    """The engine `url` names (`pes_agent.durable.engine_from_url`); `task_queue`
    (`--task-queue`) is a Temporal engine's queue. Nothing is connected yet."""
    from pes_agent.durable import engine_from_url
    from pes_agent.errors import UsageError

    if task_queue is not None:
        if not url.startswith("temporal://"):
            raise CLIError(f"--task-queue is for temporal:// engines only, not {shown_url(url)}")
        if not task_queue.strip() or "/" in task_queue:
            raise CLIError(f"--task-queue {task_queue!r}: give a queue name, without '/'")
        address = url.removeprefix("temporal://")
        if "/" in address.rstrip("/"):
            raise CLIError(
                f"--engine {url} names a task queue already: drop it or --task-queue {task_queue}"
            )
        url = f"temporal://{address.rstrip('/')}/{task_queue}"
    try:
        return engine_from_url(url, worker_id=worker_id)
    except UsageError as error:  # ConfigurationError too: the engine's extra is missing
        raise CLIError(f"--engine: {error.message}") from None


async def close_engine(engine: DurableEngine) -> None:
    """Close what the engine opened to submit runs (an engine without `aclose` has nothing)."""
    aclose = getattr(engine, "aclose", None)
    if aclose is not None:
        await aclose()


def shown_url(url: str) -> str:
    """`url` without its password (a command's output may be shared)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
