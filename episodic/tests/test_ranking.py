from datetime import datetime, timedelta

from django.test import SimpleTestCase

from core.ranking import Candidate, RankingWeights, fuse, weights_for_mode

NOW = datetime(2026, 1, 1)


class FuseTests(SimpleTestCase):
    def test_channels_are_weighted_after_normalization(self):
        """A candidate strong in both channels beats one strong in a single channel."""
        ranked = fuse(
            [
                Candidate(id="both", lexical=5.0, vector=0.7),
                Candidate(id="lexical", lexical=9.0, vector=0.1),
                Candidate(id="vector", lexical=0.0, vector=0.9),
                Candidate(id="none", lexical=0.0, vector=0.0),
            ],
            weights=RankingWeights(neighbor=0, recency=0, context=0),
        )
        assert [c.id for c, _ in ranked][0] == "both"
        assert [c.id for c, _ in ranked][-1] == "none"

    def test_neighbours_lift_a_turn_and_are_not_ranked_themselves(self):
        """A turn next to a strong match gains; a neighbour fetched only for scoring is not returned."""
        candidates = [
            Candidate(id="a", lexical=1.0, vector=0.5, next_id="q"),
            Candidate(id="b", lexical=1.0, vector=0.5),
            Candidate(id="q", lexical=9.0, vector=0.9, rankable=False),
        ]
        ranked = fuse(candidates, weights=RankingWeights(recency=0, context=0))
        assert [c.id for c, _ in ranked] == ["a", "b"]

    def test_recency_decays_with_the_half_life(self):
        """Equal relevance: the newer candidate wins; the term halves every half-life."""
        ranked = fuse(
            [
                Candidate(id="old", lexical=1.0, created_at=NOW - timedelta(days=180)),
                Candidate(id="new", lexical=1.0, created_at=NOW),
            ],
            weights=RankingWeights(vector=0, context=0, neighbor=0, recency=1.0),
            now=NOW,
        )
        scores = {c.id: s for c, s in ranked}
        assert abs((scores["new"] - scores["old"]) - 0.5) < 1e-9

    def test_missing_vectors_take_the_pool_minimum(self):
        """A row not embedded yet competes on its other channels."""
        ranked = fuse(
            [
                Candidate(id="fresh", lexical=8.0, vector=None),
                Candidate(id="embedded", lexical=1.0, vector=0.4),
            ],
            weights=RankingWeights(neighbor=0, recency=0, context=0),
        )
        assert ranked[0][0].id == "fresh"

    def test_modes(self):
        assert weights_for_mode("lexical").vector == 0 and weights_for_mode("lexical").context == 0
        assert weights_for_mode("vector").lexical == 0
        assert fuse([]) == []

    def test_second_neighbours_weigh_less_than_first(self):
        """A strong match two turns away lifts a candidate less than one next to it."""
        candidates = [
            Candidate(id="near", lexical=1.0, next_id="q"),
            Candidate(id="far", lexical=1.0, next2_id="q"),
            Candidate(id="q", lexical=9.0, rankable=False),
        ]
        ranked = fuse(candidates, weights=RankingWeights(vector=0, context=0, recency=0))
        assert [c.id for c, _ in ranked] == ["near", "far"]
