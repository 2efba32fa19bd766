from django.urls import path

from checkpoints import apis

app_name = "checkpoints"

urlpatterns = [
    path("checkpoints/", apis.CheckpointListApi.as_view(), name="list"),
    path("checkpoints/batch-delete/", apis.CheckpointBatchDeleteApi.as_view(), name="batch-delete"),
    path("threads/<uuid:thread_id>/checkpoints/", apis.ThreadCheckpointListApi.as_view(), name="thread-list"),
    path(
        "threads/<uuid:thread_id>/checkpoints/latest/",
        apis.ThreadCheckpointLatestApi.as_view(),
        name="thread-latest",
    ),
    path(
        "threads/<uuid:thread_id>/checkpoints/<str:checkpoint_id>/",
        apis.ThreadCheckpointDetailApi.as_view(),
        name="thread-detail",
    ),
    path(
        "threads/<uuid:thread_id>/checkpoints/<str:checkpoint_id>/writes/",
        apis.ThreadCheckpointWritesApi.as_view(),
        name="thread-writes",
    ),
]
