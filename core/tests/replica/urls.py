"""URLs of the read replica tests only (core/tests/replica/views.py)."""

from django.urls import path

from core.tests.replica import views

urlpatterns = [
    path("api/names/", views.WorkspaceNamesApi.as_view()),
    path("api/names/search/", views.WorkspaceSearchApi.as_view()),
    path("api/names/primary/", views.PrimaryWorkspaceNamesApi.as_view()),
    path("api/names/atomic/", views.AtomicWorkspaceNamesApi.as_view()),
    path("api/names/pool/", views.PoolWorkspaceNamesApi.as_view()),
    path("names/", views.workspace_names_page),
]
