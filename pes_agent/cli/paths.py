"""Where the CLI keeps its SQLite store: the user's data directory, unless told otherwise.

| platform | default file |
|---|---|
| Linux, other Unix | `$XDG_DATA_HOME/pes-agent/agent.db` (else `~/.local/share/...`) |
| macOS | `~/Library/Application Support/pes-agent/agent.db` |
| Windows | `%LOCALAPPDATA%\\pes-agent\\agent.db` (else `~\\AppData\\Local\\...`) |

`--db` (a storage URL or a file path) wins over the `PES_AGENT_DB` environment variable, which
wins over the default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from urllib.parse import quote, unquote

__all__ = [
    "APP_DIR_NAME",
    "DB_ENV_VAR",
    "DB_FILE_NAME",
    "StoreLocation",
    "default_db_path",
    "resolve_store",
]

APP_DIR_NAME = "pes-agent"
DB_FILE_NAME = "agent.db"
DB_ENV_VAR = "PES_AGENT_DB"


def default_db_path(
    *,
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: PurePath | None = None,
) -> PurePath:
    """The default database file for `platform` (default: this machine's), per the table above.

    The arguments exist so the rules can be checked for every platform on any one machine.
    """
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    if platform == "win32":
        win_home = PureWindowsPath(home) if home is not None else PureWindowsPath(Path.home())
        local = environ.get("LOCALAPPDATA", "")
        base = PureWindowsPath(local) if local else win_home / "AppData" / "Local"
        return base / APP_DIR_NAME / DB_FILE_NAME
    posix_home = PurePosixPath(home) if home is not None else PurePosixPath(Path.home())
    if platform == "darwin":
        return posix_home / "Library" / "Application Support" / APP_DIR_NAME / DB_FILE_NAME
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and PurePosixPath(xdg).is_absolute():
        return PurePosixPath(xdg) / APP_DIR_NAME / DB_FILE_NAME
    return posix_home / ".local" / "share" / APP_DIR_NAME / DB_FILE_NAME


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """A storage spec for `create_agent(storage=...)`, and the SQLite file behind it if any."""

    spec: str
    path: Path | None
    source: str

    def describe(self) -> str:
        """How to name this store to a user: the file path, or the URL's scheme only."""
        if self.path is not None:
            return str(self.path)
        # A PostgreSQL URL may carry a password: show the scheme and host part only.
        scheme, _, rest = self.spec.partition("://")
        host = rest.rsplit("@", 1)[-1] if rest else ""
        return f"{scheme}://{host}" if rest else self.spec


def resolve_store(db: str | None, *, environ: Mapping[str, str] | None = None) -> StoreLocation:
    """The store to use: `db` (from `--db`), else `$PES_AGENT_DB`, else the default file.

    A value with `://` (or `memory`) is a storage URL (`sqlite:///PATH`, `postgresql://...`);
    anything else is a path to an SQLite file, made absolute, whatever characters it holds.
    """
    environ = os.environ if environ is None else environ
    if db:
        return _location(db, "--db")
    from_env = environ.get(DB_ENV_VAR, "").strip()
    if from_env:
        return _location(from_env, DB_ENV_VAR)
    path = Path(default_db_path(environ=environ))
    return StoreLocation(spec=_sqlite_url(path), path=path, source="default")


def _location(value: str, source: str) -> StoreLocation:
    text = value.strip()
    if text == "memory":
        return StoreLocation(spec="memory", path=None, source=source)
    scheme, separator, rest = text.partition("://")
    if not separator:
        # A path is a path: "#", "?" and "%" are ordinary characters of a file name.
        path = Path(text).expanduser().resolve()
        return StoreLocation(spec=_sqlite_url(path), path=path, source=source)
    if scheme.lower() == "sqlite":
        # A URL, read as the storage factory reads it: the query and fragment are not part
        # of the path, and percent-escapes are decoded.
        raw = rest.split("#", 1)[0].split("?", 1)[0]
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
        file = unquote(raw[1:] if raw.startswith("/") else raw)
        if file and file != ":memory:":
            path = Path(file).expanduser().resolve()
            return StoreLocation(spec=_sqlite_url(path), path=path, source=source)
    # postgresql:// and postgres:// are used as they are; any other scheme is left for the
    # storage factory to refuse with the list of accepted ones.
    return StoreLocation(spec=text, path=None, source=source)


def _sqlite_url(path: Path) -> str:
    # Percent-encode, so a file name holding "#", "?" or "%" survives the URL parsing of the
    # storage factory and names exactly this file.
    return "sqlite:///" + quote(path.as_posix())
