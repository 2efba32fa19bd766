"""The rule for a quote that counts as evidence (core.lib.evidence)."""

import pytest

from core.lib.evidence import evidence_too_weak

CLAIM = "Ada moved to Lisbon in May."


@pytest.mark.parametrize(
    "quote",
    [
        "I",
        "yes",
        "Yes, ok.",
        "I did",
        "Porto",
        "E-42",
        "ok no",
        "是的",
        "The printer",
        "these days",
        "\u200b",
        "",
    ],
)
def test_a_quote_that_proves_nothing_about_the_claim_is_too_weak(quote):
    assert evidence_too_weak(quote, claim=CLAIM)


@pytest.mark.parametrize(
    "quote",
    [
        "I moved to Lisbon last May.",
        "Lisbon.",
        "to Lisbon",
        "moving to Lisbon",
        "I live in Porto now.",
        "我去年五月搬到了里斯本",
        "Mudei-me para Lisboa em maio.",
    ],
)
def test_a_quote_with_content_counts(quote):
    assert not evidence_too_weak(quote, claim=CLAIM)


def test_a_short_quote_counts_when_it_names_what_the_claim_names():
    """A stem is enough ("colour"/"color"), a fact's key and JSON value are its claim."""
    assert not evidence_too_weak("tz: UTC", claim="tz UTC")
    assert not evidence_too_weak("my colour: green", claim="favorite_color green")
    assert not evidence_too_weak("age: 42", claim='age {"years": 42}')
    assert evidence_too_weak("age: 42", claim="city Porto")
