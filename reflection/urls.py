from django.urls import path

from reflection import apis

app_name = "reflection"

urlpatterns = [
    path("reflection/runs/", apis.ReflectionRunListApi.as_view(), name="runs"),
    path("reflection/runs/<uuid:run_id>/", apis.ReflectionRunDetailApi.as_view(), name="run"),
    path("reflection/profiles/", apis.ReflectionProfileListApi.as_view(), name="profiles"),
]
