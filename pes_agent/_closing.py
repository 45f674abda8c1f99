"""Closing what holds resources: one `close_all` for several objects, one `async with` mixin."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = ["AsyncCloseable", "close_all"]


@runtime_checkable
class AsyncCloseable(Protocol):
    """Anything released with `await obj.aclose()`: providers, storage, pools."""

    async def aclose(self) -> None: ...


async def close_all(resources: Iterable[AsyncCloseable]) -> None:
    """Close every resource, even when closing another fails; then re-raise the first error.

    They close concurrently: none of them waits on another, and a slow one (a network
    client draining its pool) does not hold up the rest.
    """
    results = await asyncio.gather(
        *(resource.aclose() for resource in resources), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
