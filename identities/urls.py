from django.urls import path

from identities import apis

app_name = "identities"

urlpatterns = [
    path("memory-users/", apis.MemoryUserListApi.as_view(), name="list"),
    path("memory-users/batch-delete/", apis.MemoryUserBatchDeleteApi.as_view(), name="batch-delete"),
    path("memory-users/<uuid:memory_user_id>/", apis.MemoryUserDetailApi.as_view(), name="detail"),
    path("memory-users/<uuid:memory_user_id>/merge/", apis.MemoryUserMergeApi.as_view(), name="merge"),
    path(
        "memory-users/<uuid:memory_user_id>/legal-hold/",
        apis.MemoryUserLegalHoldApi.as_view(),
        name="legal-hold",
    ),
]
