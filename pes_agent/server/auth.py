"""Bearer tokens, who they speak for, and which threads that caller may touch.

Tokens are compared in constant time (`hmac.compare_digest` on their SHA-256 digests) against
every configured token, so the time a check takes says nothing about how close a guess was,
nor about the tokens' lengths. A token mapped to a user id is *scoped*: its runs carry that
user id and it sees only the threads that user owns. A thread's owner is the user whose
request first ran on it or configured it while nothing of it was stored, and it stays that
user's after the thread is deleted (another user taking the id over would be shown to any feed
still open on it). The owner is kept in the agent's storage (as the state of a reserved thread
id, `OWNER_PREFIX + thread_id`, see `pes_agent.threads.reserved`), so every worker process
sharing the storage agrees on it.

`BearerTokens` is the Starlette authentication backend on the API's routes: a request without
an accepted token is answered 401 before its route reads anything (its body included), and
the others carry their `Caller` as `request.user`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    BaseUser,
)
from starlette.requests import HTTPConnection

from pes_agent.config import AgentState
from pes_agent.errors import StateConflictError, StorageError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.storage.base import Storage
from pes_agent.threads.reserved import RESERVED_PREFIX, is_reserved_thread

__all__ = [
    "OWNER_PREFIX",
    "TOKEN_ENV",
    "BearerTokens",
    "Caller",
    "OwnerStore",
    "TokenTable",
    "is_reserved_thread",
]

_log = get_logger("pes_agent.server")

#: The environment variable holding the API's bearer token (unscoped: it sees every thread).
TOKEN_ENV = "PES_AGENT_API_TOKEN"

#: Thread ids starting with this hold the server's owner records. Like every reserved id
#: (`is_reserved_thread`) the API refuses them as thread ids.
OWNER_PREFIX = RESERVED_PREFIX + "owner:"


@dataclass(frozen=True, slots=True)
class Caller(BaseUser):
    """Who a request speaks for: `user_id` None is an unscoped caller that sees every thread."""

    user_id: str | None = None

    @property
    def scoped(self) -> bool:
        """Whether this caller sees only its own threads."""
        return self.user_id is not None

    @property
    def is_authenticated(self) -> bool:
        """Always: a request without an accepted token gets no `Caller`."""
        return True

    @property
    def display_name(self) -> str:
        """The user id, or "" for an unscoped caller."""
        return self.user_id or ""

    @property
    def identity(self) -> str:
        """The user id, or "" for an unscoped caller."""
        return self.user_id or ""


class TokenTable:
    """The accepted tokens and the user each is scoped to (None: unscoped).

    Only SHA-256 digests of the tokens are kept, and a presented token is compared by its
    digest, so that neither which token matched nor the tokens' lengths show in the timing.
    """

    def __init__(self, tokens: Mapping[str, str | None] | Sequence[str] | None) -> None:
        if isinstance(tokens, str | bytes):
            # A string is a sequence of one-letter tokens: each letter would be let in.
            raise UsageError(
                "tokens must be a list of tokens or a {token: user_id} map, not one string: "
                "tokens=[token]"
            )
        pairs: list[tuple[str, str | None]]
        if tokens is None:
            env = os.environ.get(TOKEN_ENV, "")
            pairs = [(env, None)] if env.strip() else []
        elif isinstance(tokens, Mapping):
            pairs = list(tokens.items())
        else:
            pairs = [(token, None) for token in tokens]
        table: dict[bytes, str | None] = {}
        for token, user in pairs:
            # Surrounding whitespace never reaches us: the Authorization header is stripped.
            token = token.strip()
            if not token:
                raise UsageError("an API token must be a non-empty string")
            if user is not None and not user.strip():
                raise UsageError(
                    "a token is scoped to a user id, which must be a non-empty string "
                    "(None: the token sees every thread)"
                )
            table[_digest(token.encode())] = user
        self._table = table

    @property
    def enabled(self) -> bool:
        """Whether requests must carry a bearer token."""
        return bool(self._table)

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller an `Authorization` header speaks for, or None when it is not accepted."""
        if not self._table:
            return Caller()
        if authorization is None:
            return None
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        given = _digest(presented.strip().encode())
        found: Caller | None = None
        # Every token is compared, matched or not, so the timing does not depend on which.
        for token, user in self._table.items():
            if hmac.compare_digest(token, given):
                found = Caller(user)
        return found


class BearerTokens(AuthenticationBackend):
    """Lets in requests whose `Authorization: Bearer …` is one of `tokens`, as their `Caller`;
    the others are refused (`AuthenticationError`, answered 401 by the middleware's
    `on_error`)."""

    def __init__(self, tokens: TokenTable) -> None:
        self.tokens = tokens

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser]:
        caller = self.tokens.caller(conn.headers.get("authorization"))
        if caller is None:
            raise AuthenticationError("send a valid token as 'Authorization: Bearer …'")
        return AuthCredentials(["authenticated"]), caller


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class OwnerStore:
    """Which user owns each thread, kept in the agent's storage beside the threads.

    It reads and writes the storage itself, not through a `StateManager`: an owner record is
    bookkeeping under a reserved id (which a `StateManager` refuses as a thread id), not a state
    change of a thread to record and push to the thread feeds.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    async def owner(self, thread_id: str) -> str | None:
        """The user owning `thread_id`, or None when no scoped caller ever used it; "", which
        no user is, when its record is damaged: taken for unowned, the thread would be shown
        to (and claimed by) any user, and one damaged record failed every scoped listing."""
        try:
            saved = await self._storage.get_agent_state(OWNER_PREFIX + thread_id)
        except StorageError as error:
            if error.transient:
                raise
            _log.warning("server_owner_unreadable", thread_id=thread_id, reason=error.message)
            return ""
        if saved is None:
            return None
        user = saved.data.get("user_id")
        return user if isinstance(user, str) else None

    async def claim(self, thread_id: str, user_id: str) -> str:
        """Make `user_id` the owner unless the thread has one; returns the owner."""
        try:
            await self._storage.set_agent_state(
                OWNER_PREFIX + thread_id, AgentState(data={"user_id": user_id}), expected_version=0
            )
        except StateConflictError:
            owner = await self.owner(thread_id)
            # A record without a user id (written by hand?) belongs to nobody.
            return owner if owner is not None else ""
        return user_id
