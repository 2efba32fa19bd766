from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.testing import MemoryTestCase, fused_candidates, hnsw_above
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from runtime.tasks import embeddings_sweep_task
from threads.models import Message, MessageEmbedding
from threads.selectors import MESSAGE_WEIGHTS, message_search_related
from threads.services import message_embed_batch, message_embed_sweep, thread_append_messages, thread_create


class MessageRecallTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.old_thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, channel_chat_id="old"
        )
        self.old = thread_append_messages(
            thread=self.old_thread,
            messages=[
                {"role": "user", "content": "Which tent should I buy for the Alps trip?"},
                {"role": "assistant", "content": "A four-season tent rated for snow."},
                {"role": "user", "content": "My cat Miso hates the vet."},
            ],
        )
        self.new_thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, channel_chat_id="new"
        )
        self.new = thread_append_messages(
            thread=self.new_thread, messages=[{"role": "user", "content": "Packing for the Alps trip now."}]
        )

    def search(self, query, **kwargs):
        kwargs.setdefault("exclude_message_ids", [m.pk for m in self.new])
        return message_search_related(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, query=query, **kwargs
        )

    def test_embedding_stores_two_vectors_per_message_once(self):
        """Each user/assistant message gets a vector alone and one after its predecessor; reruns skip."""
        ids = [m.pk for m in self.old + self.new]
        assert message_embed_batch(message_ids=ids) == 4
        assert message_embed_batch(message_ids=ids) == 0
        row = MessageEmbedding.objects.get(message=self.old[1])
        assert row.model == "test-bag-of-words" and row.dimensions == 64
        assert row.memory_user_id == self.person.pk and row.agent_id == self.agent.pk
        texts = self.server.requests[-1][1]["input"]
        assert any(t.startswith("user: Which tent") and "\nassistant: A four-season tent" in t for t in texts)

    def test_related_older_messages_of_the_same_person_are_recalled(self):
        """The answer next to the matching question is recalled, the current thread is excluded."""
        message_embed_batch(message_ids=[m.pk for m in self.old + self.new])
        result = self.search("Packing for the Alps trip now.", top_k=2)
        ids = [h.message.pk for h in result.hits]
        assert ids[0] == self.old[0].pk
        assert self.old[1].pk in ids
        assert self.new[0].pk not in ids

    def test_messages_are_found_lexically_before_their_vectors(self):
        """No vectors yet: the lexical channel still recalls the message."""
        result = self.search("cat vet")
        assert [h.message.pk for h in result.hits][0] == self.old[2].pk

    def test_another_persons_threads_are_never_recalled(self):
        other = memory_user_factory(self.workspace, canonical_id="telegram:9", display_name="Bo")
        message_embed_batch(message_ids=[m.pk for m in self.old])
        result = message_search_related(
            workspace=self.workspace, agent=self.agent, memory_user=other, query="Alps tent"
        )
        assert result.hits == []

    def test_the_candidate_pool_is_never_smaller_than_what_is_asked_for(self):
        """Messages rank from 50 candidates a channel; a caller asking for more gets more."""
        from threads.selectors import MESSAGE_WEIGHTS

        assert MESSAGE_WEIGHTS.pool == 50
        many = thread_append_messages(
            thread=self.old_thread,
            messages=[{"role": "user", "content": f"Kite number {i} flew."} for i in range(70)],
        )
        result = self.search("kite", top_k=60, mode="lexical")
        assert len(result.hits) == 60
        assert {h.message.pk for h in result.hits} <= {m.pk for m in many}

    def test_sweep_enqueues_messages_without_vectors(self):
        """The periodic sweep finds unembedded messages of agents with semantic recall on."""
        assert message_embed_sweep(limit=100) == []
        self.agent.memory_settings = {"semantic_recall": True}
        self.agent.save()
        assert len(message_embed_sweep(limit=100)) == 4
        with self.settings(CELERY_TASK_ALWAYS_EAGER=True):
            embeddings_sweep_task.apply(kwargs={"grace_seconds": 0})
        assert message_embed_sweep(limit=100) == []
        assert MessageEmbedding.objects.count() == 4

    def test_a_large_scope_is_counted_once_whatever_a_search_excludes(self):
        """The scope-size memo is keyed by what the count reads, not by the excluded ids,
        which change on every turn."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from core import ranking

        message_embed_batch(message_ids=[m.pk for m in self.old + self.new])
        ranking._scope_sizes.clear()
        self.addCleanup(ranking._scope_sizes.clear)
        with hnsw_above(1), CaptureQueriesContext(connection) as queries:
            self.search("Alps tent")
            self.search("Alps tent", exclude_message_ids=[self.old[0].pk])
        size_count = "SELECT count(*) FROM (SELECT 1 FROM episodes_messageembedding"
        assert len([q for q in queries if size_count in q["sql"]]) == 1


class MessageGraphTests(MemoryTestCase):
    """Vectors of the local model (the workspace's default), which has an HNSW index."""

    def test_a_search_on_the_hnsw_plan_puts_only_its_persons_messages_in_the_graph(self):
        def messages(person, chat, contents):
            thread = thread_create(
                workspace=self.workspace, agent=self.agent, memory_user=person, channel_chat_id=chat
            )
            return thread_append_messages(
                thread=thread, messages=[{"role": "user", "content": c} for c in contents]
            )

        person = memory_user_factory(self.workspace)
        other = memory_user_factory(self.workspace, canonical_id="telegram:9", display_name="Bo")
        mine = messages(person, "a", ["We camped in the Alps.", "The tent leaked.", "I adopted a cat."])
        theirs = messages(other, "b", ["Our tent in the Alps was fine."])
        message_embed_batch(message_ids=[m.pk for m in mine + theirs])

        def search():
            result = message_search_related(
                workspace=self.workspace, agent=self.agent, memory_user=person, query="Alps tent"
            )
            return result.plan, [h.message.pk for h in result.hits]

        with hnsw_above(1):
            plan, found = search()
            assert (plan, found) == ("hnsw", search()[1]) and found
        assert set(found) <= {m.pk for m in mine}
        graph = MessageEmbedding.objects.filter(in_graph=True)
        assert set(graph.values_list("memory_user_id", flat=True)) == {person.pk}
        assert graph.count() == 3


class SpeakerSearchCase(MemoryTestCase):
    """Caroline's thread of `TURNS`, embedded by the local test endpoint, which records what
    it embeds."""

    TURNS: list[dict] = []

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace, display_name="Caroline")
        thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, channel_chat_id="s1"
        )
        self.turns = thread_append_messages(thread=thread, messages=self.TURNS)
        message_embed_batch(message_ids=[m.pk for m in self.turns])

    def search(self, query, **kwargs):
        return message_search_related(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, query=query, **kwargs
        )

    def embedded_texts(self):
        return [body["input"] for path, body in self.server.requests if path.endswith("/embeddings")]


class FirstPersonQueryTests(SpeakerSearchCase):
    """A query naming a speaker is searched by the vectors as that speaker would say it."""

    TURNS = [
        {"role": "user", "name": "Caroline", "content": "Melanie, do Melanie's kids like museums?"},
        {"role": "assistant", "name": "Melanie", "content": "My kids love the dinosaur bones."},
        {"role": "user", "name": "Caroline", "content": "I painted a lake at sunrise."},
    ]

    def test_the_named_speaker_becomes_the_first_person(self):
        """The vectors search with "my kids", the words of Melanie's own turn, not with her
        name, which Caroline's question holds twice."""
        before = len(self.embedded_texts())
        result = self.search("What do Melanie's kids like?", mode="vector")
        assert self.embedded_texts()[before:] == [["What do Melanie's kids like?"], ["What do my kids like?"]]
        assert result.hits[0].message.pk == self.turns[1].pk

    def test_two_named_speakers_are_a_turn_between_them(self):
        """No turn says "I and I": the first speaker named speaks, to the other."""
        before = len(self.embedded_texts())
        self.search("What did Caroline ask about Melanie's kids?")
        assert self.embedded_texts()[before:] == [
            ["What did Caroline ask about Melanie's kids?"],
            ["What did I ask about your kids?"],
        ]

    def test_a_query_naming_no_speaker_is_embedded_once(self):
        before = len(self.embedded_texts())
        self.search("Which lake was painted?")
        assert self.embedded_texts()[before:] == [["Which lake was painted?"]]

    def test_a_query_naming_no_speaker_costs_no_statement_more(self):
        """The speakers are read with the pool's rows: a search whose query names none of
        them makes the statements it makes with the speaker term off."""

        def statements(**kwargs):
            self.search("Which lake was painted?", **kwargs)  # the scope's counts are cached
            with CaptureQueriesContext(connection) as captured:
                self.search("Which lake was painted?", **kwargs)
            return len(captured)

        assert statements() == statements(weights=replace(MESSAGE_WEIGHTS, speaker=0.0))

    def test_another_persons_speakers_are_not_read(self):
        """Only the speakers of this person's pool count: Melanie speaks in Caroline's
        threads, not in Bo's, so Bo's search is embedded once and finds nothing of hers."""
        other = memory_user_factory(self.workspace, canonical_id="telegram:9", display_name="Bo")
        thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=other, channel_chat_id="b"
        )
        mine = thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "The kids like kites."}]
        )
        message_embed_batch(message_ids=[m.pk for m in mine])
        before = len(self.embedded_texts())
        result = message_search_related(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=other,
            query="What do Melanie's kids like?",
        )
        assert self.embedded_texts()[before:] == [["What do Melanie's kids like?"]]
        assert [h.message.pk for h in result.hits] == [mine[0].pk]

    def test_a_failed_rewrite_keeps_the_querys_own_vector(self):
        """The second embedding fails: the search still answers, from the first vector."""
        from core.embeddings import embedding_provider_for

        provider = embedding_provider_for(self.workspace)
        vector = provider.embed(["What do Melanie's kids like?"])[0]
        self.server.fail_next = 10
        result = self.search("What do Melanie's kids like?", query_vector=vector, model=provider.model_name)
        assert self.server.requests[-1][1]["input"] == ["What do my kids like?"]
        assert {h.message.pk for h in result.hits} == {m.pk for m in self.turns}

    def test_a_vector_of_another_model_is_not_rewritten(self):
        """A caller's vector under a model the workspace no longer uses: no second embedding
        could be compared with it, so none is made."""
        before = len(self.server.requests)
        self.search("What do Melanie's kids like?", query_vector=[0.1] * 64, model="another-model")
        assert len(self.server.requests) == before


class UnnamedUserTests(SpeakerSearchCase):
    """Most chat clients send the user's turns without a name: in the person's own threads, a
    user message without one is the person's (their display name), for the speaker term and
    the first-person query alike."""

    TURNS = [
        {"role": "assistant", "content": "Caroline, what did Caroline's class paint?"},
        {"role": "user", "content": "My class painted a lake at sunrise."},
        {"role": "user", "name": "Bo", "content": "My class painted a boat."},
    ]

    def speakers(self, query):
        with fused_candidates() as captured:
            self.search(query)
        return [captured[m.pk].speaker for m in self.turns]

    def test_the_persons_unnamed_turn_speaks_in_the_first_person(self):
        before = len(self.embedded_texts())
        result = self.search("What did Caroline's class paint?")
        assert self.embedded_texts()[before:] == [
            ["What did Caroline's class paint?"],
            ["What did my class paint?"],
        ]
        assert result.hits[0].message.pk == self.turns[1].pk

    def test_only_an_unnamed_user_message_is_the_persons(self):
        """The agent's turns are not the person's (a speaker no query names: ""), and a user
        message that names its speaker (a group chat) keeps that name."""
        assert self.speakers("What did Caroline paint?") == ["", "Caroline", "Bo"]

    def test_a_person_without_a_display_name_speaks_as_the_user(self):
        """Nothing names them: their unnamed turns speak as "user", the role they are
        indexed under, and a query naming someone else is not rewritten for them."""
        self.person.display_name = " "
        self.person.save(update_fields=["display_name"])
        before = len(self.embedded_texts())
        self.search("What did Caroline's class paint?")
        assert self.embedded_texts()[before:] == [["What did Caroline's class paint?"]]
        assert self.speakers("What did Caroline paint?") == ["", "user", "Bo"]

    def test_any_display_name_is_only_a_name(self):
        """A display name is the person's own text: quotes, SQL and pattern characters in it
        are matched as a name and nothing else."""
        for name in ("Ro'); DROP TABLE threads_message; --", "C++ (dev) [x]*", "Zoë \\d+ %(agent)s"):
            with self.subTest(name=name):
                self.person.display_name = name
                self.person.save(update_fields=["display_name"])
                result = self.search(f"What did {name}'s class paint?")
                assert result.hits[0].message.pk == self.turns[1].pk
                assert self.speakers("paint") == ["", name, "Bo"]


class AskedByPersonTests(SpeakerSearchCase):
    """The message a context is built for is the person's own words: its "I" and "my" name
    them for the speaker term, as their name would (core.ranking.hybrid_search)."""

    TURNS = UnnamedUserTests.TURNS

    def scores(self, query, **kwargs):
        return {h.message.pk: h.score for h in self.search(query, **kwargs).hits}

    def test_my_lifts_the_persons_own_turns(self):
        asked = self.scores("What did my class paint?", asked_by_person=True)
        unasked = self.scores("What did my class paint?")
        person, agent, bo = self.turns[1].pk, self.turns[0].pk, self.turns[2].pk
        assert asked[person] - unasked[person] == pytest.approx(MESSAGE_WEIGHTS.speaker)
        assert asked[agent] == pytest.approx(unasked[agent])
        assert asked[bo] == pytest.approx(unasked[bo])
        assert next(iter(asked)) == person

    def test_asked_as_by_name(self):
        """Ranked as "What did Caroline's class paint?" is: the same speaker term."""
        asked = self.scores("What did my class paint?", asked_by_person=True, mode="lexical")
        named = self.scores("What did Caroline's class paint?", mode="lexical")
        assert asked == pytest.approx(named)

    def test_a_question_without_the_first_person_is_unchanged(self):
        for query in ("What did the class paint?", "Which class painted, i.e. a lake?"):
            with self.subTest(query=query):
                assert self.scores(query, asked_by_person=True) == pytest.approx(self.scores(query))

    def test_the_query_is_embedded_as_written(self):
        before = len(self.embedded_texts())
        self.search("What did my class paint?", asked_by_person=True)
        assert self.embedded_texts()[before:] == [["What did my class paint?"]]


class AskedByPersonNamingAnotherTests(SpeakerSearchCase):
    """The person's own words name the speaker they talk with: that speaker is "you" to the
    vectors, as the person's "I" is the person (core.ranking.first_person's `addressed`)."""

    TURNS = FirstPersonQueryTests.TURNS

    def embedded_for(self, query, **kwargs):
        """What a search for `query` embeds: the query, then its rewrite if it has one."""
        before = len(self.embedded_texts())
        self.search(query, **kwargs)
        return [texts[0] for texts in self.embedded_texts()[before:]]

    def test_the_other_speaker_is_spoken_to(self):
        query = "What did I ask about Melanie's kids?"
        assert self.embedded_for(query, asked_by_person=True) == [query, "What did I ask about your kids?"]

    def test_the_persons_own_name_is_still_the_first_person(self):
        query = "Did Caroline or I ask Melanie?"
        assert self.embedded_for(query, asked_by_person=True) == [query, "Did I or I ask you?"]

    def test_not_asked_by_the_person_every_named_speaker_is_the_first_person(self):
        query = "What did I ask about Melanie's kids?"
        assert self.embedded_for(query) == [query, "What did I ask about my kids?"]


class UserMentionTests(SpeakerSearchCase):
    """Agents ask about the person they serve as "the user": in that person's memory it ranks
    as their name would (core.ranking.person_mentioned)."""

    TURNS = UnnamedUserTests.TURNS

    def ranked(self, query, **kwargs):
        return [(h.message.pk, round(h.score, 6)) for h in self.search(query, **kwargs).hits]

    def assert_searched_as_mine(self, query, *, display_name=None, **kwargs):
        """`query` about the person's class is searched by the vectors as "my class", and
        finds the person's own turn first."""
        if display_name is not None:
            self.person.display_name = display_name
            self.person.save(update_fields=["display_name"])
        before = len(self.embedded_texts())
        result = self.search(query, **kwargs)
        assert self.embedded_texts()[before:] == [[query], ["What did my class paint?"]]
        assert result.hits[0].message.pk == self.turns[1].pk

    def test_the_user_is_searched_in_the_persons_own_words(self):
        self.assert_searched_as_mine("What did the user's class paint?", mode="vector")

    def test_the_user_ranks_as_the_persons_name(self):
        """Lexically "the user" is the name: the same rows, the same scores."""
        assert self.ranked("What did the user's class paint?", mode="lexical") == self.ranked(
            "What did Caroline's class paint?", mode="lexical"
        )

    def test_a_person_without_a_display_name_is_the_user(self):
        self.assert_searched_as_mine("What did the user's class paint?", display_name="")

    def test_the_persons_name_is_not_searched_lexically(self):
        """Their name is in the agent's turn ("Caroline, what did ..."), not in their own: BM25
        scores the turns as if the query did not name her, and the speaker term lifts hers."""

        def lexical(query):
            with fused_candidates() as captured:
                hits = self.search(query, mode="lexical").hits
            return hits, {pk: captured[pk].lexical for pk in captured}

        named_hits, named = lexical("What did Caroline's class paint?")
        _, unnamed = lexical("What did the class paint?")
        assert named == unnamed
        assert named_hits[0].message.pk == self.turns[1].pk

    def test_a_full_display_name_is_named_by_its_given_name(self):
        """The profile says "Caroline Rivera"; the agent asks about "Caroline"."""
        self.assert_searched_as_mine("What did Caroline's class paint?", display_name="Caroline Rivera")

    def test_turns_named_by_the_given_name_speak_for_the_full_name(self):
        """The client names the person's turns "Caroline", the profile "Caroline Rivera":
        "the user's class" is searched as "my class", not "I Rivera's class"."""
        Message.objects.filter(pk=self.turns[1].pk).update(name="Caroline")
        self.assert_searched_as_mine("What did the user's class paint?", display_name="Caroline Rivera")

    def test_users_in_general_are_no_one(self):
        before = len(self.embedded_texts())
        self.search("What did users paint?")
        assert self.embedded_texts()[before:] == [["What did users paint?"]]
