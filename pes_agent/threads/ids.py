"""The one rule for thread ids, used by the library, the command line and the HTTP API alike.

A thread id is up to `THREAD_ID_MAX_LENGTH` characters, not only white space, with no control
characters (C0, DEL, C1, line and paragraph separators, bidirectional overrides: they would
forge lines in logs and event streams, or hide what a listing shows) nor lone surrogates (no
UTF-8 text holds them, so no store could save the id), and does not start with
`RESERVED_PREFIX` (pes-agent's own records live there).
"""

from __future__ import annotations

import re

from pes_agent.errors import UsageError
from pes_agent.threads.reserved import RESERVED_PREFIX

__all__ = [
    "THREAD_ID_FORBIDDEN",
    "THREAD_ID_MAX_LENGTH",
    "check_thread_id",
    "thread_id_problem",
]

#: The longest thread id accepted.
THREAD_ID_MAX_LENGTH = 200
#: A regular-expression character class of the characters a thread id may not hold.
THREAD_ID_FORBIDDEN = (
    "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069\\ud800-\\udfff"
)
_FORBIDDEN = re.compile(f"[{THREAD_ID_FORBIDDEN}]")


def thread_id_problem(thread_id: object) -> str | None:
    """Say why `thread_id` is not a usable thread id, e.g. to answer a form or request with it.

    Args:
        thread_id: The id to check; any object (a non-string is not usable).

    Returns:
        What is wrong, as a sentence with the fix; None when the id is usable.
    """
    if not isinstance(thread_id, str):
        return f"thread_id must be a string, e.g. 'thread-1'; got {type(thread_id).__name__}"
    if not thread_id.strip():
        return "thread_id must be a non-empty string, e.g. 'thread-1'"
    if len(thread_id) > THREAD_ID_MAX_LENGTH:
        return f"thread_id is {len(thread_id)} characters long; use at most {THREAD_ID_MAX_LENGTH}"
    found = _FORBIDDEN.search(thread_id)
    if found is not None:
        code = ord(found.group())
        what = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "the control character"
        return (
            f"thread_id holds {what} U+{code:04X} at position {found.start()}; "
            "use printable characters only"
        )
    if thread_id.startswith(RESERVED_PREFIX):
        return (
            f"thread_id may not start with {RESERVED_PREFIX!r}: pes-agent keeps its own "
            "records under that prefix; choose another id"
        )
    return None


def check_thread_id(thread_id: object) -> str:
    """Check a thread id before using it, as every pes-agent entry point does.

    Args:
        thread_id: The id to check.

    Returns:
        `thread_id` itself, typed as a `str`.

    Raises:
        UsageError: The id is not usable; the message says why (`thread_id_problem`).
    """
    problem = thread_id_problem(thread_id)
    if problem is not None:
        raise UsageError(problem)
    assert isinstance(thread_id, str)
    return thread_id
