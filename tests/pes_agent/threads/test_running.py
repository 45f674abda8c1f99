"""Which runs a task is inside of: nested runs, tasks started inside a run, and runs over."""

from __future__ import annotations

import asyncio
import contextvars

from pes_agent.threads._running import enclosing_run, running


async def test_nested_runs_are_found_and_left_in_order() -> None:
    """Inside a run on one thread and a nested run on another, both are found; leaving the
    inner one leaves only the outer one, and leaving that leaves none."""
    outer = running("a", "trace-a").__enter__()
    inner = running("b", "trace-b").__enter__()
    assert enclosing_run("a") is outer
    assert enclosing_run("b") is inner
    assert enclosing_run("c") is None
    inner.__exit__(None, None, None)
    assert enclosing_run("b") is None
    assert enclosing_run("a") is outer
    outer.__exit__(None, None, None)
    assert enclosing_run("a") is None


async def test_a_task_started_in_a_run_is_inside_it_until_the_run_ends() -> None:
    """A task started during a run inherits it, and stops being inside it once it is over."""
    seen: list[str | None] = []
    over = asyncio.Event()

    async def child() -> None:
        run = enclosing_run("a")
        seen.append(run.trace_id if run else None)
        await over.wait()
        run = enclosing_run("a")
        seen.append(run.trace_id if run else None)

    with running("a", "trace-a"):
        task = asyncio.create_task(child())
        await asyncio.sleep(0)
    over.set()
    await task
    assert seen == ["trace-a", None]


def test_a_run_over_leaves_the_context_as_it_found_it() -> None:
    """After a run, the context holds no entry of it (a finished task kept around keeps
    nothing of the run in its context)."""

    def inside() -> bool:
        with running("a", "trace-a"):
            pass
        return any(var.name == "pes_agent_enclosing_runs" for var in contextvars.copy_context())

    assert contextvars.Context().run(inside) is False
