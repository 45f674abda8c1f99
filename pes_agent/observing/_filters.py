"""Checking the name filters of subscriptions and queries (phases, observation types).

A filter that names nothing valid would silently match nothing: a plain string iterated as
characters, a misspelt name, an empty list given to a subscription. Each is a `UsageError`
(also a `ValueError`) that lists the valid names instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from pes_agent.errors import UsageError

__all__ = ["name_set"]

N = TypeVar("N", bound=str)


def name_set(
    value: object,
    valid: Iterable[N],
    *,
    what: str,
    parameter: str,
    normalize: Callable[[str], str],
    allow_empty: bool,
) -> frozenset[N] | None:
    """Return the valid names `value` selects: None for None, one name, or an iterable of names.

    Names are compared after `normalize` (e.g. ``str.upper``), so any case the caller wrote is
    accepted; the result holds the canonical members of `valid`.
    """
    if value is None:
        return None
    canonical = {normalize(name): name for name in valid}
    listing = ", ".join(canonical.values())
    # A string is iterable too, but as characters: one name is the only sensible reading.
    names: Iterable[object]
    if isinstance(value, str):
        names = (value,)
    elif isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        names = value
    else:
        raise UsageError(
            f"{parameter} must be a {what} name or an iterable of them, got {value!r}; "
            f"valid {what}s: {listing}"
        )
    chosen: set[N] = set()
    for name in names:
        found = canonical.get(normalize(name)) if isinstance(name, str) else None
        if found is None:
            raise UsageError(f"unknown {what} {name!r}; valid {what}s: {listing}")
        chosen.add(found)
    if not chosen and not allow_empty:
        raise UsageError(
            f"{parameter}=[] would match nothing; pass None (the default) for every {what}, "
            f"or some of: {listing}"
        )
    return frozenset(chosen)
