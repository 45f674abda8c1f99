"""The ecosystem's protocols, one module each: `agui` (AG-UI, agent to front end) and `a2a`
(agent to agent, both ways). (`pes_agent.protocols` is the typing contracts.)

Each adapter translates the agent's runs, observations and decisions into its protocol's
shapes with that protocol's official SDK; none grows an event model or run loop of its own.
Each needs its extra (`pip install 'pes-agent[agui]'`, `'pes-agent[a2a]'`) and is imported
only when used.
"""

from __future__ import annotations

__all__: list[str] = []
