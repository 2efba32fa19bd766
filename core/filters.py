"""FilterSet and full-text helpers every tier's selectors share (kept here so no tier imports
another tier's filters for them)."""

from datetime import date

import django_filters
from django import forms
from django.contrib.postgres.search import SearchQuery
from django.core.exceptions import ValidationError
from django.db.models import BooleanField, ExpressionWrapper, F, Func, IntegerField, Q, Value

from core.errors import INVALID_INPUT, ApplicationError
from core.parsers import json_loads_checked


def range_empty_message(low: str, high: str, *, moments: bool = True, equal_holds: bool = False) -> str:
    """The refusal of a range between filters `low` and `high` that can hold nothing."""
    if moments:
        return f"{high} must be {'at or after' if equal_holds else 'later than'} {low}."
    return f"{high} must be {'at least' if equal_holds else 'greater than'} {low}."


# A range's two ends: the lookup of its lower end and of its upper end, and whether a range
# whose ends are equal still holds a value (`gte` and `lte` both keep the end itself).
_LOWER_LOOKUPS = {"gte": True, "gt": False}
_UPPER_LOOKUPS = {"lte": True, "lt": False}


class _RangeCheckedForm(forms.Form):
    """A filter form that refuses a range that can hold nothing (`ranges`: (lower filter, upper
    filter, whether equal ends hold a value)), naming its upper end."""

    ranges: tuple[tuple[str, str, bool], ...] = ()

    def clean(self):
        cleaned = super().clean()
        for low, high, equal_holds in self.ranges:
            start, end = cleaned.get(low), cleaned.get(high)
            if start is None or end is None:
                continue
            if start > end or (start == end and not equal_holds):
                moments = isinstance(start, date)
                self.add_error(high, range_empty_message(low, high, moments=moments, equal_holds=equal_holds))
        return cleaned


class FilterSet(django_filters.FilterSet):
    """Every tier's FilterSet. Two filters on one field, a lower and an upper bound
    (`created_after` / `created_before`), are a range: one that can hold no row is refused
    (400 naming the upper bound) instead of answering an empty page that looks like no data."""

    def get_form_class(self):
        form_class = super().get_form_class()
        ranges = _filter_ranges(self.filters)
        if not ranges:
            return form_class
        return type(form_class.__name__, (_RangeCheckedForm, form_class), {"ranges": ranges})


def _filter_ranges(filters: dict) -> tuple[tuple[str, str, bool], ...]:
    lower, upper = {}, {}
    for name, filter_ in filters.items():
        if getattr(filter_, "method", None) is not None:
            continue
        lookup = filter_.lookup_expr
        if lookup in _LOWER_LOOKUPS:
            lower.setdefault(filter_.field_name, (name, _LOWER_LOOKUPS[lookup]))
        elif lookup in _UPPER_LOOKUPS:
            upper.setdefault(filter_.field_name, (name, _UPPER_LOOKUPS[lookup]))
    return tuple(
        (low, upper[field][0], low_holds and upper[field][1])
        for field, (low, low_holds) in lower.items()
        if field in upper
    )


def filterset_apply(filterset_class, data, queryset, **kwargs):
    """Run a FilterSet the way a selector needs it: bad filter values are a 400 naming the field."""
    filterset = filterset_class(data or {}, queryset=queryset, **kwargs)
    if not filterset.is_valid():
        fields = {name: [str(e) for e in errors] for name, errors in filterset.errors.items()}
        raise ApplicationError(INVALID_INPUT, fields=fields)
    return filterset.qs


def text_search(queryset, query: str, *, vector: str = "search_vector"):
    """Full-text match (websearch syntax) on `vector`, a stored tsvector with a GIN index."""
    return queryset.filter(**{vector: SearchQuery(query, search_type="websearch", config="english")})


def text_search_relaxed(queryset, query: str, *, vector: str = "search_vector"):
    """`text_search` that also keeps the rows holding only some of the words of `query`
    (`any_word_tsquery_sql`), each row annotated `every_word`: whether `text_search` would keep
    it, and `words_held`: how many of the query's words (lexemes) it holds. Ordered by
    `-every_word` first, `every_word_first` then keeps the rows holding every word when there
    are any, else those holding some; ordered by `-words_held` next, the rows holding more of
    the words come first among those. Both searches in one statement."""
    every_word = SearchQuery(query, search_type="websearch", config="english")
    return queryset.filter(**{vector: _AnyWordQuery(query)}).annotate(
        every_word=ExpressionWrapper(Q(**{vector: every_word}), output_field=BooleanField()),
        words_held=_WordsHeld(F(vector), Value(query)),
    )


def every_word_first(rows: list) -> list:
    """The rows of `text_search_relaxed` (ordered by `-every_word` first) holding every word of
    the query, or all of them when none does."""
    return [row for row in rows if row.every_word] or rows


def any_word_tsquery_sql(text_sql: str = "%s") -> str:
    """SQL of a tsquery matching any word of the text `text_sql` (a parameter), as the english
    configuration stems it; NULL, which matches nothing, for a text of stop words only.

    A question an agent asks ("what is my dog called") seldom has every one of its words in
    what answers it: the searches that require them all fall back to this when they find
    nothing. Each lexeme is quoted and the whole cast, not parsed again (`to_tsquery` would
    make 'example.com/path' a phrase of its parts); PostgreSQL builds it once a statement."""
    return (
        "(SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery "
        f"FROM unnest(to_tsvector('english'::regconfig, {text_sql})))"
    )


class _AnyWordQuery(SearchQuery):
    """`any_word_tsquery_sql` of the query, for `text_search_relaxed`."""

    def as_sql(self, compiler, connection, function=None, template=None):
        sql, params = compiler.compile(self.source_expressions[0])
        return any_word_tsquery_sql(sql), params


class _WordsHeld(Func):
    """How many distinct words (lexemes) of a text, as the english configuration stems it, a
    tsvector holds: `_WordsHeld(vector, Value(text))`."""

    output_field = IntegerField()

    def as_sql(self, compiler, connection, **extra_context):
        vector, text = self.source_expressions
        vector_sql, vector_params = compiler.compile(vector)
        text_sql, text_params = compiler.compile(text)
        sql = (
            f"(SELECT count(*) FROM unnest({vector_sql}) AS held WHERE held.lexeme = "
            f"ANY(tsvector_to_array(to_tsvector('english'::regconfig, {text_sql}))))"
        )
        return sql, (*vector_params, *text_params)


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
