import django_filters

from core.filters import FilterSet
from identities.models import MemoryUser
from identities.selectors import memory_user_merged_subquery, memory_user_resolve_merged
from threads.models import Thread


class ThreadFilter(FilterSet):
    """Filters of the thread list API and the /memories browser.

    Pass `workspace=` so the memory user is looked up in it; a user merged into another
    one is followed to the end of its chain, whose threads include those of every record
    merged into it, directly or along a chain.
    """

    agent = django_filters.CharFilter(field_name="agent__slug", help_text="Agent slug.")
    memory_user = django_filters.UUIDFilter(method="filter_memory_user")
    # Case-insensitive: channels are stored lowercase now, older threads may have kept "Slack".
    channel = django_filters.CharFilter(lookup_expr="iexact")
    channel_chat_id = django_filters.CharFilter()
    client_key = django_filters.CharFilter()
    active_after = django_filters.IsoDateTimeFilter(field_name="last_activity_at", lookup_expr="gte")
    active_before = django_filters.IsoDateTimeFilter(field_name="last_activity_at", lookup_expr="lt")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    q = django_filters.CharFilter(field_name="title", lookup_expr="icontains", help_text="Title search.")

    class Meta:
        model = Thread
        fields = []

    def __init__(self, *args, workspace=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.workspace = workspace

    def filter_memory_user(self, queryset, name, value):
        users = MemoryUser.objects.filter(pk=value)
        if self.workspace is not None:
            users = users.filter(workspace=self.workspace)
        user = users.first()
        if user is None:
            return queryset.none()
        # Older data holds chains (A merged into B, later B into C) whose threads were never
        # re-pointed: the survivor's threads are those of every record merged into it, at any
        # depth, not one hop.
        survivor = memory_user_resolve_merged(memory_user=user)
        return queryset.filter(memory_user_id__in=memory_user_merged_subquery(memory_user=survivor))
