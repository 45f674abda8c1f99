"""Planning: the plan model, the planning-output parser, the prompts and the default planner.

| module | holds |
|---|---|
| `plan` | `PlanningOutput`, `ParsedToolCall`: a plan as data |
| `parser` | `OutputParser`: JSON or ART's section format into a `PlanningOutput` |
| `prompts` | the planning prompt and its repair round-trip |
| `planner` | `LLMPlanner`: one streamed model call, parsed, repaired once |
| `structured` | the plan's JSON Schema and `submit_plan`: structured planning (`planning_mode`) |

The public names are re-exported by `pes_agent`; this package imports nothing itself, so its
modules can depend on one another in any order.
"""
