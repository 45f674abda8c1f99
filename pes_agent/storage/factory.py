"""`open_storage`: turn `create_agent(storage=...)`'s argument into a storage adapter."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from pes_agent.errors import UsageError
from pes_agent.storage.base import Storage
from pes_agent.storage.memory import InMemoryStorage

__all__ = ["ACCEPTED_SPECS", "open_storage"]

ACCEPTED_SPECS = (
    '"memory"',
    '"sqlite:///relative/path.db"',
    '"sqlite:////absolute/path.db"',
    '"sqlite:///:memory:"',
    '"postgresql://user:password@host:5432/db" (or "postgres://...")',
    "an object implementing pes_agent.storage.Storage",
)


def open_storage(spec: str | Storage) -> Storage:
    """The storage adapter for `spec`: `"memory"`, `"sqlite:///agent.db"`,
    `"postgresql://user@host/db"`, or an adapter, which is returned as it is.

    Nothing is connected yet: durable stores open (and create their schema) on first use.

    Args:
        spec: `"memory"`; `"sqlite:///relative/path.db"`, `"sqlite:////absolute/path.db"` or
            `"sqlite:///:memory:"` (three slashes before the path); a
            `"postgresql://user:password@host:5432/db"` (or `"postgres://..."`) URL; or an
            object implementing `Storage`.

    Returns:
        An `InMemoryStorage`, `SQLiteStorage` or `PostgresStorage` (not yet connected), or
        `spec` itself when it is an adapter already.

    Raises:
        UsageError: `spec` is neither a string nor a `Storage`, names an unknown scheme, or
            is a SQLite URL without three slashes before the path, or a PostgreSQL URL's
            `?schema=` is not a lower-case SQL identifier; the message says what is accepted
            (and never repeats the URL's password).
        ConfigurationError: A PostgreSQL URL was given but asyncpg is not installed
            (`pip install 'pes-agent[postgres]'`).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Storage):
            return spec
        raise UsageError(
            f"storage must be a string or a Storage adapter, not {type(spec).__name__}; "
            f"accepted: {', '.join(ACCEPTED_SPECS)}"
        )
    text = spec.strip()
    scheme = text.split(":", 1)[0].lower() if ":" in text else text.lower()
    if scheme == "memory":
        return InMemoryStorage()
    if scheme == "sqlite":
        from pes_agent.storage.sqlite import SQLiteStorage

        return SQLiteStorage(_sqlite_path(text))
    if scheme in ("postgresql", "postgres"):
        from pes_agent.storage.postgres import PostgresStorage

        return PostgresStorage(text)
    raise UsageError(f"unknown storage {_describe(text)}: accepted are {', '.join(ACCEPTED_SPECS)}")


def _sqlite_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc or not parts.path.startswith("/") or parts.path == "/":
        raise UsageError(
            f"bad SQLite URL {url!r}: write sqlite:///relative/path.db, "
            "sqlite:////absolute/path.db or sqlite:///:memory: (three slashes before the path)"
        )
    # sqlite:///agent.db -> "agent.db"; sqlite:////var/agent.db -> "/var/agent.db"
    return unquote(parts.path[1:])


def _describe(text: str) -> str:
    """`text` safe to print: only its scheme, since the rest may hold a password."""
    if "://" in text:
        return f"scheme {text.split('://', 1)[0]!r}"
    return repr(text) if len(text) < 40 else "string"
