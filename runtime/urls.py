from django.urls import path

from runtime.apis import ContextAssembleApi, MemoryUserIdentifyApi, RecallApi, ToolCallApi, ToolsApi

app_name = "runtime"

urlpatterns = [
    path("context/", ContextAssembleApi.as_view(), name="context"),
    path("recall/", RecallApi.as_view(), name="recall"),
    path("tools/", ToolsApi.as_view(), name="tools"),
    path("tools/call/", ToolCallApi.as_view(), name="tool-call"),
    path("memory-users/identify/", MemoryUserIdentifyApi.as_view(), name="identify"),
]
