"""The JSON rules every client document passes (core/parsers.py)."""

import json

from django.test import SimpleTestCase

from core.parsers import (
    JSON_MAX_DEPTH,
    JSON_NUL,
    JSON_SURROGATE,
    JSON_TOO_DEEP,
    JSONRefused,
    json_loads_checked,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


class JsonGuardTests(SimpleTestCase):
    def refusal(self, document) -> JSONRefused:
        with self.assertRaises(JSONRefused) as caught:
            json_loads_checked(document)
        return caught.exception

    def test_depth_limit_is_the_same_for_text_and_bytes(self):
        for convert in (str, str.encode):
            assert json_loads_checked(convert(nested(JSON_MAX_DEPTH))) is not None
            assert self.refusal(convert(nested(JSON_MAX_DEPTH + 1))).message == JSON_TOO_DEEP

    def test_depth_is_checked_even_when_no_string_needs_checking(self):
        """The fast path (no risky escape) still walks containers."""
        document = json.dumps({"a": [0] * 100, "b": json.loads(nested(JSON_MAX_DEPTH))}).encode()
        assert self.refusal(document).message == JSON_TOO_DEEP

    def test_escapes_in_any_case_are_found(self):
        for document in (b'["\\uD800"]', b'["\\udBfF"]', b'{"x": ["ok", {"y": "\\uDC00"}]}'):
            assert self.refusal(document).message == JSON_SURROGATE
        assert self.refusal(b'{"x": ["ok", {"y": "\\u0000"}]}').fields == {"x[1].y": [JSON_NUL]}

    def test_an_escaped_backslash_before_u0000_is_ordinary_text(self):
        """`"\\\\u0000"` is a backslash followed by "u0000": it matches the fast scan but is fine."""
        assert json_loads_checked(b'["\\\\u0000", "\\\\ud800"]') == ["\\u0000", "\\ud800"]

    def test_surrogate_pairs_and_other_text_pass(self):
        document = b'["\\ud83d\\ude00", "caf\\u00e9", "\\u200b"]'
        assert json_loads_checked(document) == ["\U0001f600", "café", "\u200b"]

    def test_a_raw_surrogate_in_text_given_as_str_is_refused(self):
        assert self.refusal('["\ud800"]').message == JSON_SURROGATE

    def test_malformed_json_is_not_parsed(self):
        for document in (b"{", b"\xff", b"[1,]"):
            assert self.refusal(document).parsed is False
        assert self.refusal(b"[NaN]").parsed is True
