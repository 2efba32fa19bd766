import django_filters

from core.filters import FilterSet
from webhooks.events import EVENT_TYPES, PING
from webhooks.models import WebhookDelivery


class WebhookDeliveryFilter(FilterSet):
    """Filters of a subscription's delivery log (API and /memories)."""

    status = django_filters.MultipleChoiceFilter(choices=WebhookDelivery.Status.choices)
    event_type = django_filters.MultipleChoiceFilter(choices=[(name, name) for name in (*EVENT_TYPES, PING)])
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = WebhookDelivery
        fields = []
