"""The regular expressions shared by validation and the JSON Schemas that document it."""

from __future__ import annotations

import re
import sys

import jsonschema_rs

from pes_agent._patterns import BLANK, NOT_BLANK


def test_blank_is_exactly_what_str_isspace_calls_white_space() -> None:
    """BLANK matches a character exactly when `str.isspace` (so `str.strip`) takes it."""
    blank = re.compile(f"[{BLANK}]")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert (blank.fullmatch(char) is not None) is char.isspace(), hex(code)


def test_not_blank_reads_alike_in_python_and_a_json_schema_validator() -> None:
    """A string of white space only fails NOT_BLANK in Python's `re` and in jsonschema-rs;
    a string with anything else in it passes both."""
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": NOT_BLANK})
    for text, expected in [("", False), (" \t\u3000\n", False), (" a ", True), ("\ufeff", True)]:
        assert (re.search(NOT_BLANK, text) is not None) is expected, ascii(text)
        assert schema.is_valid(text) is expected, ascii(text)
