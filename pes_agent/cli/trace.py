"""`pes-agent trace`'s HTML timeline, which lives in `pes_agent.observing.timeline`.

The HTTP server renders the same page for its web console without the CLI's dependencies, so
the timeline moved out of this package; its names stay importable from here.
"""

from __future__ import annotations

# Every public name of the timeline, under the same list (written once, there).
from pes_agent.observing.timeline import *  # noqa: F403
from pes_agent.observing.timeline import __all__ as __all__
