from django.urls import path

from episodes import apis

app_name = "episodes"

urlpatterns = [
    path("episodes/", apis.EpisodeListApi.as_view(), name="list"),
    path("episodes/search/", apis.EpisodeSearchApi.as_view(), name="search"),
    path("episodes/batch-delete/", apis.EpisodeBatchDeleteApi.as_view(), name="batch-delete"),
    path("episodes/<uuid:episode_id>/", apis.EpisodeDetailApi.as_view(), name="detail"),
    path("episodes/<uuid:episode_id>/close/", apis.EpisodeCloseApi.as_view(), name="close"),
    path("episodes/<uuid:episode_id>/feedback/", apis.EpisodeFeedbackApi.as_view(), name="feedback"),
]
