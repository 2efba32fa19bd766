"""Two extractions of one person's turn at once (two workers, two web processes) store each
entry once: the later one re-checks, under a per-person lock, what the earlier one stored
while it was embedding. core/tests/scaleout runs the real race across processes."""

from unittest import mock

from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding, EpisodicEntry
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


def extract_racing(test, meanwhile, *, transcript, candidates):
    """(the extraction's result, what `meanwhile()` returned), `meanwhile` run just before
    the extraction takes the person's lock."""
    raced = []

    def lock_after_the_other_stored(**kwargs):
        raced.append(meanwhile())
        person_lock(**kwargs)

    with mock.patch("episodic.services.storing._person_lock", lock_after_the_other_stored):
        result = entry_extract(
            agent=test.agent,
            memory_user=test.person,
            transcript=transcript,
            candidates=candidates,
            use_llm=False,
            provider=Provider(),
        )
    return result, raced[0]


class ExtractStoredMeanwhileTests(MemoryTestCase):
    def setUp(self):
        self.person = memory_user_factory(self.workspace)

    def extract(self, meanwhile):
        """Extract while "another worker" stores `meanwhile()` after this one's first checks,
        just before it takes the person's lock: the window the re-check closes."""
        return extract_racing(self, meanwhile, transcript=TRANSCRIPT, candidates=[CANDIDATE])

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


OTHER = {"content": "Has a sister called Ines.", "source": "user_assertion", "evidence": "my sister Ines"}
BATCH_TRANSCRIPT = [*TRANSCRIPT, {"id": "m2", "role": "user", "content": "She is my sister Ines."}]


class BatchStoredMeanwhileTests(MemoryTestCase):
    """Two candidates at once: the first check reads the scope's vectors and the check under
    the lock reads only the vector rows the first one did not. Every way a twin can appear
    between them is a row it did not read."""

    def setUp(self):
        self.person = memory_user_factory(self.workspace)
        # Stored before: read by the first check, skipped by the second.
        for index in range(5):
            entry_factory(agent=self.agent, memory_user=self.person, content=f"Likes {index} kinds of tea.")

    def extract(self, meanwhile):
        with CaptureQueriesContext(connection) as queries:
            raced = extract_racing(
                self, meanwhile, transcript=BATCH_TRANSCRIPT, candidates=[CANDIDATE, OTHER]
            )
        scans = [q["sql"] for q in queries.captured_queries if "vector_send" in q["sql"]]
        assert len(scans) == 2 and "<> ALL" not in scans[0] and "<> ALL" in scans[1]
        return raced

    def assert_twin_rejected(self, result, twin):
        assert [e.content for e in result.stored] == [OTHER["content"]]
        (rejected,) = result.rejected
        assert rejected["reason"] == REJECT_DUPLICATE_SIMILAR
        assert rejected["duplicate_of"] == str(twin.pk)

    def test_an_unrelated_entry_stored_meanwhile_does_not_stop_the_store(self):
        result, _ = self.extract(
            lambda: entry_factory(agent=self.agent, memory_user=self.person, content="Plays chess weekly.")
        )
        assert sorted(e.content for e in result.stored) == sorted([CANDIDATE["content"], OTHER["content"]])

    def test_a_held_twin_approved_meanwhile_is_a_twin(self):
        held = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Moved to Lisbon, works at a bakery.",
            review=EpisodicEntry.Review.HELD,
        )

        def approve():
            EpisodicEntry.objects.filter(pk=held.pk).update(review=EpisodicEntry.Review.APPROVED)
            return held

        result, raced = self.extract(approve)
        self.assert_twin_rejected(result, raced)

    def test_a_stored_entry_edited_into_a_twin_meanwhile_is_a_twin(self):
        """An edit replaces the entry's vector row: the new row was not read before."""
        edited = entry_factory(agent=self.agent, memory_user=self.person, content="Grows basil outside.")

        def edit():
            content = "Moved to Lisbon, works at a bakery."
            EpisodicEntry.objects.filter(pk=edited.pk).update(content=content)
            EntryEmbedding.objects.filter(entry=edited).delete()
            EntryEmbedding.objects.create(
                entry=edited,
                workspace=edited.workspace,
                agent=self.agent,
                memory_user=self.person,
                model=TEST_EMBEDDING_MODEL,
                dimensions=len(bag_of_words_vectors([content])[0]),
                embedding=bag_of_words_vectors([content])[0],
            )
            return edited

        result, raced = self.extract(edit)
        self.assert_twin_rejected(result, raced)

    def test_a_twin_moved_to_this_person_by_a_merge_meanwhile_is_a_twin(self):
        other = memory_user_factory(self.workspace, canonical_id="telegram:2")
        content = "Moved to Lisbon, works at a bakery."
        twin = entry_factory(agent=self.agent, memory_user=other, content=content)

        def move():
            EpisodicEntry.objects.filter(pk=twin.pk).update(memory_user=self.person)
            EntryEmbedding.objects.filter(entry=twin).update(memory_user=self.person)
            return twin

        result, raced = self.extract(move)
        self.assert_twin_rejected(result, raced)
