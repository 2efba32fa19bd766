"""Extraction keeps what episodic memory is for: the mechanism of a situation (issue 13).

The extract API runs against the local OpenAI-compatible test server. The fake model answers
once as a model that follows the prompt would, and once as one that ignores it; the checks
after the model reject what can be told without one, each with its reason. The same turns run
through the offline method (no chat endpoint) too.
"""

import json

from django.urls import reverse

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import EXTRACTION_PROMPT
from episodic.tests.factories import memory_user_factory, use_test_chat, use_test_embeddings
from facts.models import Fact

EXTRACT = reverse("api:episodic_entries:extract")

# A support case: a producer/matcher mismatch, a guess the person half-denies, generic advice,
# a preference, a rule for the agent, a request of this turn only, and the confirmed fix.
SUPPORT = [
    {
        "id": "s1",
        "role": "user",
        "content": "Since Tuesday our order sync to the warehouse marks every new order as unmatched. "
        "Can you check what the warehouse expects?",
    },
    {
        "id": "s2",
        "role": "assistant",
        "content": "I looked at the warehouse import log: the matcher expects 'TSHREDM', without dashes, "
        "and compares it to the SKU field of the shop export. Maybe the warehouse also trims leading zeros.",
    },
    {
        "id": "s3",
        "role": "user",
        "content": "Yes, the dashes are it, we never have leading zeros. "
        "I prefer email for updates like this one.",
    },
    {
        "id": "s4",
        "role": "assistant",
        "content": "In general, you should keep SKU formats consistent across systems.",
    },
    {
        "id": "s5",
        "role": "user",
        "content": "I removed the dashes in the export template and the orders match again. "
        "From now on, please answer in bullet points.",
    },
]
KNOWN_MEMORY = "<memory>\n- Ada runs an online T-shirt shop. (2 weeks ago)\n</memory>"

# What a model that follows the prompt answers for SUPPORT.
GOOD_SUPPORT_ANSWER = {
    "entries": [
        {
            "content": "Since Tuesday the shop's order sync marked every new order as unmatched.",
            "source": "user_assertion",
            "evidence": "Since Tuesday our order sync to the warehouse marks every new order as unmatched.",
        },
        {
            "content": "The warehouse matcher expects SKU 'TSHREDM' without dashes and compares it to "
            "the SKU field of the shop export, which had dashes (producer vs matcher mismatch).",
            "source": "verified_assistant_finding",
            "evidence": "the matcher expects 'TSHREDM', without dashes, and compares it to the SKU field of "
            "the shop export",
        },
        {
            "content": "Resolved: removing the dashes in the export template made the orders match.",
            "source": "user_assertion",
            "evidence": "I removed the dashes in the export template and the orders match again.",
        },
    ],
    "facts": [
        {
            "key": "preferred_contact_channel",
            "value": "email",
            "evidence": "I prefer email for updates like this one.",
        }
    ],
}

# A model that ignores the prompt: every entry below is valid (exact quotes) but does not belong.
CARELESS_SUPPORT_ANSWER = {
    "entries": [
        {
            "content": "Ada has an online T-shirt shop.",
            "source": "user_assertion",
            "evidence": "our order sync to the warehouse",
        },
        {
            "content": "The warehouse trims leading zeros of SKUs.",
            "source": "verified_assistant_finding",
            "evidence": "Maybe the warehouse also trims leading zeros.",
        },
        {
            "content": "SKU formats should be consistent across systems.",
            "source": "verified_assistant_finding",
            "evidence": "you should keep SKU formats consistent across systems",
        },
        {
            "content": "Ada prefers email for updates.",
            "source": "user_assertion",
            "evidence": "I prefer email for updates like this one.",
        },
        {
            "content": "Ada wants answers in bullet points.",
            "source": "user_assertion",
            "evidence": "From now on, please answer in bullet points.",
        },
        {
            "content": "Ada asked to check what the warehouse expects.",
            "source": "user_assertion",
            "evidence": "Can you check what the warehouse expects?",
        },
        {
            "content": "Removing the dashes in the export template fixed the order sync.",
            "source": "user_assertion",
            "evidence": "I removed the dashes in the export template and the orders match again.",
        },
    ],
    "facts": [],
}

# Chit-chat: a mood, a preference, rules for the agent, a generic question and its advice.
CHITCHAT = [
    {"role": "user", "content": "Hi! I'm back from the gym, feeling great."},
    {"role": "assistant", "content": "Nice! How was it?"},
    {
        "role": "user",
        "content": "Good. I really like the new climbing wall there. "
        "Please keep your answers short, and call me Sam.",
    },
    {"role": "assistant", "content": "Will do, Sam!"},
    {"role": "user", "content": "How do I stay motivated to exercise?"},
    {"role": "assistant", "content": "You should set small goals and track your progress every week."},
    {"role": "user", "content": "Thanks!"},
]
GOOD_CHITCHAT_ANSWER = {
    "entries": [],
    "facts": [
        {
            "key": "likes_climbing",
            "value": "the new climbing wall at the gym",
            "evidence": "I really like the new climbing wall there.",
        }
    ],
}

BACKUP = [
    {"role": "user", "content": "The nightly backup job failed with exit code 12."},
    {
        "role": "assistant",
        "content": "That usually means the disk is full. Is the backup volume at capacity?",
    },
    {"role": "user", "content": "No, it has 200 GB free."},
]


class ExtractRelevanceTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def extract(self, transcript, **body):
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "transcript": transcript,
            "sync": True,
            **body,
        }
        response = self.api().post(EXTRACT, body, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def test_the_prompt_asks_for_the_mechanism_and_names_what_to_skip(self):
        """The system prompt sent to the model carries the rules of docs/episodic.md."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(json.dumps({"entries": [], "facts": []}))
        self.extract(SUPPORT, known_memory=KNOWN_MEMORY)
        (chat,) = [body for path, body in self.server.requests if path.endswith("/chat/completions")]
        system = chat["messages"][0]["content"]
        assert system == EXTRACTION_PROMPT
        for rule in (
            "causal links and their direction",
            "mismatched identifiers or values",
            "diagnostic findings",
            "open state of the",
            "stable preferences",
            "how the agent should behave",
            "the current task",
            "generic advice",
            "even reworded",
            "abandoned or the person contradicted",
            "Keep uncertainty",
        ):
            assert rule in system, rule
        assert "Ada runs an online T-shirt shop." in chat["messages"][1]["content"]

    def test_a_good_models_answer_keeps_the_mechanism_of_a_support_case(self):
        """Symptom, producer/matcher mismatch and confirmed fix are stored; the preference is a fact."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(json.dumps(GOOD_SUPPORT_ANSWER))
        body = self.extract(SUPPORT, known_memory=KNOWN_MEMORY)
        assert body["llm_used"] and body["rejected"] == []
        stored = {e["content"]: e for e in body["stored"]}
        assert list(stored) == [e["content"] for e in GOOD_SUPPORT_ANSWER["entries"]]
        finding = body["stored"][1]
        assert finding["source"] == "verified_assistant_finding"
        assert finding["source_message_ids"] == ["s2"]
        assert body["stored"][2]["source_message_ids"] == ["s5"]
        assert body["facts"] == [{"key": "preferred_contact_channel", "outcome": "created"}]
        assert EpisodicEntry.objects.count() == 3
        assert Fact.objects.get(key="preferred_contact_channel").source == Fact.Source.EXTRACTION

    def test_a_careless_models_answer_is_cut_down_to_the_mechanism(self):
        """Valid but misplaced candidates are rejected with a reason each; the preference is routed
        to the facts tier; only the confirmed fix is stored."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(json.dumps(CARELESS_SUPPORT_ANSWER))
        body = self.extract(SUPPORT, known_memory=KNOWN_MEMORY)
        assert [e["content"] for e in body["stored"]] == [
            "Removing the dashes in the export template fixed the order sync."
        ]
        reasons = {r["content"]: r["reason"] for r in body["rejected"]}
        assert reasons == {
            "Ada has an online T-shirt shop.": "restates_known_memory",
            "The warehouse trims leading zeros of SKUs.": "unconfirmed_speculation",
            "SKU formats should be consistent across systems.": "generic_advice",
            "Ada prefers email for updates.": "stable_preference",
            "Ada wants answers in bullet points.": "agent_instruction",
            "Ada asked to check what the warehouse expects.": "current_task_request",
        }
        assert all(r["origin"] == "llm" for r in body["rejected"])
        (routed,) = body["facts"]
        assert routed["outcome"] == "created"
        fact = Fact.objects.get(key=routed["key"])
        assert (
            fact.memory_user_id == self.person.pk
            and fact.evidence == "I prefer email for updates like this one."
        )
        assert EpisodicEntry.objects.count() == 1

    def test_a_guess_the_person_denied_is_not_stored(self):
        """A finding whose next user message says no is rejected as denied."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(
            json.dumps(
                {
                    "entries": [
                        {
                            "content": "The backup disk is full.",
                            "source": "verified_assistant_finding",
                            "evidence": "That usually means the disk is full.",
                        },
                        {
                            "content": "The nightly backup failed with exit code 12 (not a full disk).",
                            "source": "user_assertion",
                            "evidence": "The nightly backup job failed with exit code 12.",
                        },
                    ],
                    "facts": [],
                }
            )
        )
        body = self.extract(BACKUP)
        assert [(r["content"], r["reason"]) for r in body["rejected"]] == [
            ("The backup disk is full.", "denied_by_person")
        ]
        assert len(body["stored"]) == 1

    def test_a_good_models_answer_for_chitchat_stores_no_entry(self):
        """Small talk, rules and generic advice give no entry; the preference becomes a fact."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_replies.append(json.dumps(GOOD_CHITCHAT_ANSWER))
        body = self.extract(CHITCHAT)
        assert body["stored"] == [] and body["rejected"] == []
        assert body["facts"] == [{"key": "likes_climbing", "outcome": "created"}]
        assert not EpisodicEntry.objects.exists()

    def test_offline_method_keeps_the_mechanism_of_the_support_case(self):
        """Without a chat endpoint the symptom, the confirmed finding and the fix are stored; the
        half-denied guess, the advice, the rule and the request are not; the preference is a fact."""
        body = self.extract(SUPPORT, known_memory=KNOWN_MEMORY)
        assert not body["llm_used"] and body["llm_error"] == ""
        assert [(e["source"], e["evidence"]) for e in body["stored"]] == [
            (
                "user_assertion",
                "Since Tuesday our order sync to the warehouse marks every new order as unmatched.",
            ),
            (
                "verified_assistant_finding",
                "I looked at the warehouse import log: the matcher expects 'TSHREDM', without dashes, and "
                "compares it to the SKU field of the shop export.",
            ),
            ("user_assertion", "I removed the dashes in the export template and the orders match again."),
        ]
        assert all(e["metadata"]["origin"] == "offline" for e in body["stored"])
        assert [e["source_message_ids"] for e in body["stored"]] == [["s1"], ["s2"], ["s5"]]
        (fact,) = body["facts"]
        assert fact["key"].startswith("prefers_email") and fact["outcome"] == "created"

    def test_offline_method_stores_nothing_from_chitchat(self):
        """Moods, rules, questions and unconfirmed advice give no entry; the preference is a fact."""
        body = self.extract(CHITCHAT)
        assert body["stored"] == [] and body["rejected"] == []
        (fact,) = body["facts"]
        assert fact["key"].startswith("likes_") and fact["outcome"] == "created"
        assert Fact.objects.get(key=fact["key"]).value == "I really like the new climbing wall there."

    def test_client_candidates_are_not_second_guessed(self):
        """The relevance checks hold the model and the offline method to the prompt, not the client."""
        body = self.extract(
            CHITCHAT,
            use_llm=False,
            candidates=[
                {
                    "content": "Sam likes the new climbing wall at the gym.",
                    "source": "user_assertion",
                    "evidence": "I really like the new climbing wall there.",
                }
            ],
        )
        assert [e["content"] for e in body["stored"]] == ["Sam likes the new climbing wall at the gym."]
        assert body["facts"] == []
