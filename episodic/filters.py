import django_filters
from django.contrib.postgres.search import SearchQuery

from core.filters import FilterSet, MetadataFilter
from episodic.models import EpisodicEntry


class EpisodicEntryFilter(FilterSet):
    """Filters of the episodic entry list API and the /memories episodic tab."""

    agent = django_filters.CharFilter(field_name="agent__slug")
    memory_user = django_filters.UUIDFilter(field_name="memory_user_id")
    status = django_filters.MultipleChoiceFilter(choices=EpisodicEntry.Status.choices)
    source = django_filters.MultipleChoiceFilter(choices=EpisodicEntry.Source.choices)
    thread = django_filters.UUIDFilter(field_name="source_thread_id")
    q = django_filters.CharFilter(method="filter_q", label="Full-text search")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    metadata = MetadataFilter(help_text="JSON object; entries whose metadata contains it.")
    # A choice, not a BooleanFilter: its widget reads an unknown value as "unset" instead of an error.
    include_superseded = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="filter_include_superseded",
        label="Include superseded entries (history); without it, or a `status`, they are left out",
    )

    class Meta:
        model = EpisodicEntry
        fields = []

    def filter_queryset(self, queryset):
        # Readers see current entries by default, as search and <memory> do; an entry rejected
        # in review (docs/review.md) is shown only when its status is asked for.
        data = self.form.cleaned_data
        if not data.get("status"):
            queryset = queryset.exclude(status=EpisodicEntry.Status.REJECTED)
        if data.get("include_superseded") != "true" and not data.get("status"):
            queryset = queryset.exclude(status=EpisodicEntry.Status.SUPERSEDED)
        return super().filter_queryset(queryset)

    def filter_include_superseded(self, queryset, name, value):
        return queryset  # Applied in filter_queryset, which also sees `status`.

    def filter_q(self, queryset, name, value):
        # The stored, GIN-indexed tsvector: no per-row to_tsvector at query time.
        return queryset.filter(search_vector=SearchQuery(value, search_type="websearch", config="english"))
