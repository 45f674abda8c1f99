"""Observation ids: 32 random hex digits, unique, and never shared with a forked child."""

from __future__ import annotations

import os
import re

import pytest

from pes_agent.observing.types import new_id


def test_ids_are_32_hex_digits_and_unique() -> None:
    ids = [new_id() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", observation_id) for observation_id in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    new_id()  # the parent holds a batch of ids drawn ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "".join(new_id() for _ in range(3)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(write)
    child = os.read(read, 200).decode()
    os.close(read)
    parent = "".join(new_id() for _ in range(3))
    assert len(child) == 96
    assert {child[i : i + 32] for i in range(0, 96, 32)}.isdisjoint(
        parent[i : i + 32] for i in range(0, 96, 32)
    )
