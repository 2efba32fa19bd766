import django_filters
from django.db.models import Exists, OuterRef, Q

from core.filters import FilterSet
from identities.models import ChannelIdentity, MemoryUser


class MemoryUserFilter(FilterSet):
    """Filters of the memory user list API and the /memories users tab.

    Merged users are hidden unless `merged=true` (only merged) or `merged=all`.
    """

    q = django_filters.CharFilter(method="filter_q", label="Name, canonical id or external id")
    channel = django_filters.CharFilter(method="filter_channel")
    canonical_id = django_filters.CharFilter(field_name="canonical_id")
    merged = django_filters.ChoiceFilter(
        method="filter_merged", choices=[("false", "active"), ("true", "merged"), ("all", "all")]
    )
    seen_after = django_filters.IsoDateTimeFilter(field_name="last_seen_at", lookup_expr="gte")
    seen_before = django_filters.IsoDateTimeFilter(field_name="last_seen_at", lookup_expr="lt")
    ordering = django_filters.OrderingFilter(
        fields=(
            ("last_seen_at", "last_seen_at"),
            ("first_seen_at", "first_seen_at"),
            ("display_name", "display_name"),
            ("canonical_id", "canonical_id"),
        )
    )

    class Meta:
        model = MemoryUser
        fields = []

    def __init__(self, data=None, *args, **kwargs):
        data = data.copy() if data is not None else {}
        data.setdefault("merged", "false")
        super().__init__(data, *args, **kwargs)

    def filter_q(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        identity = ChannelIdentity.objects.filter(memory_user=OuterRef("pk"), external_id__icontains=value)
        return queryset.filter(
            Q(display_name__icontains=value) | Q(canonical_id__icontains=value) | Exists(identity)
        )

    def filter_channel(self, queryset, name, value):
        return queryset.filter(
            Exists(ChannelIdentity.objects.filter(memory_user=OuterRef("pk"), channel=value))
        )

    def filter_merged(self, queryset, name, value):
        if value == "false":
            return queryset.filter(merged_into__isnull=True)
        if value == "true":
            return queryset.filter(merged_into__isnull=False)
        return queryset
