"""Synthesis: the default synthesizer and its prompt.

| module | holds |
|---|---|
| `prompts` | the synthesis prompt: query, intent, plan and every tool result |
| `synthesizer` | `LLMSynthesizer`: one streamed model call for the final answer |

The public names are re-exported by `pes_agent`; this package imports nothing itself, so its
modules can depend on one another in any order.
"""
