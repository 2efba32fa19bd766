from django.urls import path

from provenance import apis

app_name = "provenance"

urlpatterns = [
    path("evidence/<slug:tier>/<uuid:item_id>/", apis.EvidenceApi.as_view(), name="evidence"),
    path("threads/<uuid:thread_id>/derived/", apis.ThreadDerivedApi.as_view(), name="thread-derived"),
]
