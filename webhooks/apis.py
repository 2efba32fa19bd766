from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_views import ListApi, RetrieveApi
from core.pagination import LimitOffsetPagination, paginate
from core.serializers import StrictSerializer
from webhooks.events import EVENT_TYPES
from webhooks.filters import WebhookDeliveryFilter
from webhooks.selectors import webhook_delivery_list, webhook_subscription_get, webhook_subscription_list
from webhooks.services import (
    webhook_ping,
    webhook_secret_rotate,
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscription_update,
)

EVENTS_HELP = "Event types to receive; empty or omitted: every type. Known: " + ", ".join(EVENT_TYPES) + "."

SUBSCRIPTION_ID = "b7c8d9e0-f1a2-4b3c-8d4e-5f6a7b8c9d0e"
SUBSCRIPTION_EXAMPLE = {
    "id": SUBSCRIPTION_ID,
    "url": "https://hooks.example.com/memory",
    "description": "CRM sync",
    "events": ["fact.created", "fact.updated", "person.erased"],
    "is_active": True,
    "disabled_reason": "",
    "disabled_at": None,
    "consecutive_failures": 0,
    "last_delivery_at": "2026-11-23T14:41:02.179850Z",
    "created_at": "2026-11-20T09:00:00.000000Z",
    "updated_at": "2026-11-20T09:00:00.000000Z",
}
SUBSCRIPTION_RESPONSE = OpenApiExample("A subscription", value=SUBSCRIPTION_EXAMPLE, response_only=True)
SECRET_EXAMPLE = {**SUBSCRIPTION_EXAMPLE, "secret": "whsec_3q2+7wAAAAB9xQJf0h5mYw=="}
DELIVERY_EXAMPLE = {
    "id": "c9d0e1f2-a3b4-4c5d-9e6f-7a8b9c0d1e2f",
    "event_id": "evt_4812",
    "event_type": "fact.created",
    "status": "succeeded",
    "attempts": 1,
    "response_status": 200,
    "last_error": "",
    "next_attempt_at": None,
    "last_attempt_at": "2026-11-23T14:41:02.179850Z",
    "delivered_at": "2026-11-23T14:41:02.179850Z",
    "created_at": "2026-11-23T14:41:01.902113Z",
    "payload": {
        "id": "evt_4812",
        "type": "fact.created",
        "created_at": "2026-11-23T14:41:01.617009+00:00",
        "workspace": "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b",
        "actor": "api_key:3d1aeaa037c0",
        "data": {"object": "fact", "id": "eb44ad85-3ad8-4402-aa88-566df426c9ad", "changes": {"key": "city"}},
        "delivery_id": "c9d0e1f2-a3b4-4c5d-9e6f-7a8b9c0d1e2f",
    },
}


class SubscriptionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.URLField()
    description = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField(), help_text="Empty: every event type.")
    is_active = serializers.BooleanField()
    disabled_reason = serializers.CharField(help_text="Why it was disabled (by whom, or after failures).")
    disabled_at = serializers.DateTimeField(allow_null=True)
    consecutive_failures = serializers.IntegerField(help_text="Failed attempts since the last success.")
    last_delivery_at = serializers.DateTimeField(allow_null=True, help_text="The last successful delivery.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class SubscriptionSecretOutputSerializer(SubscriptionOutputSerializer):
    secret = serializers.CharField(
        help_text="The signing secret, shown in this response only: verify each request's "
        "X-Memory-Signature with it (docs/webhooks.md)."
    )


class DeliveryOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField(
        help_text="The body's signed `delivery_id`, also sent unsigned as X-Memory-Delivery: dedupe by it."
    )
    event_id = serializers.CharField()
    event_type = serializers.CharField()
    status = serializers.CharField()
    attempts = serializers.IntegerField()
    response_status = serializers.IntegerField(allow_null=True, help_text="The last attempt's HTTP status.")
    last_error = serializers.CharField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    payload = serializers.JSONField(help_text="The JSON body sent.")


def _with_secret(subscription, secret: str) -> dict:
    data = SubscriptionOutputSerializer(subscription).data
    data["secret"] = secret
    return data


@extend_schema_view(get=extend_schema(summary="List webhook subscriptions", examples=[SUBSCRIPTION_RESPONSE]))
class WebhookListApi(ListApi):
    selector = webhook_subscription_list
    OutputSerializer = SubscriptionOutputSerializer
    operation_id = "webhooks_list"

    class InputSerializer(StrictSerializer):
        url = serializers.URLField(max_length=2000)
        events = serializers.ListField(
            child=serializers.CharField(max_length=50), required=False, max_length=50, help_text=EVENTS_HELP
        )
        description = serializers.CharField(max_length=200, required=False, allow_blank=True)

    @extend_schema(
        summary="Subscribe a URL to memory events",
        request=InputSerializer,
        responses={201: SubscriptionSecretOutputSerializer},
        examples=[
            OpenApiExample(
                "Facts and erasures, to a CRM",
                value={
                    "url": "https://hooks.example.com/memory",
                    "events": ["fact.created", "fact.updated", "person.erased"],
                    "description": "CRM sync",
                },
                request_only=True,
            ),
            OpenApiExample("Subscribed, with its secret", value=SECRET_EXAMPLE, response_only=True),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        subscription, secret = webhook_subscription_create(
            principal=request.user, **serializer.validated_data
        )
        return Response(_with_secret(subscription, secret), status=status.HTTP_201_CREATED)


@extend_schema_view(get=extend_schema(summary="Get a webhook subscription", examples=[SUBSCRIPTION_RESPONSE]))
class WebhookDetailApi(RetrieveApi):
    selector = webhook_subscription_get
    OutputSerializer = SubscriptionOutputSerializer

    class InputSerializer(StrictSerializer):
        url = serializers.URLField(max_length=2000, required=False)
        events = serializers.ListField(
            child=serializers.CharField(max_length=50), required=False, max_length=50, help_text=EVENTS_HELP
        )
        description = serializers.CharField(max_length=200, required=False, allow_blank=True)
        is_active = serializers.BooleanField(
            required=False, help_text="true enables it again (clearing the failures); false pauses it."
        )

    @extend_schema(
        summary="Change, pause or re-enable a webhook subscription",
        request=InputSerializer,
        responses=SubscriptionOutputSerializer,
        examples=[
            OpenApiExample("Enable it again", value={"is_active": True}, request_only=True),
            SUBSCRIPTION_RESPONSE,
        ],
    )
    def patch(self, request, subscription_id):
        subscription = self.get_object(request, subscription_id=subscription_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        subscription = webhook_subscription_update(
            principal=request.user, subscription=subscription, **serializer.validated_data
        )
        return Response(SubscriptionOutputSerializer(subscription).data)

    @extend_schema(summary="Delete a webhook subscription", responses={204: None})
    def delete(self, request, subscription_id):
        subscription = self.get_object(request, subscription_id=subscription_id)
        webhook_subscription_delete(principal=request.user, subscription=subscription)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateSecretApi(APIView):
    """Replace the signing secret; the new one is in this response only."""

    @extend_schema(
        summary="Rotate a subscription's signing secret",
        request=None,
        responses={200: SubscriptionSecretOutputSerializer},
        examples=[OpenApiExample("The new secret", value=SECRET_EXAMPLE, response_only=True)],
    )
    def post(self, request, subscription_id):
        subscription = webhook_subscription_get(principal=request.user, subscription_id=subscription_id)
        secret = webhook_secret_rotate(principal=request.user, subscription=subscription)
        subscription.refresh_from_db()
        return Response(_with_secret(subscription, secret))


class WebhookPingApi(APIView):
    """Send a `ping` event now, to check that the receiver answers and verifies signatures."""

    @extend_schema(
        summary="Send a ping event to a subscription now",
        request=None,
        responses={202: DeliveryOutputSerializer},
        examples=[
            OpenApiExample(
                "Queued",
                value={
                    **DELIVERY_EXAMPLE,
                    "event_id": "evt_ping_5b7e0c2a9d4f4e1b8c3a6f0d2e9b1c47",
                    "event_type": "ping",
                    "status": "pending",
                    "attempts": 0,
                    "response_status": None,
                    "last_attempt_at": None,
                    "delivered_at": None,
                    "payload": {
                        **DELIVERY_EXAMPLE["payload"],
                        "id": "evt_ping_5b7e0c2a9d4f4e1b8c3a6f0d2e9b1c47",
                        "type": "ping",
                        "data": {"object": "subscription", "id": "7b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"},
                    },
                },
                response_only=True,
                status_codes=[202],
            )
        ],
    )
    def post(self, request, subscription_id):
        subscription = webhook_subscription_get(principal=request.user, subscription_id=subscription_id)
        delivery = webhook_ping(principal=request.user, subscription=subscription)
        delivery.refresh_from_db()
        return Response(DeliveryOutputSerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


class WebhookDeliveryListApi(APIView):
    """The subscription's delivery log, newest first."""

    pagination_class = LimitOffsetPagination
    read_replica = True

    @extend_schema(
        parameters=[OpenApiParameter(name, str) for name in WebhookDeliveryFilter.base_filters],
        responses=DeliveryOutputSerializer(many=True),
        operation_id="webhooks_deliveries_list",
        summary="List a subscription's deliveries, newest first",
        examples=[OpenApiExample("A delivery", value=DELIVERY_EXAMPLE, response_only=True)],
    )
    def get(self, request, subscription_id):
        queryset = webhook_delivery_list(
            principal=request.user, subscription_id=subscription_id, filters=request.query_params
        )
        return paginate(
            queryset=queryset, serializer_class=DeliveryOutputSerializer, request=request, view=self
        )
