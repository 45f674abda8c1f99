"""Running a child process that file permissions apply to, for the tests of permission errors.

The tests usually run as root, whom a mode-000 file does not keep out. As root the child is
started as `nobody` through util-linux's `setpriv`; `subprocess`'s own `user=` cannot be used,
because the interpreter may live under /root, which `nobody` may not search, and only
setpriv's exec gets through. `pytest.skip` when neither way is open.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["NOBODY", "as_unprivileged", "shared_folder"]

#: The user permission checks apply to, when the tests run as root.
NOBODY = 65534


def as_unprivileged() -> list[str]:
    """The command prefix that starts a child as `nobody` when this is root (none otherwise)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to drop privileges")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


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
