"""FilterSet and full-text helpers every tier's selectors share (kept here so no tier imports
another tier's filters for them)."""

import django_filters
from django import forms
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.core.exceptions import ValidationError

from core.errors import INVALID_INPUT, ApplicationError
from core.parsers import json_loads_checked


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


METADATA_INVALID = 'metadata must be a JSON object, for example {"source": "loop"}.'


def metadata_filter_value(value):
    """Parse the `metadata` query value (a JSON object); raises ValidationError otherwise."""
    if isinstance(value, dict):
        return value
    try:
        parsed = json_loads_checked(value)
    except (TypeError, ValueError):
        raise ValidationError(METADATA_INVALID)
    if not isinstance(parsed, dict):
        raise ValidationError(METADATA_INVALID)
    return parsed


class JSONObjectField(forms.CharField):
    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        return metadata_filter_value(value)


class MetadataFilter(django_filters.Filter):
    """`?metadata={...}`: rows whose `metadata` column contains the object (checkpoints,
    episodic entries)."""

    field_class = JSONObjectField

    def filter(self, qs, value):
        if not value:
            return qs
        # JSONB containment (@>): {"source": "loop"} matches metadata with at least that pair.
        return qs.filter(metadata__contains=value)
