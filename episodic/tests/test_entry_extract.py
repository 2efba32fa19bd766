import json

from django.test import override_settings

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import (
    REJECT_DUPLICATE_HASH,
    REJECT_DUPLICATE_SIMILAR,
    REJECT_EMPTY,
    REJECT_EVIDENCE_NOT_FOUND,
    REJECT_EVIDENCE_NOT_USER,
    REJECT_KNOWN,
    REJECT_LIMIT,
    REJECT_NO_EVIDENCE,
    REJECT_SOURCE,
    entry_extract,
)
from episodic.tests.factories import (
    entry_factory,
    memory_user_factory,
    use_test_chat,
    use_test_embeddings,
)

TRANSCRIPT = [
    {"id": "m1", "role": "user", "content": "I moved to Lisbon last month and started a job at a bakery."},
    {"id": "m2", "role": "assistant", "content": "I checked: the bakery on Rua Augusta opens at 7 am."},
    {"id": "m3", "role": "user", "content": "Great,   thanks! My sister Ines visits in June."},
]


class EntryExtractTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def extract(self, candidates, **kwargs):
        kwargs.setdefault("use_llm", False)
        return entry_extract(
            agent=self.agent, memory_user=self.person, transcript=TRANSCRIPT, candidates=candidates, **kwargs
        )

    def test_valid_candidate_is_stored_with_its_evidence_and_vector(self):
        """A user assertion quoting a user message is stored, hashed and embedded at once."""
        result = self.extract(
            [
                {
                    "content": "Moved to  Lisbon and works at a bakery.",
                    "source": "user_assertion",
                    "evidence": "I moved to Lisbon last month",
                }
            ]
        )
        assert result.rejected == []
        entry = EpisodicEntry.objects.get()
        assert entry.content == "Moved to Lisbon and works at a bakery."
        assert entry.source_message_ids == ["m1"]
        assert entry.embedding_model == "test-bag-of-words"
        assert EntryEmbedding.objects.filter(entry=entry).count() == 1
        assert result.stored == [entry]

    def test_evidence_is_matched_across_whitespace_differences_only(self):
        """Collapsed whitespace matches; a paraphrase does not."""
        result = self.extract(
            [
                {
                    "content": "Sister Ines visits in June.",
                    "source": "user_assertion",
                    "evidence": "Great, thanks! My sister Ines visits in June.",
                },
                {
                    "content": "Sister visits soon.",
                    "source": "user_assertion",
                    "evidence": "my sister comes soon",
                },
            ]
        )
        assert [e.content for e in result.stored] == ["Sister Ines visits in June."]
        assert [r["reason"] for r in result.rejected] == [REJECT_EVIDENCE_NOT_FOUND]

    def test_user_sources_need_user_evidence(self):
        """A user assertion backed only by an assistant message is rejected; a verified finding is not."""
        result = self.extract(
            [
                {
                    "content": "The bakery opens at 7 am.",
                    "source": "user_assertion",
                    "evidence": "the bakery on Rua Augusta opens at 7 am",
                },
                {
                    "content": "The bakery on Rua Augusta opens at 7 am.",
                    "source": "verified_assistant_finding",
                    "evidence": "the bakery on Rua Augusta opens at 7 am",
                },
            ]
        )
        assert [r["reason"] for r in result.rejected] == [REJECT_EVIDENCE_NOT_USER]
        assert [e.source for e in result.stored] == ["verified_assistant_finding"]

    def test_bad_candidates_get_a_reason_each(self):
        """Empty content, unknown labels and missing evidence are rejected, one reason per candidate."""
        result = self.extract(
            [
                {"content": "   ", "source": "user_assertion", "evidence": "Lisbon"},
                {"content": "Lives in Lisbon.", "source": "gossip", "evidence": "Lisbon"},
                {"content": "Lives in Lisbon.", "source": "user_assertion", "evidence": ""},
            ]
        )
        assert [r["reason"] for r in result.rejected] == [REJECT_EMPTY, REJECT_SOURCE, REJECT_NO_EVIDENCE]
        assert not EpisodicEntry.objects.exists()

    def test_exact_duplicates_in_the_turn_and_in_storage_are_rejected(self):
        """The normalized, case-folded hash dedupes within the turn and against stored entries."""
        entry_factory(agent=self.agent, memory_user=self.person, content="Sister Ines visits in June.")
        result = self.extract(
            [
                {
                    "content": "sister ines visits  in june.",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                },
                {
                    "content": "Works at a bakery.",
                    "source": "user_assertion",
                    "evidence": "a job at a bakery",
                },
                {
                    "content": "works at a BAKERY.",
                    "source": "user_assertion",
                    "evidence": "a job at a bakery",
                },
            ]
        )
        assert [r["reason"] for r in result.rejected] == [REJECT_DUPLICATE_HASH, REJECT_DUPLICATE_HASH]
        assert [e.content for e in result.stored] == ["Works at a bakery."]

    def test_similar_entries_are_rejected_at_the_agents_threshold(self):
        """Cosine >= dedupe_threshold against stored entries or the same turn is a duplicate."""
        stored = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada works at a bakery in Lisbon"
        )
        result = self.extract(
            [
                {
                    "content": "Ada works at a bakery in Lisbon now",
                    "source": "user_assertion",
                    "evidence": "a job at a bakery",
                },
                {
                    "content": "Sister Ines visits in June",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                },
                {
                    "content": "In June sister Ines visits",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                },
            ]
        )
        reasons = [(r["reason"], r.get("duplicate_of")) for r in result.rejected]
        assert reasons == [(REJECT_DUPLICATE_SIMILAR, str(stored.pk)), (REJECT_DUPLICATE_SIMILAR, None)]
        assert all(r["similarity"] >= 0.86 for r in result.rejected)
        assert [e.content for e in result.stored] == ["Sister Ines visits in June"]

    def test_the_threshold_is_read_from_the_agent_settings(self):
        """An agent with threshold 1.0 keeps near-duplicates."""
        self.agent.memory_settings = {"dedupe_threshold": 1.0}
        self.agent.save()
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada works at a bakery in Lisbon")
        result = self.extract(
            [
                {
                    "content": "Ada works at a bakery in Lisbon now",
                    "source": "user_assertion",
                    "evidence": "a job at a bakery",
                }
            ]
        )
        assert len(result.stored) == 1

    @override_settings(EPISODIC_MAX_ENTRIES_PER_TURN=1, EPISODIC_MAX_ENTRY_LENGTH=30)
    def test_caps_on_count_and_length(self):
        """Past max_entries_per_turn candidates are rejected; long content is cut at a word."""
        result = self.extract(
            [
                {
                    "content": "Moved to Lisbon last month and started a new job at a bakery",
                    "source": "user_assertion",
                    "evidence": "I moved to Lisbon",
                },
                {
                    "content": "Sister Ines visits in June.",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                },
            ]
        )
        (entry,) = result.stored
        assert len(entry.content) <= 30 and entry.content.endswith("…")
        assert entry.metadata["truncated"] is True
        assert [r["reason"] for r in result.rejected] == [REJECT_LIMIT]

    def test_known_context_excludes_candidates(self):
        """A candidate already in the given <memory> block is not stored again."""
        result = self.extract(
            [
                {
                    "content": "Sister Ines visits in June.",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                }
            ],
            known_memory="<memory>\n- Sister Ines visits in June. (2 days ago)\n</memory>",
        )
        assert [r["reason"] for r in result.rejected] == [REJECT_KNOWN]

    def test_llm_candidates_and_profile_facts(self):
        """The LLM's entries are validated like the client's; its facts go to global memory."""
        from facts.models import Fact

        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(
            json.dumps(
                {
                    "entries": [
                        {
                            "content": "Ada moved to Lisbon.",
                            "source": "user_assertion",
                            "evidence": "I moved to Lisbon last month",
                        },
                        {
                            "content": "Ada loves surfing.",
                            "source": "user_assertion",
                            "evidence": "I love surfing",
                        },
                    ],
                    "facts": [{"key": "sister_name", "value": "Ines", "evidence": "My sister Ines"}],
                }
            )
        )
        result = self.extract([], use_llm=True)
        assert result.llm_used
        assert [e.content for e in result.stored] == ["Ada moved to Lisbon."]
        assert result.rejected[0]["origin"] == "llm"
        assert result.rejected[0]["reason"] == REJECT_EVIDENCE_NOT_FOUND
        fact = Fact.objects.get(key="sister_name")
        assert fact.source == "extraction" and fact.memory_user_id == self.person.pk
        assert fact.confidence < 1.0
        prompt = self.server.requests[-2][1]["messages"][0]["content"]
        assert "EXACT quote" in prompt

    def test_llm_failure_still_processes_client_candidates(self):
        """A failing chat endpoint is reported; the client's candidates are still stored."""
        use_test_chat(self.server, self.workspace)
        self.server.fail_next = 1
        result = self.extract(
            [
                {
                    "content": "Sister Ines visits in June.",
                    "source": "user_assertion",
                    "evidence": "Ines visits",
                }
            ],
            use_llm=True,
        )
        assert result.llm_error
        assert len(result.stored) == 1

    def test_embedding_failure_stores_and_defers_the_vector(self):
        """Without a working embedding endpoint the entry is stored and embedded later."""
        self.server.fail_next = 1
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            result = self.extract(
                [
                    {
                        "content": "Sister Ines visits in June.",
                        "source": "user_assertion",
                        "evidence": "Ines visits",
                    }
                ]
            )
        assert len(result.stored) == 1 and result.stored[0].embedding_model == ""
        assert not EntryEmbedding.objects.exists()
        # Other on-commit callbacks (audit listeners) may be queued too; one embeds the entry.
        embeds = [c for c in callbacks if "entry_embed_task" in repr(c)]
        assert len(embeds) == 1
