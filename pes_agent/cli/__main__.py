"""`python -m pes_agent.cli`: the same as the `pes-agent` console script."""

from __future__ import annotations

import sys

from pes_agent.cli.main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
