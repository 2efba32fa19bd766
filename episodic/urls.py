from django.urls import path

from episodic import apis

app_name = "episodic_entries"

urlpatterns = [
    path("episodic-entries/", apis.EntryListApi.as_view(), name="list"),
    path("episodic-entries/batch/", apis.EntryCreateBatchApi.as_view(), name="batch"),
    path("episodic-entries/extract/", apis.EntryExtractApi.as_view(), name="extract"),
    path("episodic-entries/search/", apis.EntrySearchApi.as_view(), name="search"),
    path("episodic-entries/batch-delete/", apis.EntryBatchDeleteApi.as_view(), name="batch-delete"),
    path("episodic-entries/<uuid:entry_id>/", apis.EntryDetailApi.as_view(), name="detail"),
]
