"""Observing runs: typed observations, their manager, live token streams and logging.

| module | holds |
|---|---|
| `types` | `ObservationType`, `Observation` |
| `manager` | `ObservationManager`: record, subscribe, read back |
| `streams` | `StreamSocket`, `StreamEvent`: tokens as a model writes them |
| `logs` | `configure_logging` and the library's structlog loggers |
| `timeline` | one run's observations as a timeline of spans, and its HTML page (`render_html`) |

The public names are re-exported by `pes_agent`; this package imports nothing itself, so its
modules can depend on one another in any order.
"""
