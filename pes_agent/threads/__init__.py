"""Threads: a conversation's messages, its configuration and its saved agent state.

| module | holds |
|---|---|
| `messages` | `ConversationMessage`, `MessageRole`, history as prompt messages |
| `conversation` | `ConversationManager`: a thread's history through a `Storage` |
| `state` | `StateManager`, `ThreadContext`: thread config and agent state |
| `ids` | the one rule for thread ids (`check_thread_id`, `thread_id_problem`) |
| `reserved` | the ids of pes-agent's own records kept beside threads (not threads) |

The public names are re-exported by `pes_agent`; this package imports nothing itself, so its
modules can depend on one another in any order.
"""
