from django.urls import path

from webhooks import apis

app_name = "webhooks"

urlpatterns = [
    path("webhooks/", apis.WebhookListApi.as_view(), name="list"),
    path("webhooks/<uuid:subscription_id>/", apis.WebhookDetailApi.as_view(), name="detail"),
    path(
        "webhooks/<uuid:subscription_id>/rotate-secret/",
        apis.WebhookRotateSecretApi.as_view(),
        name="rotate-secret",
    ),
    path("webhooks/<uuid:subscription_id>/ping/", apis.WebhookPingApi.as_view(), name="ping"),
    path(
        "webhooks/<uuid:subscription_id>/deliveries/",
        apis.WebhookDeliveryListApi.as_view(),
        name="deliveries",
    ),
]
