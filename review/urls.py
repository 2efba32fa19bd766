from django.urls import path

from review import apis

app_name = "review"

urlpatterns = [
    path("review/", apis.ReviewListApi.as_view(), name="list"),
    path("review/approve/", apis.ReviewApproveApi.as_view(), name="approve"),
    path("review/reject/", apis.ReviewRejectApi.as_view(), name="reject"),
    path("review/merge/", apis.ReviewMergeApi.as_view(), name="merge"),
    path("review/<slug:tier>/<uuid:item_id>/", apis.ReviewItemApi.as_view(), name="item"),
]
