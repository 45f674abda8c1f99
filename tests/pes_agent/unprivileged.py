"""Running a child process that file permissions apply to, for the tests of permission errors.

The tests usually run as root, whom a mode-000 file does not keep out. As root the child is
started as `nobody` through util-linux's `setpriv`; `subprocess`'s own `user=` cannot be used,
because the interpreter may live under /root, which `nobody` may not search, and only
setpriv's exec gets through. `pytest.skip` when neither way is open.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["NOBODY", "as_unprivileged", "shared_folder", "unprivileged_env"]

#: The user permission checks apply to, when the tests run as root.
NOBODY = 65534


def as_unprivileged() -> list[str]:
    """The command prefix that starts a child as `nobody` when this is root (none otherwise);
    `pytest.skip` when `nobody` cannot run this interpreter and import pes_agent (a venv or
    checkout in a folder private to root, as CI's temporary ones are)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to drop privileges")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    problem = _unreachable(tuple(prefix))
    if problem:
        pytest.skip(f"user nobody cannot run this interpreter with pes_agent: {problem}")
    return prefix


def unprivileged_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a child started by `as_unprivileged()`: the checkout may sit in a folder
    private to root (CI's clones do), so the child imports a copy of the packages that
    `nobody` can read."""
    return {**env, "PYTHONPATH": str(_readable_copy())}


@functools.cache
def _readable_copy() -> Path:
    """A copy of pes_agent and ecs_core in a folder anyone can read, removed at exit."""
    import pes_agent

    folder = Path(tempfile.mkdtemp(prefix="pes-agent-code-"))
    folder.chmod(0o755)
    atexit.register(shutil.rmtree, folder, True)
    source = Path(pes_agent.__file__).resolve().parents[1]
    for package in ("pes_agent", "ecs_core"):
        shutil.copytree(
            source / package,
            folder / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


@functools.cache
def _unreachable(prefix: tuple[str, ...]) -> str:
    """Why `nobody` cannot start this interpreter and import pes_agent; empty when it can."""
    probe = [*prefix, sys.executable, "-c", "import pes_agent.cli.main"]
    done = subprocess.run(
        probe,
        capture_output=True,
        text=True,
        cwd="/",
        env=unprivileged_env(os.environ),
        timeout=60,
        check=False,
    )
    if done.returncode == 0:
        return ""
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


@contextmanager
def shared_folder() -> Iterator[Path]:
    """A fresh folder `nobody` can reach and write in (pytest's tmp_path is private to root),
    removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="pes-agent-test-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir():
                path.chmod(0o777)
        shutil.rmtree(folder)
