"""Closing what holds resources: one `close_all` for several objects, one `async with` mixin."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

__all__ = ["AsyncCloseable", "ClosedOnExit", "close_all"]


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


class ClosedOnExit(ABC):
    """Base for objects used as `async with obj:` that `aclose()` on the way out.

    `__aenter__` returns the object itself; a class that must open something first
    (a store creating its schema) overrides it.
    """

    __slots__ = ()

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
