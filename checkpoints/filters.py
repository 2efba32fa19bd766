import django_filters

from checkpoints.models import Checkpoint
from core.filters import FilterSet, MetadataFilter


class CheckpointFilter(FilterSet):
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
