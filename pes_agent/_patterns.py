"""Regular expressions that both check values and document them in JSON Schemas.

They are written in the syntax Python's `re`, ECMA-262 (JSON Schema's `pattern`) and Rust's
`regex` (pydantic) read alike: character classes of `\\xHH` and `\\uHHHH` escapes, no anchors
whose meaning differs between them (Python's `$` also matches before a final line break).
"""

from __future__ import annotations

__all__ = ["BLANK", "NOT_BLANK"]

#: A character class of the characters `str.isspace` calls white space (what `str.strip`
#: removes). Spelt out: ECMA-262's `\\s` differs (it takes U+FEFF, and not U+001C-U+001F).
BLANK = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
#: Found in a string that holds something besides white space (search, not match).
NOT_BLANK = f"[^{BLANK}]"
