from django.urls import path

from facts import apis

app_name = "facts"

urlpatterns = [
    path("facts/", apis.FactListApi.as_view(), name="list"),
    path("facts/lookup/", apis.FactLookupApi.as_view(), name="lookup"),
    path("facts/remember/", apis.FactRememberApi.as_view(), name="remember"),
    path("facts/batch-delete/", apis.FactBatchDeleteApi.as_view(), name="batch-delete"),
    path("facts/<uuid:fact_id>/", apis.FactDetailApi.as_view(), name="detail"),
    path("facts/<uuid:fact_id>/history/", apis.FactHistoryApi.as_view(), name="history"),
    path(
        "episodes/<uuid:episode_id>/extract-facts/",
        apis.EpisodeExtractFactsApi.as_view(),
        name="episode-extract-facts",
    ),
]
