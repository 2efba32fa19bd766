"""The shared list, detail and batch-delete views (core/api_views.py, issue 12): what the
operations built on them document, and which API routes may read from a replica."""

from django.test import SimpleTestCase
from django.urls import URLPattern, URLResolver, get_resolver

from core.api_views import BatchDeleteApi, ListApi, RetrieveApi, RetrieveDestroyApi, RetrieveUpdateDestroyApi
from core.lib.replica import view_reads_replica
from core.tests.apis.test_openapi import openapi_document

# Lists, their detail pages and searches: a snapshot a second old serves as well. Left out on
# purpose: what an agent reads right after writing it from another process or the same turn
# (thread history, messages, plans, runs, checkpoints, fact lookup, recall, identify, context).
REPLICA_READS = {
    ("api:agents:list", "get"),
    ("api:agents:detail", "get"),
    ("api:identities:list", "get"),
    ("api:identities:detail", "get"),
    ("api:threads:list", "get"),
    ("api:threads:detail", "get"),
    ("api:facts:list", "get"),
    ("api:facts:detail", "get"),
    ("api:facts:history", "get"),
    ("api:episodes:list", "get"),
    ("api:episodes:detail", "get"),
    ("api:episodic_entries:list", "get"),
    ("api:episodic_entries:detail", "get"),
    ("api:episodic_entries:search", "post"),
    ("api:procedures:list", "get"),
    ("api:procedures:detail", "get"),
    ("api:procedures:match", "post"),
    ("api:checkpoints:list", "get"),
    ("api:store:list", "get"),
    ("api:webhooks:list", "get"),
    ("api:webhooks:detail", "get"),
    ("api:webhooks:deliveries", "get"),
    ("api:review:list", "get"),
    ("api:reflection:runs", "get"),
    ("api:reflection:run", "get"),
    ("api:reflection:profiles", "get"),
}


def _api_routes(patterns=None, namespace=""):
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _api_routes(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and namespace.startswith("api:"):
            yield f"{namespace}{pattern.name}", pattern.callback


class ReplicaOptInTests(SimpleTestCase):
    def test_lists_details_and_searches_read_the_replica_and_no_other_api_route_does(self):
        """A POST counts only where the view declares it read-only (a search)."""
        opted = {
            (name, method)
            for name, callback in _api_routes()
            for method in ("get", "post")
            if hasattr(callback.cls, method) and view_reads_replica(callback, method.upper())
        }
        assert opted == REPLICA_READS


class BaseSchemaTests(SimpleTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.paths = openapi_document()["paths"]

    def test_bases_have_no_docstring_to_lend_their_views(self):
        """drf-spectacular describes an operation with the nearest class docstring."""
        for base in (ListApi, RetrieveApi, RetrieveDestroyApi, RetrieveUpdateDestroyApi, BatchDeleteApi):
            assert base.__doc__ is None, base

    def test_inherited_delete_documents_the_views_own_answer(self):
        thread_delete = self.paths["/api/v1/threads/{thread_id}/"]["delete"]["responses"]
        fact_delete = self.paths["/api/v1/facts/{fact_id}/"]["delete"]["responses"]

        assert "content" not in thread_delete["204"]
        assert "200" not in thread_delete
        assert fact_delete["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/FactDeleteOutput"
        }

    def test_a_method_the_view_writes_itself_keeps_its_own_schema(self):
        """The memory user GET comes from RetrieveApi; its erasure DELETE is written out."""
        operations = self.paths["/api/v1/memory-users/{memory_user_id}/"]

        assert operations["delete"]["description"].startswith(
            "Right to erasure: deletes everything of this person."
        )
        assert operations["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/MemoryUserOutput"
        }

    def test_list_documents_its_filterset_and_operation_id(self):
        operation = self.paths["/api/v1/episodes/"]["get"]
        names = {parameter["name"] for parameter in operation["parameters"]}

        assert operation["operationId"] == "episodes_list"
        assert {"agent", "outcome", "limit", "offset"} <= names
