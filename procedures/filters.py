import django_filters
from django.db.models import Q

from core.filters import FilterSet, text_search
from procedures.models import Procedure


class ProcedureFilter(FilterSet):
    """Filters of the procedure list API and the /memories procedures tab."""

    q = django_filters.CharFilter(method="filter_q", label="Full-text search")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    agent = django_filters.CharFilter(method="filter_agent", label="Agent slug ('-' for workspace-wide)")
    procedure_type = django_filters.MultipleChoiceFilter(choices=Procedure.ProcedureType.choices)
    origin = django_filters.MultipleChoiceFilter(choices=Procedure.Origin.choices)
    is_active = django_filters.BooleanFilter(field_name="is_active")
    parent = django_filters.UUIDFilter(field_name="parent_id")
    ordering = django_filters.OrderingFilter(
        fields=(
            ("name", "name"),
            ("version", "version"),
            ("times_used", "times_used"),
            ("success_count", "success_count"),
            ("last_used_at", "last_used_at"),
            ("created_at", "created_at"),
        )
    )

    class Meta:
        model = Procedure
        fields = []

    def filter_agent(self, queryset, name, value):
        if value == "-":
            return queryset.filter(agent__isnull=True)
        return queryset.filter(Q(agent__slug=value))

    def filter_q(self, queryset, name, value):
        return text_search(queryset, value) if value.strip() else queryset
