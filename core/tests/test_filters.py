import importlib
from datetime import UTC, datetime
from pathlib import Path

import django_filters
from django.apps import apps
from django.conf import settings
from django.test import SimpleTestCase

from core.filters import FilterSet
from episodic.models import EpisodicEntry


class Window(FilterSet):
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    min_confidence = django_filters.NumberFilter(field_name="confidence", lookup_expr="gte")
    max_confidence = django_filters.NumberFilter(field_name="confidence", lookup_expr="lte")
    # Computed by a method: not a bound of `created_at`, whatever its lookup says.
    since = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", method="filter_since"
    )

    class Meta:
        model = EpisodicEntry
        fields = []

    def filter_since(self, queryset, name, value):
        return queryset


def errors(**data):
    filterset = Window(data, queryset=EpisodicEntry.objects.none())
    return {} if filterset.is_valid() else dict(filterset.errors)


class RangeTests(SimpleTestCase):
    def test_an_upper_bound_the_range_excludes_refuses_equal_ends(self):
        moment = "2026-06-01T00:00:00Z"
        assert errors(created_after=moment, created_before=moment) == {
            "created_before": ["created_before must be later than created_after."]
        }
        assert errors(created_after=moment, created_before="2026-06-01T00:00:01Z") == {}

    def test_bounds_the_range_includes_accept_equal_ends(self):
        assert errors(min_confidence="0.5", max_confidence="0.5") == {}
        assert errors(min_confidence="0.6", max_confidence="0.5") == {
            "max_confidence": ["max_confidence must be at least min_confidence."]
        }

    def test_one_bound_alone_or_a_method_filter_is_no_range(self):
        assert errors(created_after="2026-06-01T00:00:00Z") == {}
        assert errors(since="2026-06-02T00:00:00Z", created_before="2026-06-01T00:00:00Z") == {}

    def test_an_invalid_bound_is_named_once_for_itself(self):
        assert set(errors(created_after="soon", created_before="2026-06-01T00:00:00Z")) == {"created_after"}

    def test_the_bounds_compare_as_moments_whatever_their_offsets(self):
        later = datetime(2026, 6, 1, 12, tzinfo=UTC)
        assert errors(created_after=later.isoformat(), created_before="2026-06-01T13:00:00+02:00") == {
            "created_before": ["created_before must be later than created_after."]
        }


class EveryFilterSetTests(SimpleTestCase):
    def test_every_filterset_of_the_project_checks_its_ranges(self):
        """A tier's FilterSet built on django-filter's own base would answer an empty range
        with an empty page (core.filters.FilterSet refuses it)."""
        root = Path(settings.BASE_DIR)
        ours = [config for config in apps.get_app_configs() if Path(config.path).parent == root]
        for config in ours:
            for module in ("filters", "selectors"):
                try:
                    importlib.import_module(f"{config.name}.{module}")
                except ModuleNotFoundError as exc:
                    if exc.name != f"{config.name}.{module}":
                        raise
        found, pending = [], list(django_filters.FilterSet.__subclasses__())
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            if cls.__module__.split(".")[0] in {c.name for c in ours} and "tests" not in cls.__module__:
                found.append(cls)
        assert len(found) >= 12, found
        assert [cls for cls in found if not issubclass(cls, FilterSet)] == []
