"""Two extractions of one person's turn at once (two workers, two web processes) store each
entry once: the later one re-checks, under a per-person lock, what the earlier one stored
while it was embedding. core/tests/scaleout runs the real race across processes."""

from unittest import mock

from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.services import REJECT_DUPLICATE_HASH, REJECT_DUPLICATE_SIMILAR, entry_extract
from episodic.services.storing import _person_lock as person_lock
from episodic.tests.factories import (
    TEST_EMBEDDING_MODEL,
    bag_of_words_vectors,
    entry_factory,
    memory_user_factory,
)

TRANSCRIPT = [{"id": "m1", "role": "user", "content": "I moved to Lisbon last month and work at a bakery."}]
CANDIDATE = {
    "content": "Moved to Lisbon and works at a bakery.",
    "source": "user_assertion",
    "evidence": "I moved to Lisbon last month",
}


class Provider:
    model_name = TEST_EMBEDDING_MODEL

    def embed(self, texts):
        return bag_of_words_vectors(texts)


class ExtractStoredMeanwhileTests(MemoryTestCase):
    def setUp(self):
        self.person = memory_user_factory(self.workspace)

    def extract(self, meanwhile):
        """Extract while "another worker" stores `meanwhile()` after this one's first checks,
        just before it takes the person's lock: the window the re-check closes."""
        raced = []

        def lock_after_the_other_stored(**kwargs):
            raced.append(meanwhile())
            person_lock(**kwargs)

        with mock.patch("episodic.services.storing._person_lock", lock_after_the_other_stored):
            result = entry_extract(
                agent=self.agent,
                memory_user=self.person,
                transcript=TRANSCRIPT,
                candidates=[CANDIDATE],
                use_llm=False,
                provider=Provider(),
            )
        return result, raced[0]

    def test_the_same_entry_stored_while_embedding_is_not_stored_again(self):
        result, _ = self.extract(
            lambda: entry_factory(agent=self.agent, memory_user=self.person, content=CANDIDATE["content"])
        )
        assert result.stored == []
        assert [r["reason"] for r in result.rejected] == [REJECT_DUPLICATE_HASH]
        assert EpisodicEntry.objects.filter(memory_user=self.person).count() == 1

    def test_a_near_twin_stored_while_embedding_is_not_stored_again(self):
        result, raced = self.extract(
            lambda: entry_factory(
                agent=self.agent, memory_user=self.person, content="Moved to Lisbon, works at a bakery."
            )
        )
        assert result.stored == []
        (rejected,) = result.rejected
        assert rejected["reason"] == REJECT_DUPLICATE_SIMILAR
        assert rejected["duplicate_of"] == str(raced.pk)

    def test_an_unrelated_entry_stored_meanwhile_does_not_stop_the_store(self):
        result, _ = self.extract(
            lambda: entry_factory(agent=self.agent, memory_user=self.person, content="Has a sister, Ines.")
        )
        assert [e.content for e in result.stored] == [CANDIDATE["content"]]
        assert result.rejected == []
