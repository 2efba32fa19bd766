"""The shared list, detail and batch-delete views (core/api_views.py, issue 12): what the
operations built on them document."""

from django.test import SimpleTestCase

from core.api_views import BatchDeleteApi, ListApi, RetrieveApi, RetrieveDestroyApi
from core.tests.apis.test_openapi import openapi_document


class BaseSchemaTests(SimpleTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.paths = openapi_document()["paths"]

    def test_bases_have_no_docstring_to_lend_their_views(self):
        """drf-spectacular describes an operation with the nearest class docstring."""
        for base in (ListApi, RetrieveApi, RetrieveDestroyApi, BatchDeleteApi):
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

        assert operations["delete"]["description"] == "Right to erasure: deletes everything of this person."
        assert operations["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/MemoryUserOutput"
        }

    def test_list_documents_its_filterset_and_operation_id(self):
        operation = self.paths["/api/v1/episodes/"]["get"]
        names = {parameter["name"] for parameter in operation["parameters"]}

        assert operation["operationId"] == "episodes_list"
        assert {"agent", "outcome", "limit", "offset"} <= names
