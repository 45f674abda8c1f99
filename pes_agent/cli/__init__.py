"""The `pes-agent` command line (`pip install 'pes-agent[cli]'`): run, demo and inspect agents.

```
pes-agent demo                                    # a whole run, offline, on a scripted model
pes-agent run "Weather in Paris?" --provider openai:gpt-4o-mini --tools mytools:TOOLS
pes-agent threads | history THREAD | observations THREAD [--type T] | trace THREAD --html F
```

Only this subpackage uses rich; the library itself never imports it.
"""

from __future__ import annotations

from pes_agent.cli.main import main

__all__ = ["main"]
