"""An HTTP API serving an agent: runs as JSON or server-sent events, threads, approvals.

```python
from pes_agent.server import create_app
app = create_app(agent, tokens={"secret-token": "alice"})   # any ASGI server runs it
```

Needs the `server` extra: `pip install 'pes-agent[server]'` (Starlette and uvicorn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pes_agent.errors import UsageError

__all__ = ["create_app"]

_INSTALL = "the HTTP server needs Starlette and uvicorn: pip install 'pes-agent[server]'"

if TYPE_CHECKING:
    # What type checkers and readers see: the real signature (pes_agent.server.app).
    from pes_agent.server.app import create_app
else:

    def create_app(agent: Any, **options: Any) -> Any:
        """An ASGI app serving `agent` (see `pes_agent.server.app.create_app`); Starlette is
        imported only now, so that `import pes_agent.server` works without the extra."""
        try:
            from pes_agent.server import app
        except ImportError as error:  # pragma: no cover - depends on the environment
            if error.name in ("starlette", "uvicorn") or (error.name or "").startswith("starlette"):
                raise UsageError(_INSTALL) from error
            raise
        return app.create_app(agent, **options)
