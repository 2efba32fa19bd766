from django.contrib import admin, messages

from core.lib.admin import VectorAdmin, WorkspaceScopedAdmin, admin_actor
from threads.models import IterationLog, Message, MessageEmbedding, RunSnapshot, Thread, ThreadPlan
from threads.services import thread_compact_request, thread_delete, threads_delete


@admin.register(Thread)
class ThreadAdmin(WorkspaceScopedAdmin):
    list_display = [
        "__str__",
        "workspace",
        "agent",
        "memory_user",
        "channel",
        "channel_chat_id",
        "message_count",
        "summary_method",
        "last_activity_at",
    ]
    list_filter = ["channel", "summary_method", "workspace", "last_activity_at"]
    list_select_related = ["workspace", "agent", "memory_user"]
    search_fields = ["=id", "title", "channel_chat_id", "client_key"]
    date_hierarchy = "last_activity_at"
    raw_id_fields = ["memory_user"]
    readonly_fields = [
        "id",
        "workspace",
        "agent",
        "message_seq",
        "message_count",
        "summary",
        "summary_upto_id",
        "summary_upto_depth",
        "summary_tokens",
        "summary_covers_tokens",
        "summary_method",
        "compacted_at",
        "compaction_error",
        "compaction_lease_until",
        "compaction_requested_at",
        "last_activity_at",
        "created_at",
        "updated_at",
    ]
    actions = ["compact_now", "delete_with_everything"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        # The stock action would bypass the audit trail of thread deletion.
        actions.pop("delete_selected", None)
        return actions

    def has_add_permission(self, request):
        # Threads are created by agents through the API (thread_create / thread_resolve).
        return False

    def delete_model(self, request, obj):
        thread_delete(thread=obj, actor=admin_actor(request))

    def delete_queryset(self, request, queryset):
        self.delete_with_everything(request, queryset)

    @admin.action(description="Compact the selected threads now")
    def compact_now(self, request, queryset):
        threads = list(queryset.only("id"))
        for thread in threads:
            thread_compact_request(thread=thread)
        messages.success(request, f"Queued compaction of {len(threads)} thread(s).")

    @admin.action(description="Delete the selected threads with their messages and checkpoints")
    def delete_with_everything(self, request, queryset):
        counts = threads_delete(ids=list(queryset.values_list("pk", flat=True)), actor=admin_actor(request))
        messages.success(
            request, f"Deleted {counts['threads']} thread(s) and {counts['messages']} message(s)."
        )


@admin.register(Message)
class MessageAdmin(WorkspaceScopedAdmin):
    list_display = [
        "__str__",
        "role",
        "thread",
        "node_id",
        "delegation_id",
        "token_count",
        "depth",
        "created_at",
    ]
    list_filter = ["role", "archived", "created_at"]
    list_select_related = ["thread"]
    search_fields = ["=id", "=thread__id", "content", "idempotency_key"]
    show_full_result_count = False

    # Messages are history: the admin shows them and never edits them.
    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyHistoryAdmin(WorkspaceScopedAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ThreadPlan)
class ThreadPlanAdmin(ReadOnlyHistoryAdmin):
    list_display = ["thread", "version", "actor", "created_at"]
    list_filter = ["created_at"]
    list_select_related = ["thread"]
    search_fields = ["=thread__id", "actor"]


@admin.register(RunSnapshot)
class RunSnapshotAdmin(ReadOnlyHistoryAdmin):
    list_display = ["run_id", "thread", "updated_at"]
    list_filter = ["updated_at"]
    list_select_related = ["thread"]
    search_fields = ["run_id", "=thread__id"]


@admin.register(IterationLog)
class IterationLogAdmin(ReadOnlyHistoryAdmin):
    list_display = ["task_key", "attempt", "outcome", "thread", "at"]
    list_filter = ["outcome", "at"]
    list_select_related = ["thread"]
    search_fields = ["task_key", "error", "=thread__id"]


@admin.register(MessageEmbedding)
class MessageEmbeddingAdmin(VectorAdmin):
    list_display = ["message", "model", "dimensions", "workspace", "created_at"]
    list_select_related = ["message", "workspace"]
    search_fields = ["=message__id"]
    raw_id_fields = ["message", "thread"]
    exclude = ["embedding", "context_embedding"]
