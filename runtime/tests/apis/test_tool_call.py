"""POST /api/v1/tools/call/: a tool call in the OpenAI, Anthropic or MCP shape, answered in kind."""

import json
import uuid
from datetime import UTC, datetime

from mcp_types import CallToolResult

from core.models import AuditEvent
from core.services import agent_update
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from runtime.tool_calls import TOOL_CALLS_MAX
from runtime.tools import FORGET_NOT_FOUND, REMEMBER_KEPT

URL = "/api/v1/tools/call/"


def openai_call(name, arguments, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def anthropic_call(name, arguments, call_id="toolu_1"):
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def mcp_call(name, arguments):
    return {"name": name, "arguments": arguments}


class ToolCallTestCase(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.other_person = MemoryUserFactory(workspace=cls.workspace)

    def post(self, body, key=None):
        response = self.api(key).post(URL, body, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def content(self, result) -> dict:
        if "role" in result or result.get("type") == "tool_result":
            return json.loads(result["content"])
        return json.loads(result["content"][0]["text"])

    def error(self, result) -> dict:
        if result.get("type") == "tool_result":
            assert result["is_error"] is True
        if "isError" in result:
            assert result["isError"] is True
        return self.content(result)["error"]


class ToolCallShapesTests(ToolCallTestCase):
    def test_openai_call_gets_a_tool_message(self):
        """remember without a scope stores a global (workspace) fact."""
        result = self.post(openai_call("remember", {"key": "office_city", "value": "Lisbon"}, "call_9"))
        assert set(result) == {"role", "tool_call_id", "content"}
        assert (result["role"], result["tool_call_id"]) == ("tool", "call_9")
        assert self.content(result)["outcome"] == "created"
        fact = Fact.objects.get(key="office_city")
        assert (fact.scope, fact.value, fact.source) == ("global", "Lisbon", "agent_tool")
        assert fact.workspace == self.workspace

    def test_anthropic_call_gets_a_tool_result_block(self):
        fact_remember(workspace=self.workspace, key="tone", value="formal", scope="agent", agent=self.agent)
        result = self.post(anthropic_call("recall", {"key": "tone", "agent": "assistant"}, "toolu_7"))
        assert set(result) == {"type", "tool_use_id", "content"}
        assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_7")
        assert [f["value"] for f in self.content(result)["facts"]] == ["formal"]

    def test_mcp_call_gets_a_call_tool_result(self):
        result = self.post(mcp_call("recall", {"key": "nothing_here", "agent": "assistant"}))
        parsed = CallToolResult.model_validate(result)
        assert parsed.is_error is False
        assert parsed.structured_content == {"mode": "fuzzy", "facts": [], "procedures": [], "episodes": []}
        assert json.loads(parsed.content[0].text) == parsed.structured_content

    def test_a_list_is_answered_in_order_each_in_its_shape(self):
        results = self.post(
            [
                openai_call("remember", {"key": "k1", "value": 1, "scope": "agent", "agent": "assistant"}),
                anthropic_call("recall", {"key": "k1", "agent": "assistant"}),
                mcp_call("recall", {"key": "k1", "limit": 0, "agent": "assistant"}),
            ]
        )
        assert [r.get("role") or r.get("type") or "mcp" for r in results] == ["tool", "tool_result", "mcp"]
        assert self.content(results[1])["facts"][0]["value"] == 1
        assert self.error(results[2])["fields"] == {"limit": ["Must be at least 1."]}

    def test_null_arguments_count_as_left_out(self):
        result = self.post(openai_call("recall", {"key": None, "query": None, "agent": "assistant"}))
        assert self.content(result)["mode"] == "list"

    def test_an_object_argument_sent_as_a_json_string_is_read(self):
        """MCP hosts that stringify object arguments still work; other strings stay strings."""
        result = self.post(
            mcp_call("identify_user", {"channel": "web", "external_id": "7", "profile": '{"name": "Ada"}'})
        )
        assert result["isError"] is False
        assert result["structuredContent"]["memory_user"]["display_name"] == "Ada"
        result = self.post(
            mcp_call("identify_user", {"channel": "web", "external_id": "8", "profile": "Ada"})
        )
        assert self.error(result)["fields"] == {"profile": ["Must be of type object."]}

    def test_a_sdk_dumped_anthropic_block_is_accepted(self):
        """ToolUseBlock.model_dump() carries caller and toolset_name."""
        block = {**anthropic_call("recall", {"agent": "assistant"}), "caller": None, "toolset_name": None}
        assert self.content(self.post(block))["mode"] == "list"


class ToolCallErrorTests(ToolCallTestCase):
    def test_bad_arguments_are_field_errors_the_model_reads(self):
        result = self.post(
            anthropic_call("remember", {"key": "k", "value": 1, "scope": "planet", "colour": "red"})
        )
        error = self.error(result)
        assert error["code"] == "invalid"
        assert error["fields"] == {
            "scope": ["Must be one of: session, user, agent, global."],
            "colour": ["Unknown field."],
        }
        result = self.post(mcp_call("remember", {"value": 1}))
        assert self.error(result)["fields"] == {"key": ["This field is required."]}
        assert not Fact.objects.exists()

    def test_service_errors_are_tool_errors(self):
        """A user fact without the person: the service's field error, as a result."""
        result = self.post(openai_call("remember", {"key": "k", "value": 1, "scope": "user"}))
        assert "memory_user" in self.content(result)["error"]["fields"]

    def test_openai_arguments_that_are_not_json_are_a_tool_error(self):
        call = {"id": "c", "type": "function", "function": {"name": "recall", "arguments": "{not json"}}
        result = self.post(call)
        assert self.content(result)["error"]["fields"] == {"arguments": ["The arguments are not valid JSON."]}
        call["function"]["arguments"] = "[1, 2]"
        assert self.content(self.post(call))["error"]["fields"] == {"arguments": ["Must be a JSON object."]}

    def test_nul_inside_the_openai_argument_string_is_refused(self):
        """The API's JSON guard also reads the arguments OpenAI sends as a string."""
        call = openai_call("remember", {"key": "k", "value": "a\u0000b", "scope": "global"})
        assert self.content(self.post(call))["error"]["code"] == "malformed_request"
        assert not Fact.objects.exists()

    def test_unknown_tool_is_a_tool_error(self):
        result = self.post(anthropic_call("delete_everything", {}))
        assert self.error(result)["code"] == "unknown_tool"

    def test_malformed_envelopes_are_400(self):
        cases = [
            ({}, "non_field_errors"),
            ({"type": "function"}, "non_field_errors"),
            ({"type": "function", "function": {"name": "recall"}}, "id"),
            ({"id": "c", "function": {"arguments": "{}"}}, "function"),
            ({"id": "c", "function": {"name": "recall", "arguments": 5}}, "function.arguments"),
            ({"type": "tool_use", "id": "t", "name": "recall", "input": [1]}, "input"),
            ({"type": "tool_use", "name": "recall", "input": {}}, "id"),
            ({"name": "recall", "arguments": "x"}, "arguments"),
            ({"name": "recall", "arguments": {}, "extra": 1}, "extra"),
            ([], "non_field_errors"),
            ("recall", "non_field_errors"),
            ([mcp_call("recall", {})] * (TOOL_CALLS_MAX + 1), "non_field_errors"),
        ]
        for body, field in cases:
            response = self.api().post(URL, body, format="json")
            assert response.status_code == 400, (body, response.content)
            fields = response.json()["error"]["fields"]
            assert field in fields or field.split(".")[0] in fields, (body, fields)

    def test_a_malformed_item_in_a_list_names_its_index_and_runs_nothing(self):
        body = [openai_call("remember", {"key": "k", "value": 1}), {"type": "tool_use", "name": "recall"}]
        response = self.api().post(URL, body, format="json")
        assert response.status_code == 400
        assert set(response.json()["error"]["fields"]) == {"1"}
        assert not Fact.objects.exists()


class ToolCallAccessTests(ToolCallTestCase):
    def test_read_only_key_reads_but_cannot_remember_or_forget(self):
        fact = fact_remember(workspace=self.workspace, key="tone", value="formal", scope="global").fact
        results = self.post(
            [
                openai_call("recall", {"key": "tone"}),
                openai_call("remember", {"key": "tone", "value": "casual"}, "c2"),
                anthropic_call("forget", {"fact": str(fact.pk)}),
            ],
            key=self.read_only_key,
        )
        assert self.content(results[0])["facts"][0]["value"] == "formal"
        assert self.content(results[1])["error"]["code"] == "read_only"
        assert self.error(results[2])["code"] == "read_only"
        assert Fact.objects.get().value == "formal"

    def test_agent_bound_key_acts_for_its_agent_only(self):
        other = fact_remember(
            workspace=self.workspace, key="style", value="terse", scope="agent", agent=self.other_agent
        ).fact
        results = self.post(
            [
                mcp_call("remember", {"key": "style", "value": "warm", "scope": "agent"}),
                mcp_call("remember", {"key": "style", "value": "x", "scope": "agent", "agent": "researcher"}),
                mcp_call("forget", {"fact": str(other.pk)}),
                mcp_call("forget", {"fact": str(uuid.uuid4())}),
            ],
            key=self.agent_key,
        )
        assert results[0]["structuredContent"]["fact"]["scope"] == "agent"
        assert Fact.objects.get(key="style", agent=self.agent).value == "warm"
        assert self.error(results[1])["code"] == "not_found"
        # Another agent's fact answers exactly like an id that does not exist.
        assert self.error(results[2]) == self.error(results[3])
        assert Fact.objects.filter(pk=other.pk).exists()

    def test_outsider_gets_not_found_like_a_random_id(self):
        results = self.post(
            [
                anthropic_call("recall", {"key": "tone", "memory_user": str(self.person.pk)}),
                anthropic_call("recall", {"key": "tone", "memory_user": str(uuid.uuid4())}),
            ],
            key=self.outsider_key,
        )
        assert self.error(results[0]) == self.error(results[1])
        assert self.error(results[0])["code"] == "not_found"

    def test_no_key_is_401(self):
        response = self.client.post(URL, mcp_call("recall", {}), content_type="application/json")
        assert response.status_code == 401


class RememberAndRecallDefaultsTests(ToolCallTestCase):
    def test_overwrite_false_keeps_the_stored_value_and_says_so(self):
        self.post(
            mcp_call(
                "remember",
                {"key": "city", "value": "Porto", "scope": "user", "memory_user": str(self.person.pk)},
            )
        )
        result = self.post(
            mcp_call(
                "remember",
                {
                    "key": "city",
                    "value": "Faro",
                    "scope": "user",
                    "memory_user": str(self.person.pk),
                    "overwrite": False,
                },
            )
        )["structuredContent"]
        assert result["outcome"] == "skipped"
        assert result["kept"] is True
        assert result["message"] == REMEMBER_KEPT
        assert result["fact"]["value"] == "Porto"
        assert list(Fact.objects.filter(key="city").values_list("value", flat=True)) == ["Porto"]

    def test_recall_uses_the_agents_defaults(self):
        for index in range(5):
            fact_remember(
                workspace=self.workspace,
                key=f"note_{index}",
                value=index,
                scope="agent",
                agent=self.agent,
                confidence=0.6 if index == 0 else 0.9,
            )
        listed = self.post(mcp_call("recall", {"agent": "assistant"}))["structuredContent"]["facts"]
        assert len(listed) == 5
        agent_update(agent=self.agent, memory_settings={"recall_limit": 2, "recall_min_confidence": 0.7})
        listed = self.post(mcp_call("recall", {"agent": "assistant"}))["structuredContent"]["facts"]
        assert len(listed) == 2
        assert all(f["confidence"] >= 0.7 for f in listed)
        # The REST recall endpoint reads the same defaults.
        response = self.api().post("/api/v1/recall/", {"agent": "assistant"}, format="json")
        assert len(response.json()["facts"]) == 2
        # An explicit argument still wins.
        listed = self.post(mcp_call("recall", {"agent": "assistant", "limit": 10, "min_confidence": 0}))
        assert len(listed["structuredContent"]["facts"]) == 5


class ForgetAndSearchTests(ToolCallTestCase):
    def test_forget_by_key_deletes_the_most_specific_fact_and_audits(self):
        fact_remember(workspace=self.workspace, key="tz", value="UTC", scope="global")
        user_fact = fact_remember(
            workspace=self.workspace, key="tz", value="WET", scope="user", memory_user=self.person
        ).fact
        result = self.post(openai_call("forget", {"key": "tz", "memory_user": str(self.person.pk)}))
        forgotten = self.content(result)["forgotten"]
        assert (forgotten["kind"], forgotten["id"], forgotten["scope"]) == ("fact", str(user_fact.pk), "user")
        assert list(Fact.objects.values_list("scope", flat=True)) == ["global"]
        assert AuditEvent.objects.filter(
            action="delete", entity_type="fact", entity_id=str(user_fact.pk)
        ).exists()
        # With a scope, only that scope is looked at.
        result = self.post(
            openai_call("forget", {"key": "tz", "scope": "user", "memory_user": str(self.person.pk)})
        )
        assert self.content(result)["error"]["fields"] == {"key": [FORGET_NOT_FOUND]}
        self.post(openai_call("forget", {"key": "tz", "scope": "global"}))
        assert not Fact.objects.exists()

    def test_forget_needs_exactly_one_target(self):
        result = self.post(anthropic_call("forget", {}))
        assert self.error(result)["fields"] == {"key": [self.error(result)["message"]]}
        result = self.post(anthropic_call("forget", {"key": "a", "fact": str(uuid.uuid4())}))
        assert set(self.error(result)["fields"]) == {"key", "fact"}

    def test_forget_a_memory_by_id_within_the_named_person(self):
        entry = entry_factory(agent=self.agent, memory_user=self.person, embed=False)
        other_person = self.post(
            mcp_call(
                "forget",
                {"memory": str(entry.pk), "memory_user": str(self.other_person.pk), "agent": "assistant"},
            )
        )
        assert self.error(other_person)["code"] == "not_found"
        result = self.post(mcp_call("forget", {"memory": str(entry.pk), "memory_user": str(self.person.pk)}))
        assert result["structuredContent"]["forgotten"] == {
            "kind": "memory",
            "id": str(entry.pk),
            "content": entry.content,
        }
        assert not EpisodicEntry.objects.exists()
        assert AuditEvent.objects.filter(
            action="delete", entity_type="episodic_entry", entity_id=str(entry.pk)
        ).exists()

    def test_another_agents_memory_answers_like_a_random_id(self):
        entry = entry_factory(agent=self.other_agent, memory_user=self.person, embed=False)
        results = self.post(
            [
                mcp_call("forget", {"memory": str(entry.pk)}),
                mcp_call("forget", {"memory": str(uuid.uuid4())}),
            ],
            key=self.agent_key,
        )
        assert self.error(results[0]) == self.error(results[1])
        assert EpisodicEntry.objects.filter(pk=entry.pk).exists()

    def test_search_finds_the_persons_memories_with_scores(self):
        entry = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada adopted a cat named Miso.", embed=False
        )
        entry_factory(
            agent=self.agent,
            memory_user=self.other_person,
            content="Bo adopted a cat named Rex.",
            embed=False,
        )
        result = self.post(
            anthropic_call(
                "search",
                {"query": "cat", "mode": "lexical", "memory_user": str(self.person.pk), "agent": "assistant"},
            )
        )
        found = self.content(result)
        assert [hit["id"] for hit in found["results"]] == [str(entry.pk)]
        assert found["results"][0]["score"] > 0
        result = self.post(anthropic_call("search", {"query": "cat", "agent": "assistant"}))
        assert "memory_user" in self.error(result)["fields"]

    def test_nan_in_labels_is_the_models_error(self):
        """OpenAI's arguments are a JSON string, which Python's json reads NaN and Infinity
        from; PostgreSQL's jsonb holds neither. Storing or filtering by such labels is the
        model's error naming `metadata`, and nothing is stored."""
        person = {"memory_user": str(self.person.pk), "agent": "assistant"}
        calls = [
            openai_call(
                "store_memory", {"content": "Ada likes jazz.", "metadata": {"n": float("nan")}, **person}
            ),
            openai_call("recall_memory", {"query": "jazz", "metadata": {"n": float("inf")}, **person}),
            openai_call("search", {"query": "jazz", "metadata": {"a": [float("-inf")]}, **person}),
        ]
        for call in calls:
            with self.subTest(tool=call["function"]["name"]):
                assert "NaN" in call["function"]["arguments"] or "Infinity" in call["function"]["arguments"]
                assert "metadata" in self.error(self.post(call))["fields"]
        assert not EpisodicEntry.objects.filter(memory_user=self.person).exists()

    def test_memory_searches_keep_the_sources_they_are_asked_for(self):
        """`source` on recall_memory and search: what the person said themselves, or what the
        agent stored; an unknown kind, an empty list or a bare string is the model's error
        naming `source`."""
        said = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada adopted a cat named Miso."
        )
        stored = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada's cat Miso needs a vet on Friday.",
            source=EpisodicEntry.Source.AGENT_DIRECT,
            evidence="",
        )
        person = {"memory_user": str(self.person.pk), "agent": "assistant"}
        for tool, extra in (("recall_memory", {}), ("search", {"mode": "lexical"})):
            for source, expected in (
                (None, {said, stored}),
                (["user_assertion"], {said}),
                (["agent_direct", "verified_assistant_finding"], {stored}),
            ):
                with self.subTest(tool=tool, source=source):
                    arguments = {"query": "Miso cat", **person, **extra}
                    if source is not None:
                        arguments["source"] = source
                    result = self.post(mcp_call(tool, arguments))
                    assert {hit["id"] for hit in self.content(result)["results"]} == {
                        str(e.pk) for e in expected
                    }
            for source in (["gossip"], [], "user_assertion", [["user_assertion"]]):
                with self.subTest(tool=tool, refused=source):
                    result = self.post(
                        mcp_call(tool, {"query": "Miso cat", **person, **extra, "source": source})
                    )
                    # A bad item is named by its path: `source.0`.
                    assert {field.split(".")[0] for field in self.error(result)["fields"]} == {"source"}

    def test_memory_searches_keep_the_time_they_are_asked_for(self):
        """`created_after` / `created_before` on recall_memory and search: a date is its
        midnight, a time without an offset is the server's, and a bad or empty range is the
        model's error naming the argument."""
        old, recent = (
            entry_factory(agent=self.agent, memory_user=self.person, content=text, embed=False)
            for text in ("Ada adopted a cat named Miso.", "Ada's cat Miso is ill.")
        )
        EpisodicEntry.objects.filter(pk=old.pk).update(created_at=datetime(2026, 10, 3, 12, tzinfo=UTC))
        EpisodicEntry.objects.filter(pk=recent.pk).update(created_at=datetime(2026, 11, 20, 9, tzinfo=UTC))
        person = {"memory_user": str(self.person.pk), "agent": "assistant"}
        for tool, extra in (("recall_memory", {}), ("search", {"mode": "lexical"})):
            for times, expected in (
                ({}, {old, recent}),
                ({"created_after": "2026-11-01"}, {recent}),
                ({"created_before": "2026-11-01T00:00:00Z"}, {old}),
                ({"created_after": "2026-10-03T11:00:00+00:00", "created_before": "2026-10-04"}, {old}),
                ({"created_after": "2026-11-21"}, set()),
            ):
                with self.subTest(tool=tool, **times):
                    result = self.post(mcp_call(tool, {"query": "Miso cat", **person, **extra, **times}))
                    found = {hit["id"] for hit in self.content(result)["results"]}
                    assert found == {str(entry.pk) for entry in expected}
            for times, field in (
                ({"created_after": "last week"}, "created_after"),
                ({"created_before": "2026-02-30"}, "created_before"),
                ({"created_after": "2026-11-02", "created_before": "2026-11-01"}, "created_before"),
                ({"created_after": 1700000000}, "created_after"),
            ):
                with self.subTest(tool=tool, refused=times):
                    result = self.post(mcp_call(tool, {"query": "Miso cat", **person, **extra, **times}))
                    assert field in self.error(result)["fields"]
