"""Execution: a plan's tool calls as a DAG fed by `{step_N_result}` placeholders.

| module | holds |
|---|---|
| `placeholders` | finding and resolving `{step_N_result...}` references in arguments |
| `dag` | `CallGraph` and `plan_errors`: dependencies, unknown steps, cycles |
| `executors` | `ConcurrentExecutor` (the default) and `SequentialExecutor` |
| `_runner` | `CallRunner`: how one call runs (the rules both executors share); `PlanLedger` |
| `_waves` | `WaveSchedule`: scheduling with re-evaluation, when the reviser is asked |

The public names are re-exported by `pes_agent`; this package imports nothing itself, so its
modules can depend on one another in any order.
"""
