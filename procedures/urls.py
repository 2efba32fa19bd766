from django.urls import path

from procedures import apis

app_name = "procedures"

urlpatterns = [
    path("procedures/", apis.ProcedureListApi.as_view(), name="list"),
    path("procedures/match/", apis.ProcedureMatchApi.as_view(), name="match"),
    path("procedures/learn/", apis.ProcedureLearnApi.as_view(), name="learn"),
    path("procedures/batch-delete/", apis.ProcedureBatchDeleteApi.as_view(), name="batch-delete"),
    path("procedures/<uuid:procedure_id>/", apis.ProcedureDetailApi.as_view(), name="detail"),
    path("procedures/<uuid:procedure_id>/runs/", apis.ProcedureRunApi.as_view(), name="runs"),
]
