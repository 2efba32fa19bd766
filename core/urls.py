from django.urls import path

from core.apis import AgentDetailApi, AgentListApi

app_name = "agents"

urlpatterns = [
    path("agents/", AgentListApi.as_view(), name="list"),
    path("agents/<slug:slug>/", AgentDetailApi.as_view(), name="detail"),
]
