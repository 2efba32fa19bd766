"""Serializer fields accept only what their column can store (issue 11 finding 3)."""

from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.views import APIView

from core.models import Agent
from core.serializers import BIGINT_MAX, NOT_A_STRING, StrictSerializer
from core.testing import MemoryTestCase
from facts.models import Fact
from identities.models import ChannelIdentity, MemoryUser
from procedures.tests.factories import ProcedureFactory
from threads.models import IterationLog
from threads.tests.factories import make_thread


def _api_views(patterns=None, prefix=""):
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from _api_views(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            view = getattr(pattern.callback, "view_class", None)
            if (prefix + str(pattern.pattern)).startswith("api/v1/") and view and issubclass(view, APIView):
                yield prefix + str(pattern.pattern), view


def _request_serializers():
    """(method, path, serializer class) of every write operation, as the OpenAPI schema sees them."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import spectacular_settings

    generator = SchemaGenerator()
    generator._initialise_endpoints()
    for path, path_regex, method, view in generator._get_paths_and_endpoints():
        if method not in ("POST", "PUT", "PATCH"):
            continue
        view.request = spectacular_settings.GET_MOCK_REQUEST(method, path, view, None)
        view.schema.path, view.schema.path_regex, view.schema.method = path, path_regex, method
        serializer = view.schema.get_request_serializer()
        if serializer is None:
            continue
        # A body of several shapes (message append: one message, the envelope, a list) is
        # read by each of its serializers.
        shapes = [serializer]
        if isinstance(serializer, dict):
            # A body documented per media type (import: JSON lines or a JSON header): the
            # serializers among them; the text one has none.
            shapes = [
                s
                for s in serializer.values()
                if isinstance(s, serializers.BaseSerializer)
                or (isinstance(s, type) and issubclass(s, serializers.BaseSerializer))
            ]
        elif isinstance(serializer, PolymorphicProxySerializer):
            shapes = serializer.serializers
        for shape in shapes:
            if isinstance(shape, serializers.ListSerializer):
                shape = shape.child
            yield method, path, shape if isinstance(shape, type) else type(shape)


def _nested_serializers(serializer_class):
    """The serializer classes a request body reaches through `serializer_class`'s fields."""
    for field in serializer_class().fields.values():
        inner = field.child if isinstance(field, serializers.ListSerializer) else field
        if isinstance(inner, serializers.Serializer):
            yield type(inner)
            yield from _nested_serializers(type(inner))


class InputSerializersAreStrictTests(MemoryTestCase):
    def test_every_input_serializer_of_every_api_view_derives_from_strict_serializer(self):
        """Unknown fields and wrong types are refused the same way on every route."""
        checked, lenient = 0, []
        for route, view in _api_views():
            for name in dir(view):
                candidate = getattr(view, name)
                if not (isinstance(candidate, type) and issubclass(candidate, serializers.Serializer)):
                    continue
                if "Output" in name:
                    continue
                for serializer_class in [candidate, *_nested_serializers(candidate)]:
                    checked += 1
                    if not issubclass(serializer_class, StrictSerializer):
                        lenient.append(f"{route} {view.__name__}.{name} -> {serializer_class.__name__}")
        assert checked > 30
        assert lenient == []

    def test_every_documented_request_body_is_read_by_a_strict_serializer(self):
        """Module-level input serializers (RememberInputSerializer, BatchDeleteInputSerializer) too."""
        checked, lenient = 0, []
        for method, path, serializer_class in _request_serializers():
            for serializer in [serializer_class, *_nested_serializers(serializer_class)]:
                checked += 1
                if not issubclass(serializer, StrictSerializer):
                    lenient.append(f"{method} {path} -> {serializer.__name__}")
        assert checked > 30
        assert lenient == []


class StringFieldTests(MemoryTestCase):
    def test_a_number_for_a_string_field_is_400_not_stored_as_text(self):
        """`{"key": 1}` was stored as "1"; the README says wrong types are 400."""
        for key in (1, 1.5, True, ["k"], {"k": 1}):
            response = self.api().post(
                "/api/v1/facts/remember/",
                {"agent": "assistant", "scope": "agent", "key": key, "value": "v"},
                format="json",
            )
            assert response.status_code == 400, (key, response.content)
            assert response.json()["error"]["fields"]["key"], key
        assert Fact.objects.count() == 0

    def test_the_error_names_the_type(self):
        response = self.api().post(
            "/api/v1/memory-users/identify/", {"channel": "telegram", "external_id": 12345}, format="json"
        )
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"external_id": [NOT_A_STRING]}
        assert not ChannelIdentity.objects.exists()

    def test_slug_and_uuid_fields_refuse_numbers(self):
        """A UUIDField turned 5 into 00000000-0000-0000-0000-000000000005."""
        response = self.api().post("/api/v1/agents/", {"slug": 5}, format="json")
        assert response.status_code == 400
        response = self.api().post(
            "/api/v1/facts/remember/",
            {"agent": "assistant", "scope": "user", "key": "k", "value": "v", "memory_user": 5},
            format="json",
        )
        assert response.status_code == 400
        assert response.json()["error"]["fields"]["memory_user"] == [NOT_A_STRING]
        assert Fact.objects.count() == 0

    def test_list_children_are_strict_too(self):
        response = self.api().post("/api/v1/facts/batch-delete/", {"ids": [1]}, format="json")
        assert response.status_code == 400
        assert response.json()["error"]["fields"]["ids"]

    def test_strings_still_pass(self):
        response = self.api().post(
            "/api/v1/facts/remember/",
            {"agent": "assistant", "scope": "agent", "key": "1", "value": 1},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert Fact.objects.get().key == "1"


class IntegerRangeTests(MemoryTestCase):
    def test_run_duration_beyond_the_column_is_400(self):
        """`duration_ms: 1e20` overflowed the bigint running total (a 500)."""
        procedure = ProcedureFactory(workspace=self.workspace, agent=self.agent)
        url = f"/api/v1/procedures/{procedure.pk}/runs/"
        for duration in (10**20, BIGINT_MAX, 1e20):
            response = self.api().post(url, {"success": True, "duration_ms": duration}, format="json")
            assert response.status_code == 400, (duration, response.content)
            assert response.json()["error"]["fields"]["duration_ms"]
        procedure.refresh_from_db()
        assert (procedure.times_used, procedure.total_duration_ms) == (0, 0)
        assert self.api().post(url, {"success": True, "duration_ms": 1500}, format="json").status_code == 200

    def test_integer_without_a_declared_range_gets_the_bigint_range(self):
        """A FilterSerializer's `limit` has no declared range: past 2**63 - 1 it is a 400."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        response = self.api().get(f"/api/v1/threads/{thread.pk}/messages/?offset={10**20}")
        assert response.status_code == 400
        assert response.json()["error"]["fields"]["offset"]
        assert self.api().get(f"/api/v1/threads/{thread.pk}/messages/?offset=1").status_code == 200

    def test_int_column_is_bounded_by_int_range(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        response = self.api().post(
            f"/api/v1/threads/{thread.pk}/iterations/",
            {"task": "t", "outcome": "success", "attempt": 2**31},
            format="json",
        )
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"]["attempt"]
        assert IterationLog.objects.count() == 0


class AgentSlugLengthTests(MemoryTestCase):
    def test_an_agent_slug_longer_than_the_column_is_400_wherever_it_is_accepted(self):
        """A writable key registers a new slug on first use: past varchar(100) it overflowed."""
        slug = "a" * 101
        for path, body in (
            ("/api/v1/threads/", {"agent": slug}),
            ("/api/v1/context/", {"agent": slug, "thread": None}),
            ("/api/v1/agents/", {"slug": slug}),
        ):
            response = self.api().post(path, body, format="json")
            assert response.status_code == 400, (path, response.content)
        assert not Agent.objects.filter(slug__startswith="aaaa").exists()


class IdentifyLengthTests(MemoryTestCase):
    def test_external_id_of_255_characters_is_identified(self):
        """The derived canonical id `<channel>:<external_id>` overflowed varchar(255) (a 500)."""
        external_id = "9" * 255
        payload = {"channel": "telegram", "external_id": external_id}
        first = self.api().post("/api/v1/memory-users/identify/", payload, format="json")
        assert first.status_code == 201, first.content
        canonical_id = first.json()["memory_user"]["canonical_id"]
        assert len(canonical_id) <= 255
        assert canonical_id.startswith("telegram:999")
        again = self.api().post("/api/v1/memory-users/identify/", payload, format="json")
        assert again.status_code == 200
        assert again.json()["memory_user"]["id"] == first.json()["memory_user"]["id"]

    def test_long_external_ids_sharing_a_prefix_are_different_people(self):
        ids = ["a" * 254 + "1", "a" * 254 + "2"]
        for external_id in ids:
            response = self.api().post(
                "/api/v1/memory-users/identify/",
                {"channel": "a-channel-name-of-fifty-characters-long-exactly-xx", "external_id": external_id},
                format="json",
            )
            assert response.status_code == 201, response.content
        assert MemoryUser.objects.filter(workspace=self.workspace).count() == 2

    def test_external_id_of_256_characters_is_400(self):
        response = self.api().post(
            "/api/v1/memory-users/identify/", {"channel": "telegram", "external_id": "9" * 256}, format="json"
        )
        assert response.status_code == 400
        assert response.json()["error"]["fields"]["external_id"]
        assert not MemoryUser.objects.exists()


class ObjectFieldTests(MemoryTestCase):
    def test_memory_settings_that_is_not_an_object_is_400(self):
        """PATCH /agents/{slug}/ with a list, string or number was a 500."""
        for value in ([1, 2], "recent_messages", 5, True):
            response = self.api().patch(
                "/api/v1/agents/assistant/", {"memory_settings": value}, format="json"
            )
            assert response.status_code == 400, (value, response.content)
            assert response.json()["error"]["fields"]["memory_settings"]
        self.agent.refresh_from_db()
        assert self.agent.memory_settings == {}

    def test_registering_with_memory_settings_that_is_not_an_object_is_400(self):
        response = self.api().post(
            "/api/v1/agents/", {"slug": "listy", "memory_settings": ["a"]}, format="json"
        )
        assert response.status_code == 400
        assert not Agent.objects.filter(slug="listy").exists()

    def test_object_memory_settings_still_apply(self):
        response = self.api().patch(
            "/api/v1/agents/assistant/", {"memory_settings": {"recent_messages": 7}}, format="json"
        )
        assert response.status_code == 200
        assert response.json()["effective_memory_settings"]["recent_messages"] == 7

    def test_stored_settings_that_are_not_an_object_fall_back_to_defaults(self):
        """A row edited by hand (admin, SQL) must not fail every read of its agent."""
        from core.memory_settings import memory_settings_defaults, memory_settings_for

        Agent.objects.filter(pk=self.agent.pk).update(memory_settings=["broken"])
        self.agent.refresh_from_db()
        assert memory_settings_for(self.agent) == memory_settings_defaults()
        Agent.objects.filter(pk=self.agent.pk).update(
            memory_settings={"recent_messages": "many", "token_limit": 900}
        )
        self.agent.refresh_from_db()
        assert memory_settings_for(self.agent).token_limit == 900
        assert self.api().get("/api/v1/agents/assistant/").status_code == 200
