from django.urls import path

from retention import apis

app_name = "retention"

urlpatterns = [
    path("retention/", apis.RetentionApi.as_view(), name="overview"),
    path("retention/rules/", apis.RetentionRuleListApi.as_view(), name="rules"),
    path("retention/rules/<uuid:rule_id>/", apis.RetentionRuleDetailApi.as_view(), name="rule"),
    path("retention/runs/", apis.RetentionRunListApi.as_view(), name="runs"),
]
