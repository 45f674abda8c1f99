"""A worker process resuming a paused run (run as a script by the race test, not collected).

    python approval_worker.py STORE SCHEMA THREAD TRACE SIDE_FILE GO_FILE

Waits for GO_FILE, then resumes TRACE on THREAD approving `c1`; the gated `pay` tool appends a
line to SIDE_FILE when it runs. Prints `RESUMED <status>` or `LOST <error class>`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from pes_agent import Approve, NotAwaitingApprovalError, create_agent, tool
from pes_agent.storage import PostgresStorage, Storage, open_storage
from pes_agent.testing import ScriptedProvider


def _wait_for(path: str) -> None:
    while not Path(path).exists():
        time.sleep(0.005)


async def main(store: str, schema: str, thread: str, trace: str, side: str, go: str) -> None:
    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        with open(side, "a") as file:
            file.write(f"{os.getpid()} paid {amount}\n")
        return "paid"

    storage: Storage = (
        PostgresStorage(store, schema=schema)
        if store.startswith("postgres")
        else open_storage(store)
    )
    agent = create_agent(provider=ScriptedProvider(["Paid."]), tools=[pay], storage=storage)
    await storage.list_threads()  # connect before the start signal
    await asyncio.to_thread(_wait_for, go)
    try:
        result = await agent.resume(thread, trace, {"c1": Approve()})
        print(f"RESUMED {result.metadata.status}", flush=True)
    except NotAwaitingApprovalError as exc:
        print(f"LOST {type(exc).__name__}", flush=True)
    finally:
        await agent.aclose()
        await storage.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
