"""FilterSet and full-text helpers every tier's selectors share (kept here so no tier imports
another tier's filters for them)."""

from django.contrib.postgres.search import SearchQuery, SearchVector

from core.errors import INVALID_INPUT, ApplicationError


def filterset_apply(filterset_class, data, queryset, **kwargs):
    """Run a FilterSet the way a selector needs it: bad filter values are a 400 naming the field."""
    filterset = filterset_class(data or {}, queryset=queryset, **kwargs)
    if not filterset.is_valid():
        fields = {name: [str(e) for e in errors] for name, errors in filterset.errors.items()}
        raise ApplicationError(INVALID_INPUT, fields=fields)
    return filterset.qs


def text_search(queryset, query: str, *, column: str = "search_text"):
    """Full-text match on a column carrying a GIN index on to_tsvector('english', column)."""
    return queryset.annotate(_search=SearchVector(column, config="english")).filter(
        _search=SearchQuery(query, search_type="websearch", config="english")
    )
