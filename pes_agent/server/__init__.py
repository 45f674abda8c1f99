"""An HTTP API serving an agent: runs as JSON or server-sent events, threads, approvals.

```python
from pes_agent.server import create_app
app = create_app(agent, tokens={"secret-token": "alice"})   # any ASGI server runs it
```

Needs the `server` extra: `pip install 'pes-agent[server]'` (Starlette and uvicorn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pes_agent.errors import UsageError

if TYPE_CHECKING:
    from pes_agent.core import AgentCore

__all__ = ["create_app"]

_INSTALL = "the HTTP server needs Starlette and uvicorn: pip install 'pes-agent[server]'"


def create_app(
    agent: AgentCore,
    *,
    tokens: Mapping[str, str | None] | Sequence[str] | None = None,
    cors_origins: Sequence[str] = (),
    max_body_bytes: int = 1_000_000,
    allow_provider_config: bool = False,
    replay_limit: int = 2048,
    close_agent: bool = False,
    console: bool = True,
) -> Any:
    """An ASGI app serving `agent` (see `pes_agent.server.app.create_app`)."""
    try:
        from pes_agent.server import app
    except ImportError as error:  # pragma: no cover - depends on the environment
        if error.name in ("starlette", "uvicorn") or (error.name or "").startswith("starlette"):
            raise UsageError(_INSTALL) from error
        raise
    return app.create_app(
        agent,
        tokens=tokens,
        cors_origins=cors_origins,
        max_body_bytes=max_body_bytes,
        allow_provider_config=allow_provider_config,
        replay_limit=replay_limit,
        close_agent=close_agent,
        console=console,
    )
