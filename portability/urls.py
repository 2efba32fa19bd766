from django.urls import path

from portability.apis import ExportApi, ImportApi, ImportJobDetailApi

app_name = "portability"

urlpatterns = [
    path("export/", ExportApi.as_view(), name="export"),
    path("import/", ImportApi.as_view(), name="import"),
    path("import/<uuid:job_id>/", ImportJobDetailApi.as_view(), name="import-detail"),
]
