"""Short quotes in common phrasing that name exactly what the claim names: a number, a date,
a short name. The length rule is for fillers ("ok no", "是的"), not for these."""

import pytest

from core.lib.evidence import claim_text, evidence_too_weak


@pytest.mark.parametrize(
    ("quote", "claim"),
    [
        ("I'm 34.", claim_text("age", 34)),
        ("34", claim_text("age", 34)),
        ("I\u2019m 7", "Their son is 7 years old."),
        ("I'm Jo.", claim_text("name", "Jo")),
        ("Bo", "The person's name is Bo."),
        ("3/4", claim_text("birthday", "3/4")),
        ("It's O'Neil.", claim_text("surname", "O'Neil")),
        ("US", "Ada lives in the US."),
    ],
)
def test_a_short_quote_naming_exactly_what_the_claim_names_counts(quote, claim):
    assert not evidence_too_weak(quote, claim=claim)


@pytest.mark.parametrize(
    ("quote", "claim"),
    [
        ("是的", "用户的城市是北京"),
        ("ok no", "The person said no to the upgrade."),
        ("I'm 34.", claim_text("age", 43)),
        ("Jo", claim_text("name", "Bo")),
    ],
)
def test_a_short_quote_the_claim_does_not_name_stays_too_weak(quote, claim):
    assert evidence_too_weak(quote, claim=claim)
