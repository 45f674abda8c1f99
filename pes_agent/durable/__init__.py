"""Durable runs: a run that survives its worker, on an engine users already trust.

```python
from pes_agent.durable.temporal import TemporalEngine  # pip install 'pes-agent[temporal]'
from pes_agent.durable.dbos import DBOSEngine          # pip install 'pes-agent[dbos]'

engine = TemporalEngine("127.0.0.1:7233")             # or DBOSEngine("sqlite:///runs.sqlite")
agent = create_agent(provider=..., tools=[...], storage="sqlite:///agent.db", engine=engine)
async with engine.worker(agent):                       # in each worker process
    result = await agent.process(AgentProps("...", "thread-1"))   # same call, same response
```

A run on an engine is a workflow; its side effects (`pes_agent.durable.effects`) are steps the
engine keeps, so a run whose worker died is finished by another worker without doing again
what it had done (docs/durable.md lists the step names). Without an engine, runs execute in
process as always; `import pes_agent` imports no engine.
"""

from __future__ import annotations

from pes_agent.durable.effects import CURRENT_STEP, DurableEngine, EffectInvoker, RunEffects

__all__ = ["CURRENT_STEP", "DurableEngine", "EffectInvoker", "RunEffects"]
