import django_filters
from django import forms
from django.core.exceptions import ValidationError

from checkpoints.models import Checkpoint
from core.parsers import json_loads_checked

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
    field_class = JSONObjectField

    def filter(self, qs, value):
        if not value:
            return qs
        # JSONB containment (@>): {"source": "loop"} matches metadata with at least that pair.
        return qs.filter(metadata__contains=value)


class CheckpointFilter(django_filters.FilterSet):
    """Filters of the checkpoint list APIs and the /memories browser."""

    thread = django_filters.UUIDFilter(field_name="thread_id")
    agent = django_filters.CharFilter(field_name="thread__agent__slug", help_text="Agent slug.")
    checkpoint_ns = django_filters.CharFilter()
    checkpoint_id = django_filters.CharFilter()
    parent_checkpoint_id = django_filters.CharFilter()
    before = django_filters.CharFilter(
        field_name="checkpoint_id", lookup_expr="lt", help_text="Checkpoints older than this checkpoint id."
    )
    metadata = MetadataFilter(help_text="JSON object; checkpoints whose metadata contains it.")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Checkpoint
        fields = []
