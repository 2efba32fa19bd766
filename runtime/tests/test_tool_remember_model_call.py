"""The `remember` tool asks the model about a similar key (cross-key consolidation) outside any
transaction, as fact_remember does when its caller holds none: a per-call transaction around
the tool held an open transaction, and a new agent's row, through the model call."""

from unittest import mock

from django.db import connection
from django.test import TransactionTestCase

from core.access import principal_for_api_key
from core.lib import consolidation
from core.services import api_key_create, workspace_create
from runtime.tool_calls import tool_execute


class RememberModelCallTests(TransactionTestCase):
    def test_the_consolidation_model_call_runs_outside_any_transaction(self):
        workspace = workspace_create(name="Acme")
        key, _ = api_key_create(workspace=workspace, name="k")
        principal = principal_for_api_key(key)
        seen = []

        def fake_llm(**kwargs):
            seen.append(connection.in_atomic_block)
            return "supersede", "newer value"

        tool_execute(principal=principal, name="remember", arguments={"key": "city", "value": "Paris"})
        with mock.patch.object(consolidation, "_llm_decide", side_effect=fake_llm):
            tool_execute(
                principal=principal, name="remember", arguments={"key": "home_city", "value": "Lyon"}
            )
        assert seen, "the model was not asked"
        assert seen == [False], f"model call ran inside a transaction: {seen}"
