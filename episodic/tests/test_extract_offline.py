"""Extraction without a model (issue 13): with no chat endpoint, the offline method proposes
candidates that pass the same validation, checks and dedupe as a model's."""

from bench.extraction_offline import extraction_score, load_turns, offline_predict
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import REJECT_DUPLICATE_HASH, entry_extract
from episodic.services.extraction import _candidates_validate, _context_lines
from episodic.services.offline import offline_candidates
from episodic.tests.factories import memory_user_factory, use_test_embeddings

TURNS = {turn["name"]: turn for turn in load_turns()}


class OfflineExtractionTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def extract(self, transcript, **kwargs):
        return entry_extract(agent=self.agent, memory_user=self.person, transcript=transcript, **kwargs)

    def test_the_renewal_example_yields_its_entries(self):
        """The renewal case: the person's symptom and the finding they confirmed, with exact quotes."""
        transcript = [dict(m) for m in TURNS["renewal_old_card"]["messages"]]
        result = self.extract(transcript)
        assert result.offline_used and not result.llm_used
        stored = {(e.source, e.evidence): e for e in result.stored}
        symptom = stored[
            ("user_assertion", "My subscription renewal failed this morning with error code R-402.")
        ]
        assert symptom.content == (
            'The person said: "My subscription renewal failed this morning with error code R-402."'
        )
        assert symptom.source_message_ids == ["r1"]
        finding = stored[
            (
                "verified_assistant_finding",
                "I checked your account: the renewal charged the old card ending 4411, which expired in "
                "March, instead of the new card ending 9050.",
            )
        ]
        assert finding.source_message_ids == ["r2"] and finding.metadata == {"origin": "offline"}
        assert ("user_assertion", "I added it under Profile.") in stored
        for entry in result.stored:
            assert entry.evidence in " ".join(m["content"] for m in transcript)

    def test_offline_entries_are_deduped_like_any_other(self):
        """The same turn extracted twice stores its entries once."""
        transcript = [dict(m) for m in TURNS["email_bounce_spf"]["messages"]]
        first = self.extract(transcript)
        assert len(first.stored) == 4
        again = self.extract([dict(m) for m in transcript])
        assert again.stored == []
        assert {r["reason"] for r in again.rejected} == {REJECT_DUPLICATE_HASH}
        assert {r["origin"] for r in again.rejected} == {"offline"}
        assert EpisodicEntry.objects.count() == 4

    def test_the_offline_method_runs_only_when_the_server_may_use_a_model(self):
        """`use_llm: false` means the client's candidates only, as before."""
        transcript = [dict(m) for m in TURNS["email_bounce_spf"]["messages"]]
        result = self.extract(transcript, use_llm=False)
        assert not result.offline_used and result.stored == [] and result.rejected == []

    def test_every_offline_quote_is_found_in_its_transcript(self):
        """No offline candidate of the labelled turns fails validation: each quotes its transcript exactly."""
        for turn in TURNS.values():
            transcript = [dict(m) for m in turn["messages"]]
            entries, facts = offline_candidates(transcript)
            _valid, rejected, _routed = _candidates_validate(
                [("offline", c) for c in entries],
                transcript=transcript,
                known_lines=_context_lines(turn.get("known_memory", "")),
            )
            structural = [r for r in rejected if r["reason"].startswith(("evidence_", "empty", "unknown"))]
            assert structural == [], (turn["name"], structural)
            for fact in facts:
                assert any(fact["evidence"] in m["content"] for m in transcript if m["role"] == "user")

    def test_precision_and_recall_on_the_labelled_turns(self):
        """Floors under the figures of docs/episodic.md, overall and on the held-out turns."""
        overall = extraction_score(list(TURNS.values()))["counts"]["all"]
        held_out = extraction_score([t for t in TURNS.values() if t["split"] == "held_out"])["counts"]["all"]
        assert overall["precision"] >= 0.9, overall
        assert overall["recall"] >= 0.75, overall
        assert held_out["precision"] >= 0.8, held_out
        assert held_out["recall"] >= 0.5, held_out

    def test_chitchat_preference_and_request_turns_give_no_entry(self):
        """Turns without a situation propose no entry; stated preferences go to facts."""
        for name in (
            "greetings_only",
            "cover_letter_request",
            "generic_password_advice",
            "preferences_and_rules",
        ):
            predicted = offline_predict(TURNS[name])
            assert [kind for kind, _ in predicted if kind != "fact"] == [], name
        facts = [
            evidence for kind, evidence in offline_predict(TURNS["preferences_and_rules"]) if kind == "fact"
        ]
        assert facts == ["I love jazz, especially Coltrane.", "My favourite food is ramen."]

    def test_the_api_answers_offline_rejections(self):
        """Through the extract API, a repeated turn lists its offline candidates as duplicates."""
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "transcript": TURNS["renewal_old_card"]["messages"],
            "sync": True,
        }
        first = self.api().post("/api/v1/episodic-entries/extract/", body, format="json")
        assert first.status_code == 200, first.json()
        assert {e["metadata"]["origin"] for e in first.json()["stored"]} == {"offline"}
        assert first.json()["offline_used"] is True
        again = self.api().post("/api/v1/episodic-entries/extract/", body, format="json").json()
        assert again["stored"] == [] and again["llm_used"] is False
        assert {(r["origin"], r["reason"]) for r in again["rejected"]} == {("offline", REJECT_DUPLICATE_HASH)}
