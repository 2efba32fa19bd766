from django.urls import path

from episodes import entry_apis

app_name = "episodic_entries"

urlpatterns = [
    path("episodic-entries/", entry_apis.EntryListApi.as_view(), name="list"),
    path("episodic-entries/extract/", entry_apis.EntryExtractApi.as_view(), name="extract"),
    path("episodic-entries/search/", entry_apis.EntrySearchApi.as_view(), name="search"),
    path("episodic-entries/batch-delete/", entry_apis.EntryBatchDeleteApi.as_view(), name="batch-delete"),
    path("episodic-entries/<uuid:entry_id>/", entry_apis.EntryDetailApi.as_view(), name="detail"),
]
