from datetime import datetime, timedelta

from django.test import SimpleTestCase

from core.errors import ApplicationError
from core.ranking import (
    DEFAULT_WEIGHTS,
    FIRST_PERSON_WORDS,
    Candidate,
    RankingWeights,
    first_named,
    first_person,
    fuse,
    mode_weights,
    named_dates,
    person_mentioned,
    person_named_whole,
    person_unsaid,
    weights_for_mode,
)

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


class RerankTermTests(SimpleTestCase):
    """The issue 19 re-rank terms, each alone (the others off)."""

    OFF = {"vector": 0, "context": 0, "neighbor": 0, "recency": 0, "speaker": 0, "session": 0, "dated": 0}

    def weights(self, **terms):
        return RankingWeights(**{**self.OFF, **terms})

    def test_speaker_named_in_the_query_lifts_their_turns(self):
        candidates = [
            Candidate(id="other", lexical=2.0, speaker="Caroline"),
            Candidate(id="named", lexical=1.5, speaker="Melanie"),
            Candidate(id="unnamed", lexical=0.0),
        ]
        weights = self.weights(speaker=1.0)
        ranked = fuse(candidates, weights=weights, query="What do Melanie's kids like?")
        assert [c.id for c, _ in ranked][0] == "named"
        # A query naming no speaker (or a name only inside a word) changes nothing.
        plain = fuse(candidates, weights=weights, query="What do the Melanies' kids like?")
        assert [c.id for c, _ in plain][0] == "other"

    def test_a_row_of_no_known_speaker_is_not_taken_for_another_speakers(self):
        """An entry written without a source (an agent's note) may be about what the named
        speaker said: the term demotes the turns of other speakers, and of speakers known to
        be nameless (""), not the rows nothing is known of (None). In a pool holding both
        kinds the bonus for the named speaker's sourced entries alone buried the notes."""
        candidates = [
            Candidate(id="note", lexical=1.6, speaker=None),
            Candidate(id="named", lexical=1.5, speaker="Melanie"),
            Candidate(id="other", lexical=1.9, speaker="Caroline"),
            Candidate(id="nameless", lexical=1.8, speaker=""),
        ]
        ranked = fuse(candidates, weights=self.weights(speaker=1.5), query="What do Melanie's kids like?")
        assert [c.id for c, _ in ranked] == ["note", "named", "other", "nameless"]

    def test_dated_term_needs_every_named_part_to_match(self):
        candidates = [
            Candidate(id="july", lexical=1.0, created_at=datetime(2023, 7, 9)),
            Candidate(id="june", lexical=1.2, created_at=datetime(2023, 6, 9)),
            Candidate(id="july-2022", lexical=1.3, created_at=datetime(2022, 7, 9)),
        ]
        ranked = fuse(candidates, weights=self.weights(dated=1.0), query="hikes in July 2023")
        assert [c.id for c, _ in ranked][0] == "july"

    def test_may_counts_as_a_month_only_beside_a_date(self):
        assert named_dates("What may Caroline do?") == (set(), set())
        assert named_dates("the race on 7 May 2023") == ({2023}, {5})

    def test_diversity_lets_a_second_session_in(self):
        candidates = [
            Candidate(id="s1-a", lexical=3.0, group="s1"),
            Candidate(id="s1-b", lexical=2.9, group="s1"),
            Candidate(id="s2-a", lexical=2.8, group="s2"),
        ]
        weights = self.weights()
        assert [c.id for c, _ in fuse(candidates, weights=weights)] == ["s1-a", "s1-b", "s2-a"]
        diverse = fuse(candidates, weights=self.weights(diversity=0.5))
        assert [c.id for c, _ in diverse] == ["s1-a", "s2-a", "s1-b"]

    def test_session_term_lifts_a_turn_whose_session_has_other_hits(self):
        candidates = [
            Candidate(id="alone", lexical=1.0, group="s1"),
            Candidate(id="with-company", lexical=1.0, group="s2"),
            Candidate(id="company", lexical=3.0, group="s2"),
            Candidate(id="weak", lexical=0.0, group="s3"),
        ]
        ranked = fuse(candidates, weights=self.weights(session=0.5))
        order = [c.id for c, _ in ranked]
        assert order.index("with-company") < order.index("alone")


class FirstPersonTests(SimpleTestCase):
    def test_named_speakers_speak_of_themselves(self):
        assert first_person("What do Melanie's kids like?", {"melanie"}) == "What do my kids like?"
        assert first_person("Where did MELANIE go?", {"melanie"}) == "Where did I go?"
        assert first_person("Is Melanie\u2019s dog called Luna?", {"melanie"}) == "Is my dog called Luna?"
        # Both named: each becomes the first person; the longer name is replaced first.
        assert first_person("Did Ann and Anna meet?", {"ann", "anna"}) == "Did I and I meet?"

    def test_addressed_speakers_are_spoken_to(self):
        asked = first_person(
            "What book did Caroline recommend to Melanie?", {"caroline"}, addressed={"melanie"}
        )
        assert asked == "What book did I recommend to you?"
        assert (
            first_person("Did I like Melanie\u2019s kids?", set(), addressed={"melanie"})
            == "Did I like your kids?"
        )
        # Each name takes its own form, the longer name first.
        assert first_person("Did Ann meet Anna?", {"ann"}, addressed={"anna"}) == "Did I meet you?"
        assert first_person("Did Ann meet Anna?", {"anna"}, addressed={"ann"}) == "Did you meet I?"

    def test_the_first_named_speaker_speaks_to_the_other(self):
        assert first_named("What book did Caroline recommend to Melanie?", {"caroline", "melanie"}) == (
            {"caroline"},
            {"melanie"},
        )
        assert first_named("Did MELANIE thank Caroline?", {"caroline", "melanie"}) == (
            {"melanie"},
            {"caroline"},
        )
        # A name that is part of the first speaker's is theirs, wherever it stands.
        named = {"caroline", "caroline rivera", "melanie"}
        assert first_named("Did Caroline Rivera call Melanie, Caroline?", named) == (
            {"caroline", "caroline rivera"},
            {"melanie"},
        )
        assert first_named("Did Ann meet Anna?", {"ann", "anna"}) == ({"ann"}, {"anna"})

    def test_only_whole_names_change(self):
        assert first_person("Do the Melanies like it?", {"melanie"}) == "Do the Melanies like it?"
        assert first_person("Where is Caroline?", {"melanie"}) == "Where is Caroline?"
        assert first_person("Is O'Neil's car red?", {"o'neil"}) == "Is my car red?"
        # A name is text, never a pattern.
        assert first_person("Is a.b (x) here?", {"a.b (x)"}) == "Is I here?"
        assert first_person("Is axb (x) here?", {"a.b (x)"}) == "Is axb (x) here?"


class FirstPersonWordsTests(SimpleTestCase):
    def test_the_words_a_writer_uses_of_themselves(self):
        for query in ("Where did I go?", "remind me", "MY sister", "is it mine", "i forgot", "I'm late"):
            with self.subTest(query=query):
                assert FIRST_PERSON_WORDS.search(query)
        for query in ("Where did Ida go?", "i.e. the lake", "my.example.com", "the mines", "Is IT here?"):
            with self.subTest(query=query):
                assert not FIRST_PERSON_WORDS.search(query)


class PersonMentionedTests(SimpleTestCase):
    """In a search of one person's memory, "the user" is that person."""

    def test_the_user_is_the_searched_person(self):
        assert person_mentioned("What are the user's hobbies?", "Ada") == "What are Ada's hobbies?"
        assert person_mentioned("Where did The User go?", "Ada") == "Where did Ada go?"
        assert person_mentioned("Is this user\u2019s dog Luna?", "Ada") == "Is Ada\u2019s dog Luna?"
        assert person_mentioned("user likes tea; our user said so", "Ada") == "Ada likes tea; Ada said so"
        assert person_mentioned("the user's user id", "Ada") == "Ada's user id"

    def test_the_user_before_what_they_own_is_a_possessive(self):
        # "What are the user preferences?" read as "What are Ada preferences?", and its
        # vector was searched as "What are I preferences?".
        assert person_mentioned("What are the user preferences?", "Ada") == "What are Ada's preferences?"
        assert (
            person_mentioned("user settings and user\tHobbies", "Ada") == "Ada's settings and Ada's\tHobbies"
        )
        assert first_person(person_mentioned("the user preferences", "user"), {"user"}) == "my preferences"
        # Still the subject before a verb, and never twice a possessive.
        assert person_mentioned("Does the user like tea?", "Ada") == "Does Ada like tea?"
        assert person_mentioned("the user needs help", "Ada") == "Ada needs help"
        assert person_mentioned("the user's preferences", "Ada") == "Ada's preferences"
        assert person_mentioned("the user prefers tea", "Ada") == "Ada prefers tea"
        assert person_mentioned("the user agesture", "Ada") == "Ada agesture"

    def test_a_given_name_alone_is_the_person(self):
        """A profile gives "Ada Lovelace"; an agent asks about "Ada"."""
        person = "Ada Lovelace"
        assert person_mentioned("Where did Ada go?", person) == "Where did Ada Lovelace go?"
        assert (
            person_mentioned("Ada's cat? And Ada Lovelace's?", person)
            == "Ada Lovelace's cat? And Ada Lovelace's?"
        )
        assert person_mentioned("Did the user meet Ada?", person) == "Did Ada Lovelace meet Ada Lovelace?"
        # Not another word, nor another name: "Adam", "ada" as written otherwise.
        assert person_mentioned("Did Adam see the ada code?", person) == "Did Adam see the ada code?"

    def test_a_given_name_that_is_also_a_word_starts_no_sentence(self):
        assert (
            person_mentioned("Will the user come? Will left.", "Will Smith")
            == "Will Will Smith come? Will left."
        )
        assert (
            person_mentioned("Will's car. Did Will drive?", "Will Smith")
            == "Will Smith's car. Did Will Smith drive?"
        )

    def test_a_title_is_no_given_name(self):
        assert person_mentioned("Did Dr call?", "Dr Who") == "Did Dr call?"
        assert person_mentioned("Did Dr. call?", "Dr. Who") == "Did Dr. call?"
        assert person_mentioned("Did A call?", "A Who") == "Did A call?"

    def test_other_words_holding_user_are_left_alone(self):
        for query in (
            "Which users like tea?",
            "What is the username?",
            "Is the superuser here?",
            "Is the user-facing page done?",
            "Did the user_id change?",
            "Is the user interface in dark mode?",
            "Which user agent sent it?",
        ):
            with self.subTest(query=query):
                assert person_mentioned(query, "Ada") == query

    def test_a_corpus_of_no_one_person_keeps_the_query(self):
        assert person_mentioned("What are the user's hobbies?", None) == "What are the user's hobbies?"
        assert person_mentioned("What are the user's hobbies?", "") == "What are the user's hobbies?"

    def test_a_name_is_text_never_a_replacement_pattern(self):
        for name in (r"Zo\1 \g<0>", "%(agent)s", "Ro'); DROP TABLE x; --"):
            with self.subTest(name=name):
                assert person_mentioned("Did the user call?", name) == f"Did {name} call?"


class PersonUnsaidTests(SimpleTestCase):
    """The lexical channel does not search the searched person's own name."""

    def test_the_persons_name_and_the_user_are_left_out(self):
        assert person_unsaid("What are Ada's hobbies?", "Ada").split() == ["What", "are", "hobbies?"]
        assert person_unsaid("Did ADA\u2019s user tell the user?", "Ada").split() == ["Did", "tell", "?"]
        assert person_unsaid("Did Adam call Ada?", "Ada").split() == ["Did", "Adam", "call", "?"]

    def test_a_given_name_alone_is_left_out_too(self):
        assert person_unsaid("Did Ada or Ada Lovelace call Adam?", "Ada Lovelace").split() == [
            "Did",
            "or",
            "call",
            "Adam?",
        ]

    def test_a_person_without_a_name_is_only_the_user(self):
        """Their name is "user": "user interface" still names no one."""
        assert person_unsaid("Did the user's user interface break?", "user").split() == [
            "Did",
            "user",
            "interface",
            "break?",
        ]

    def test_a_query_of_only_the_person_keeps_it(self):
        assert person_unsaid("Ada's?", "Ada") == "Ada's?"
        assert person_unsaid("the user", "Ada") == "the user"

    def test_a_corpus_of_no_one_person_keeps_the_query(self):
        assert person_unsaid("What are Ada's hobbies?", None) == "What are Ada's hobbies?"

    def test_a_name_is_text_never_a_pattern(self):
        assert person_unsaid("Is a.b (x) here? axb (x)", "a.b (x)").split() == ["Is", "here?", "axb", "(x)"]


class PersonNamedWholeTests(SimpleTestCase):
    def test_a_speaker_named_by_part_of_the_persons_name_is_the_person(self):
        query = "What did Caroline Rivera's class paint?"
        assert person_named_whole({"caroline"}, query, "Caroline Rivera") == {"caroline rivera"}
        assert first_person(query, {"caroline", "caroline rivera"}) == "What did my class paint?"

    def test_otherwise_no_one_is_added(self):
        assert (
            person_named_whole({"melanie"}, "Did Caroline Rivera call Melanie?", "Caroline Rivera") == set()
        )
        assert person_named_whole({"caroline"}, "Did Caroline call?", "Caroline Rivera") == set()
        assert person_named_whole(set(), "Did Caroline Rivera call?", "Caroline Rivera") == set()
        assert person_named_whole({"caroline"}, "Did Caroline Rivera call?", None) == set()


class ModeWeightsTests(SimpleTestCase):
    def test_the_pool_is_never_smaller_than_what_is_asked_for(self):
        weights = RankingWeights(pool=50)
        assert mode_weights("hybrid", weights, top_k=10) is weights
        assert mode_weights("hybrid", weights, top_k=80).pool == 80
        assert mode_weights("hybrid", None).pool == DEFAULT_WEIGHTS.pool
        assert mode_weights("hybrid", None, top_k=250).pool == 250

    def test_the_mode_switches_channels_and_keeps_the_pool(self):
        lexical = mode_weights("lexical", RankingWeights(pool=50), top_k=60)
        assert (lexical.vector, lexical.context, lexical.pool) == (0.0, 0.0, 60)
        with self.assertRaises(ApplicationError):
            mode_weights("fuzzy", None)
