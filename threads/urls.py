from django.urls import path

from threads import apis

app_name = "threads"

urlpatterns = [
    path("threads/", apis.ThreadListApi.as_view(), name="list"),
    path("threads/batch-delete/", apis.ThreadBatchDeleteApi.as_view(), name="batch-delete"),
    path("threads/<uuid:thread_id>/", apis.ThreadDetailApi.as_view(), name="detail"),
    path("threads/<uuid:thread_id>/messages/", apis.MessageListApi.as_view(), name="messages"),
    path(
        "threads/<uuid:thread_id>/messages/<uuid:message_id>/",
        apis.MessageDetailApi.as_view(),
        name="message-detail",
    ),
    path(
        "threads/<uuid:thread_id>/tool-results/<uuid:message_id>/",
        apis.ToolResultDetailApi.as_view(),
        name="tool-result",
    ),
    path("threads/<uuid:thread_id>/history/", apis.ThreadHistoryApi.as_view(), name="history"),
    path("threads/<uuid:thread_id>/compact/", apis.ThreadCompactApi.as_view(), name="compact"),
    path("threads/<uuid:thread_id>/plan/", apis.ThreadPlanApi.as_view(), name="plan"),
    path(
        "threads/<uuid:thread_id>/plan/versions/", apis.ThreadPlanVersionsApi.as_view(), name="plan-versions"
    ),
    path(
        "threads/<uuid:thread_id>/runs/<str:run_id>/snapshot/",
        apis.RunSnapshotApi.as_view(),
        name="run-snapshot",
    ),
    path("threads/<uuid:thread_id>/iterations/", apis.IterationListApi.as_view(), name="iterations"),
    path("threads/<uuid:thread_id>/transfers/", apis.TransferListApi.as_view(), name="transfers"),
]
