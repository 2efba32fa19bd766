from django.urls import path

from runtime.apis import ContextAssembleApi

app_name = "runtime"

urlpatterns = [
    path("context/", ContextAssembleApi.as_view(), name="context"),
]
