"""Connecting to PostgreSQL: the URL (its password kept out of every message), the pool made on
first use, and what a driver error means for the caller (usage, configuration, or a
`StorageError` that is transient or not)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from pes_agent.errors import ConfigurationError, PESAgentError, StorageError, UsageError

__all__ = ["DEFAULT_SCHEMA", "Connector", "import_asyncpg", "redact_url", "take_schema"]

DEFAULT_SCHEMA = "pes_agent"


def import_asyncpg() -> Any:
    """The asyncpg module, or a `ConfigurationError` saying which extra to install."""
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigurationError(
            "PostgresStorage needs asyncpg: pip install 'pes-agent[postgres]'"
        ) from None
    return asyncpg


class Connector:
    """Opens connections and the pool for one database URL, and words their errors.

    `label` names the store in errors; `prepare(pool)` runs once on a new pool before anyone
    uses it (creating or migrating the schema).
    """

    def __init__(
        self,
        url: str,
        *,
        label: str,
        min_pool_size: int,
        max_pool_size: int,
        connect_timeout_s: float,
        prepare: Callable[[Any], Awaitable[None]],
    ) -> None:
        self.asyncpg = import_asyncpg()
        self._url = url
        self.safe_url = redact_url(url)
        self._secrets = _secrets_of(url)
        self._label = label
        self._min_pool = min_pool_size
        self._max_pool = max_pool_size
        self._connect_timeout_s = connect_timeout_s
        self._prepare = prepare
        self._pool: Any = None
        self._init_lock = asyncio.Lock()
        self.closed = False
        asyncpg = self.asyncpg
        # What a query can raise that is the database's (or the network's) doing.
        self.db_errors: tuple[type[BaseException], ...] = (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            OSError,
        )
        # Errors after which the same call may well succeed.
        self._transient: tuple[type[BaseException], ...] = (
            OSError,
            TimeoutError,
            asyncpg.ConnectionDoesNotExistError,
            asyncpg.PostgresConnectionError,
            asyncpg.CannotConnectNowError,
            asyncpg.TooManyConnectionsError,
            asyncpg.AdminShutdownError,
            asyncpg.CrashShutdownError,
            asyncpg.SerializationError,
            asyncpg.DeadlockDetectedError,
        )

    def scrub(self, text: str) -> str:
        """`text` with the URL's password masked."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def is_transient(self, exc: BaseException) -> bool:
        """Whether the same query may succeed if tried again."""
        return isinstance(exc, self._transient)

    def connection_error(self, exc: BaseException) -> PESAgentError:
        """What failing to connect means: the URL or credentials are wrong, or the server is
        out of reach."""
        pg = self.asyncpg
        detail = self.scrub(str(exc) or type(exc).__name__)
        if isinstance(
            exc,
            pg.InvalidAuthorizationSpecificationError
            | pg.InvalidCatalogNameError
            | pg.InvalidPasswordError,
        ):
            return ConfigurationError(
                f"cannot log in to PostgreSQL at {self.safe_url}: {detail}; check the user, "
                "password and database name in the storage URL"
            )
        if isinstance(exc, pg.ClientConfigurationError | ValueError):
            return ConfigurationError(f"bad PostgreSQL URL {self.safe_url}: {detail}")
        if isinstance(exc, OSError | TimeoutError | pg.CannotConnectNowError):
            return StorageError(
                f"cannot reach PostgreSQL at {self.safe_url}: {detail}; is the server "
                "running, and are the host and port right?",
                transient=True,
            )
        return StorageError(
            f"cannot connect to PostgreSQL at {self.safe_url}: {detail}",
            transient=self.is_transient(exc),
        )

    def query_error(self, exc: BaseException, thread_id: str | None = None) -> StorageError:
        """A `StorageError` for a failed query, password masked, transient when it may pass."""
        detail = self.scrub(str(exc) or type(exc).__name__)
        return StorageError(
            f"PostgreSQL error at {self.safe_url}: {detail}",
            transient=self.is_transient(exc),
            thread_id=thread_id,
        )

    def _check_open(self) -> None:
        if self.closed:
            raise UsageError(f"{self._label} is closed: open a new storage object")

    async def connect(self) -> Any:
        """A new connection of its own (for LISTEN or session locks), not from the pool."""
        self._check_open()
        try:
            return await self.asyncpg.connect(self._url, timeout=self._connect_timeout_s)
        except Exception as exc:
            # `from None`: the driver's own exception may carry the full DSN.
            raise self.connection_error(exc) from None

    async def pool(self) -> Any:
        """The pool, made and prepared on first use."""
        if self._pool is not None:
            return self._pool
        self._check_open()
        async with self._init_lock:
            if self._pool is None:
                try:
                    pool = await self.asyncpg.create_pool(
                        self._url,
                        min_size=self._min_pool,
                        max_size=self._max_pool,
                        timeout=self._connect_timeout_s,
                        reset=_keep_session,
                    )
                except Exception as exc:
                    raise self.connection_error(exc) from None
                try:
                    await self._prepare(pool)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def fetch(self, sql: str, *args: Any, thread_id: str | None = None) -> list[Any]:
        """The rows of one pooled query."""
        pool = await self.pool()
        try:
            return list(await pool.fetch(sql, *args))
        except self.db_errors as exc:
            raise self.query_error(exc, thread_id) from exc

    async def execute(self, sql: str, *args: Any, thread_id: str | None = None) -> None:
        """Run one pooled statement."""
        pool = await self.pool()
        try:
            await pool.execute(sql, *args)
        except self.db_errors as exc:
            raise self.query_error(exc, thread_id) from exc

    async def aclose(self) -> None:
        """Close the pool; later calls raise a `UsageError`."""
        self.closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


async def _keep_session(conn: Any) -> None:
    """Skip asyncpg's reset query on every release (a round trip per query): pooled
    connections never change session state here (no LISTEN, session locks or SET)."""


def take_schema(url: str, schema: str | None) -> tuple[str, str]:
    """Split a `schema=` query parameter off the URL (the driver would send it to the server
    as a setting); the `schema` argument, if given, must agree with it."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    in_url = [value for key, value in pairs if key == "schema"]
    if not in_url:
        return url, schema or DEFAULT_SCHEMA
    if len(set(in_url)) > 1 or (schema is not None and schema != in_url[0]):
        raise UsageError(
            "the schema is given twice, differently: pass it either as ?schema=NAME in the URL "
            "or as PostgresStorage(..., schema=NAME)"
        )
    query = urlencode([(key, value) for key, value in pairs if key != "schema"])
    return urlunsplit(parts._replace(query=query)), in_url[0]


# The password of a URL's user info is everything between "scheme://user:" and the LAST "@":
# it may itself hold "/", "?", "#" or "@", which end urlsplit()'s netloc early.
_USERINFO_PASSWORD = re.compile(
    r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@?#]*:)(?P<password>.*)@(?P<rest>[^@]*)$", re.S
)


def redact_url(url: str) -> str:
    """`url` with its password (in the user info or a `password=` parameter) masked."""
    match = _USERINFO_PASSWORD.match(url)
    if match is not None:
        url = f"{match['head']}***@{match['rest']}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _secrets_of(url: str) -> tuple[str, ...]:
    """The password of `url`, raw and decoded, for scrubbing error text."""
    found: list[str] = []
    match = _USERINFO_PASSWORD.match(url)
    if match is not None:
        found.append(match["password"])
    with suppress(ValueError):
        found += [v for k, v in parse_qsl(urlsplit(url).query) if k.lower() == "password"]
    return tuple({variant for secret in found if secret for variant in (secret, unquote(secret))})
