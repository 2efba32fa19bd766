import django_filters
from django.db.models import Q

from core.filters import FilterSet
from identities.models import MemoryUser
from threads.models import Thread


class ThreadFilter(FilterSet):
    """Filters of the thread list API and the /memories browser.

    Pass `workspace=` so the memory user is looked up in it; a user merged into another
    one is followed to its target, whose threads include those of every merged identity.
    """

    agent = django_filters.CharFilter(field_name="agent__slug", help_text="Agent slug.")
    memory_user = django_filters.UUIDFilter(method="filter_memory_user")
    channel = django_filters.CharFilter()
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
        user = users.select_related("merged_into").first()
        if user is None:
            return queryset.none()
        hops = 0
        while user.merged_into_id and hops < 16:
            user = user.merged_into
            hops += 1
        return queryset.filter(Q(memory_user=user) | Q(memory_user__merged_into=user))
