from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse

from core.errors import ApplicationError
from core.lib.admin import (
    WorkspaceScopedAdmin,
    WorkspaceScopedInline,
    admin_actor,
    audit_history_html,
    batch_delete_by_workspace,
)
from identities.models import ChannelIdentity, MemoryUser
from identities.selectors import memory_user_resolve_merged, with_statistics
from identities.services import (
    memory_user_batch_delete,
    memory_user_create,
    memory_user_merge,
    memory_user_update,
)


class ChannelIdentityInline(WorkspaceScopedInline, admin.TabularInline):
    model = ChannelIdentity
    fields = ["channel", "external_id", "profile", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        # Identities are added by identify_user and moved by merges.
        return False


@admin.register(MemoryUser)
class MemoryUserAdmin(WorkspaceScopedAdmin):
    list_display = [
        "canonical_id",
        "display_name",
        "workspace",
        "merged_into",
        "thread_count",
        "message_count",
        "first_seen_at",
        "last_seen_at",
    ]
    list_filter = [("merged_into", admin.EmptyFieldListFilter), "workspace"]
    list_select_related = ["workspace", "merged_into"]
    search_fields = ["canonical_id", "display_name", "identities__external_id"]
    fields = [
        "workspace",
        "canonical_id",
        "display_name",
        "preferences",
        "merged_into",
        "first_seen_at",
        "last_seen_at",
        "audit_history",
    ]
    readonly_fields = ["preferences", "merged_into", "first_seen_at", "last_seen_at", "audit_history"]
    inlines = [ChannelIdentityInline]
    actions = ["merge_into_first"]
    # Run outside the changelist's transaction: each merge commits by itself, so it gives up its
    # people's locks before the next one takes others, and a refused merge keeps those before it.
    actions_committing_each_step = {"merge_into_first"}

    def get_queryset(self, request):
        return with_statistics(super().get_queryset(request))

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        return [*self.readonly_fields, "workspace"]

    @admin.display(description="threads", ordering="thread_count")
    def thread_count(self, obj):
        return obj.thread_count

    @admin.display(description="messages", ordering="message_count")
    def message_count(self, obj):
        return obj.message_count

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="memory_user", obj=obj)

    def save_model(self, request, obj, form, change):
        if change:
            memory_user_update(
                memory_user=MemoryUser.objects.get(pk=obj.pk),
                actor=admin_actor(request),
                display_name=obj.display_name,
                canonical_id=obj.canonical_id,
            )
            return
        created = memory_user_create(
            workspace=obj.workspace,
            canonical_id=obj.canonical_id,
            display_name=obj.display_name,
            actor=admin_actor(request),
        )
        obj.pk = created.pk
        obj._state.adding = False

    # Erasure can be refused (a legal hold, a record merged into another). The refusal is
    # raised inside the view's transaction, so the deletion log Django wrote first is rolled
    # back with it, and the operator reads the reason instead of a server error.
    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ApplicationError as exc:
            self.message_user(request, f"Nothing was erased: {exc.message}", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:identities_memoryuser_change", args=[object_id]))

    def changelist_view(self, request, extra_context=None):
        if request.method != "POST" or _action_chosen(request) in self.actions_committing_each_step:
            return super().changelist_view(request, extra_context)
        # Actions run here, the deletion included: atomic, so its deletion log goes with a refusal.
        try:
            with transaction.atomic():
                return super().changelist_view(request, extra_context)
        except ApplicationError as exc:
            self.message_user(request, f"Nothing was erased: {exc.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def delete_model(self, request, obj):
        self.delete_queryset(request, MemoryUser.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        # The right-to-erasure path: threads, messages, facts, episodes and entries go too.
        counts = batch_delete_by_workspace(request, queryset, memory_user_batch_delete)
        messages.success(request, f"Erased: {counts}.")

    @admin.action(description="Merge the selected users into the one seen first")
    def merge_into_first(self, request, queryset):
        users = list(queryset)
        if len({u.workspace_id for u in users}) != 1 or len(users) < 2:
            messages.error(request, "Select two or more users of one workspace.")
            return
        # The list shows merged users too: each stands for the user it was merged into, which
        # is the only one a merge accepts.
        people = {}
        for user in users:
            person = memory_user_resolve_merged(memory_user=user)
            people[person.pk] = person
        if len(people) < 2:
            messages.info(request, "The selected users are already one person.")
            return
        target, *sources = sorted(people.values(), key=lambda u: (u.first_seen_at, str(u.pk)))
        merged, refused = [], []
        for source in sources:
            # One transaction per merge (the service's own): see actions_committing_each_step.
            try:
                memory_user_merge(source=source, target=target, actor=admin_actor(request))
            except ApplicationError as exc:
                refused.append((source, exc.message))
            else:
                merged.append(source)
        if merged:
            names = ", ".join(str(u) for u in merged)
            messages.success(request, f"Merged into {target}: {names}.")
        for source, reason in refused:
            messages.error(request, f"Not merged into {target}: {source}: {reason}")


def _action_chosen(request) -> str | None:
    """The action a changelist POST runs, read as ModelAdmin.response_action reads it."""
    try:
        index = int(request.POST.get("index", 0))
    except ValueError:
        index = 0
    try:
        return request.POST.getlist("action")[index]
    except IndexError:
        return None
