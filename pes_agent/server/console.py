"""The web console: a page at `/` that talks to the API, shipped as plain files in this package.

The files (`console/index.html`, its stylesheet and three JavaScript modules) are read from the
installed package with `importlib.resources`; there is nothing to build and nothing fetched
from elsewhere. The page is served under a Content-Security-Policy that allows only this
origin's scripts, styles and connections, plus the one inline script of the trace page
(`pes_agent.observing.timeline`), which the console shows in a sandboxed `srcdoc` iframe that
inherits the console's policy.
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pes_agent.observing.timeline import script_csp_source

__all__ = ["CONSOLE_FILES", "console_file", "console_policy", "console_routes", "trace_policy"]

#: The files of the console, and the media type each is served as.
CONSOLE_FILES: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "runview.js": "text/javascript; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}


def console_policy() -> str:
    """The console page's Content-Security-Policy.

    Styles allow 'unsafe-inline' only because the trace page, shown in a srcdoc iframe that
    inherits this policy, positions its bars with style attributes; scripts stay strict.
    """
    return (
        "default-src 'self'; "
        f"script-src 'self' {script_csp_source()}; "
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; "
        "connect-src 'self'; "
        "object-src 'none'; "
        "base-uri 'none'; "
        "form-action 'none'; "
        "frame-ancestors 'none'"
    )


def trace_policy() -> str:
    """The policy of a trace page fetched on its own: a sandbox, so that opened as a page it
    runs in an origin of its own, away from the console's stored token."""
    return (
        f"sandbox allow-scripts; default-src 'none'; script-src {script_csp_source()}; "
        "style-src 'unsafe-inline'; frame-ancestors 'none'"
    )


@functools.cache
def console_file(name: str) -> bytes:
    """The bytes of one console file, read from the installed package."""
    if name not in CONSOLE_FILES:
        raise KeyError(name)
    return resources.files("pes_agent.server").joinpath("console", name).read_bytes()


def _headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": console_policy(),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        # Small files: revalidated on each load, so an upgraded server shows its own console.
        "Cache-Control": "no-cache",
    }


async def _index(request: Request) -> Response:
    return Response(
        console_file("index.html"), media_type=CONSOLE_FILES["index.html"], headers=_headers()
    )


async def _asset(request: Request) -> Response:
    name: str = request.path_params["name"]
    if name not in CONSOLE_FILES or name == "index.html":
        raise HTTPException(404)  # the app's JSON "not_found" answer
    return Response(console_file(name), media_type=CONSOLE_FILES[name], headers=_headers())


def console_routes() -> list[Route]:
    """`GET /` (the page) and `GET /console/{name}` (its stylesheet and scripts)."""
    return [
        Route("/", _index, methods=["GET"]),
        Route("/console/{name}", _asset, methods=["GET"]),
    ]
