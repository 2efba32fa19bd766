"""FilterSets of facts."""

import django_filters
from django.contrib.postgres.search import SearchQuery
from django.db.models import Q

from core.filters import FilterSet
from facts.models import Fact, FactKey, key_normalize


class FactFilter(FilterSet):
    """Filters of the fact list API and the /memories facts tab.

    `current` defaults to true (the open version of each key); `current=false` lists only
    superseded versions, `current=all` both.
    """

    key = django_filters.CharFilter(field_name="key")
    key_fuzzy = django_filters.CharFilter(method="filter_key_fuzzy", label="Key, fuzzy")
    q = django_filters.CharFilter(method="filter_q", label="Full-text search")
    # distinct=False: these are plain columns; DISTINCT made PostgreSQL de-duplicate every
    # matching row before it could take a page (~190 ms at 100,000 facts).
    scope = django_filters.MultipleChoiceFilter(choices=Fact.Scope.choices, distinct=False)
    fact_type = django_filters.MultipleChoiceFilter(choices=Fact.FactType.choices, distinct=False)
    source = django_filters.MultipleChoiceFilter(choices=Fact.Source.choices, distinct=False)
    agent = django_filters.CharFilter(field_name="agent__slug")
    memory_user = django_filters.UUIDFilter(field_name="memory_user_id")
    thread = django_filters.UUIDFilter(field_name="thread_id")
    min_confidence = django_filters.NumberFilter(field_name="confidence", lookup_expr="gte")
    max_confidence = django_filters.NumberFilter(field_name="confidence", lookup_expr="lte")
    current = django_filters.ChoiceFilter(
        method="filter_current",
        choices=[("true", "current"), ("false", "history"), ("all", "all")],
        empty_label=None,
    )
    valid_at = django_filters.IsoDateTimeFilter(method="filter_valid_at", label="Valid at (ISO time)")
    ordering = django_filters.OrderingFilter(
        fields=(
            ("confidence", "confidence"),
            ("valid_from", "valid_from"),
            ("key", "key"),
            ("access_count", "access_count"),
            ("times_confirmed", "times_confirmed"),
            ("last_accessed_at", "last_accessed_at"),
        )
    )

    class Meta:
        model = Fact
        fields = []

    def __init__(self, data=None, *args, **kwargs):
        data = data.copy() if data is not None else {}
        if not data.get("current") and not data.get("valid_at"):
            data["current"] = "true"
        super().__init__(data, *args, **kwargs)

    def filter_current(self, queryset, name, value):
        if value == "true":
            return queryset.filter(valid_to__isnull=True)
        if value == "false":
            return queryset.filter(valid_to__isnull=False)
        return queryset

    def filter_valid_at(self, queryset, name, value):
        return queryset.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=value), valid_from__lte=value)

    def filter_key_fuzzy(self, queryset, name, value):
        normalized = key_normalize(value)
        if not normalized:
            return queryset
        # Through the key dictionary: a trigram scan of every fact would not scale.
        every_word = Q()
        for word in normalized.split():
            every_word &= Q(key_normalized__contains=word)
        keys = FactKey.objects.filter(every_word | Q(key_normalized__trigram_word_similar=normalized)).values(
            "key_normalized"
        )
        return queryset.filter(key_normalized__in=keys)

    def filter_q(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(search_vector=SearchQuery(value, search_type="websearch", config="english"))
