"""Extraction remembers a turn's profile facts after the transaction that stores its entries:
a fact's cross-key consolidation may ask the chat model, and inside that transaction the call
held the person's lock (and the new entries) for its whole length."""

import json
from unittest import mock

from django.db import connection

from core.lib import consolidation
from episodic.tests.factories import use_test_chat
from episodic.tests.test_consolidation import EXTRACT, ConsolidationTestCase
from facts.services import fact_remember


class ExtractionModelCallTests(ConsolidationTestCase):
    def test_the_cross_key_model_call_of_an_extracted_fact_runs_outside_the_entries_transaction(self):
        use_test_chat(self.server, self.workspace)
        fact_remember(
            workspace=self.workspace, key="city", value="Lisbon", scope="user", memory_user=self.person
        )
        self.server.chat_replies.append(
            json.dumps(
                {
                    "entries": [
                        {
                            "content": "Ada lives in Porto.",
                            "source": "user_assertion",
                            "evidence": "I live in Porto",
                        }
                    ],
                    "facts": [{"key": "home_city", "value": "Porto", "evidence": "I live in Porto."}],
                }
            )
        )
        # The test's own transaction is open around everything (its locks stay held to the end):
        # what counts is that the code opens none around the call.
        depth = len(connection.atomic_blocks)
        seen = []

        def fake_llm(**kwargs):
            seen.append(len(connection.atomic_blocks) - depth)
            return "add", "Both."

        with mock.patch.object(consolidation, "_llm_decide", side_effect=fake_llm):
            response = self.api().post(
                EXTRACT,
                self.body(transcript=[{"role": "user", "content": "I live in Porto."}], sync=True),
                format="json",
            )
        assert response.status_code in (200, 201), response.json()
        assert seen, "the model was not asked"
        assert seen == [0] * len(seen), f"model call inside the extraction's transaction: {seen}"
