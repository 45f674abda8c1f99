"""The quickstart on Anthropic: `ANTHROPIC_API_KEY=... python examples/anthropic_quickstart.py`.

Thinking blocks, when the model sends them, are recorded as THOUGHTS observations and never
end up in the plan or the answer. Without a key it runs offline.
"""

import asyncio
import os

from quickstart import run

if __name__ == "__main__":
    asyncio.run(run(os.environ.get("PES_MODEL", "anthropic:claude-sonnet-4-5")))
