import django_filters
from django.db.models import Q

from core.filters import FilterSet
from episodes.models import Episode


class EpisodeFilter(FilterSet):
    """Filters of the episode list API and the /memories episodes tab."""

    agent = django_filters.CharFilter(field_name="agent__slug")
    memory_user = django_filters.UUIDFilter(field_name="memory_user_id")
    thread = django_filters.UUIDFilter(field_name="thread_id")
    trigger_type = django_filters.CharFilter(field_name="trigger_type")
    outcome = django_filters.ChoiceFilter(
        method="filter_outcome", choices=[*Episode.Outcome.choices, ("open", "Open (not closed)")]
    )
    rated = django_filters.BooleanFilter(field_name="rating", lookup_expr="isnull", exclude=True)
    min_rating = django_filters.NumberFilter(field_name="rating", lookup_expr="gte")
    started_after = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    started_before = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="lt")
    q = django_filters.CharFilter(method="filter_q", label="Text in trigger, error or feedback")
    ordering = django_filters.OrderingFilter(
        fields=(("started_at", "started_at"), ("duration_ms", "duration_ms"), ("rating", "rating"))
    )

    class Meta:
        model = Episode
        fields = []

    def filter_outcome(self, queryset, name, value):
        if value == "open":
            return queryset.filter(ended_at__isnull=True)
        return queryset.filter(outcome=value)

    def filter_q(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(
            Q(trigger_type__icontains=value)
            | Q(error__icontains=value)
            | Q(feedback_comment__icontains=value)
        )
