import django_filters

from core.filters import FilterSet
from reflection.models import ReflectionProfile, ReflectionRun


class ReflectionRunFilter(FilterSet):
    """Filters of the reflection run list (API and /memories)."""

    agent = django_filters.CharFilter(field_name="agent__slug", max_length=100)
    state = django_filters.MultipleChoiceFilter(choices=ReflectionRun.State.choices)

    class Meta:
        model = ReflectionRun
        fields = []


class ReflectionProfileFilter(FilterSet):
    agent = django_filters.CharFilter(field_name="agent__slug", max_length=100)
    memory_user = django_filters.UUIDFilter(field_name="memory_user_id")

    class Meta:
        model = ReflectionProfile
        fields = []
