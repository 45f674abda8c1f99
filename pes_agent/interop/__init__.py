"""Adapters between pes-agent and the ecosystem's open protocols, one module per protocol:
`agui` (AG-UI, agent to front end). Each translates our observations and decisions; none has
an event model or run loop of its own. (`pes_agent.protocols` is the typing contracts.)"""
