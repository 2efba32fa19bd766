from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError

from core.lib.addresses import address_public, host_addresses
from core.lib.admin import (
    SuperuserOnlyAdmin,
    WorkspaceScopedAdmin,
    WorkspaceScopedInline,
    admin_workspace_ids,
)
from core.lib.crypto import encrypt
from core.memory_settings import memory_settings_validate
from core.models import (
    Agent,
    ApiKey,
    AuditEvent,
    LLMBudget,
    LLMJob,
    LLMUsage,
    Membership,
    ProviderCredential,
    WorkerHeartbeat,
    Workspace,
)
from core.selectors import api_key_cache_clear, provider_cache_clear
from core.services import (
    API_KEY_AGENT_WORKSPACE,
    API_KEY_MAX_EXPIRES_DAYS,
    api_key_create,
    api_key_revoke,
)

# Operators and groups span workspaces: only superusers manage them here. Workspace admins
# add members in /memories (Members tab) or with `manage.py create_operator`.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class OperatorAdmin(SuperuserOnlyAdmin, UserAdmin):
    pass


@admin.register(Group)
class OperatorGroupAdmin(SuperuserOnlyAdmin, GroupAdmin):
    pass


class ClearsApiKeyCache:
    """For admins of rows an authenticated key carries (the key, its agent, its workspace):
    this process's cached keys are dropped, as the services do, so a deleted key or an agent's
    new settings apply at once here (other processes: within API_KEY_CACHE_SECONDS)."""

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        api_key_cache_clear()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        api_key_cache_clear()

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        api_key_cache_clear()


class MembersReadOnlyForScopedAdmins:
    """Memberships are shown to workspace admins and changed only in /memories (Members tab),
    whose services keep the last admin of a workspace and audit every change."""

    def has_add_permission(self, request, *args):
        return admin_workspace_ids(request) is None and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return admin_workspace_ids(request) is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return admin_workspace_ids(request) is None and super().has_delete_permission(request, obj)


class MembershipInline(MembersReadOnlyForScopedAdmins, WorkspaceScopedInline, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(ClearsApiKeyCache, WorkspaceScopedAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    # A workspace admin may rename theirs; creating and deleting workspaces is for superusers.
    def has_add_permission(self, request):
        return admin_workspace_ids(request) is None and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return admin_workspace_ids(request) is None and super().has_delete_permission(request, obj)


@admin.register(Membership)
class MembershipAdmin(MembersReadOnlyForScopedAdmins, WorkspaceScopedAdmin):
    list_display = ["user", "workspace", "role"]
    list_filter = ["role", "workspace"]
    list_select_related = ["user", "workspace"]
    search_fields = ["user__username", "workspace__name"]
    autocomplete_fields = ["user", "workspace"]


class AgentAdminForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ["workspace", "slug", "name", "memory_settings"]

    def clean_memory_settings(self):
        # The same rules as PATCH /agents/{slug}/: a value the API would refuse never reaches the row.
        try:
            return memory_settings_validate(self.cleaned_data["memory_settings"])
        except ValidationError as exc:
            if not hasattr(exc, "error_dict"):
                raise
            raise ValidationError(
                [f"{key}: {message}" for key, messages in exc.message_dict.items() for message in messages]
            )


@admin.register(Agent)
class AgentAdmin(ClearsApiKeyCache, WorkspaceScopedAdmin):
    form = AgentAdminForm
    list_display = ["slug", "name", "workspace", "created_at"]
    list_filter = ["workspace"]
    list_select_related = ["workspace"]
    search_fields = ["slug", "name"]


class ApiKeyAddForm(forms.ModelForm):
    expires_in_days = forms.IntegerField(required=False, min_value=1, max_value=API_KEY_MAX_EXPIRES_DAYS)

    class Meta:
        model = ApiKey
        fields = ["workspace", "agent", "name", "read_only"]

    def clean(self):
        # api_key_create refuses the pair too, but save_model runs after validation, where a
        # refusal could only be a 500: the form says it first.
        cleaned = super().clean()
        workspace, agent = cleaned.get("workspace"), cleaned.get("agent")
        if workspace is not None and agent is not None and agent.workspace_id != workspace.pk:
            self.add_error("agent", API_KEY_AGENT_WORKSPACE)
        return cleaned


@admin.register(ApiKey)
class ApiKeyAdmin(ClearsApiKeyCache, WorkspaceScopedAdmin):
    list_display = [
        "prefix",
        "name",
        "workspace",
        "agent",
        "read_only",
        "expires_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["read_only", "workspace"]
    list_select_related = ["workspace", "agent"]
    search_fields = ["prefix", "name"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at", "created_by"]
    exclude = ["secret_hash"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return [*self.readonly_fields, "workspace", "agent", "read_only", "expires_at"]

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["name"])
            return
        api_key, secret = api_key_create(
            workspace=form.cleaned_data["workspace"],
            agent=form.cleaned_data.get("agent"),
            name=form.cleaned_data.get("name", ""),
            read_only=form.cleaned_data.get("read_only", False),
            expires_in_days=form.cleaned_data.get("expires_in_days"),
            created_by=request.user,
        )
        obj.pk = api_key.pk
        obj._state.adding = False
        # The only time the secret is visible: it is not stored.
        messages.warning(request, f"Copy the new key now, it will not be shown again: {secret}")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        for api_key in queryset:
            api_key_revoke(api_key=api_key)
        messages.success(request, f"Revoked {queryset.count()} key(s).")


PROVIDER_URL_PRIVATE = (
    "This endpoint's host is a private, loopback or link-local address: only a superuser may "
    "point the server there (a self-hosted model), or set PROVIDER_ALLOW_PRIVATE_URLS."
)


class ProviderCredentialForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the stored key.",
    )
    # Set per request by ProviderCredentialAdmin.get_form.
    allow_private = True

    class Meta:
        model = ProviderCredential
        fields = ["workspace", "purpose", "base_url", "model"]

    def clean_base_url(self):
        # The workers send every embedding and chat request of the workspace there: a
        # workspace admin must not aim them at the server's own network (core.lib.addresses).
        base_url = self.cleaned_data.get("base_url")
        host = urlsplit(base_url or "").hostname
        if self.allow_private or not host:
            return base_url
        try:
            addresses = host_addresses(host)
        except (OSError, UnicodeError, ValueError):
            return base_url  # Not resolvable now: nothing to judge (the request will fail).
        if not all(address_public(address) for address in addresses):
            raise forms.ValidationError(PROVIDER_URL_PRIVATE)
        return base_url


@admin.register(ProviderCredential)
class ProviderCredentialAdmin(WorkspaceScopedAdmin):
    form = ProviderCredentialForm
    list_display = ["workspace", "purpose", "model", "base_url"]
    list_filter = ["purpose"]
    list_select_related = ["workspace"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.allow_private = request.user.is_superuser or settings.PROVIDER_ALLOW_PRIVATE_URLS
        return form

    def save_model(self, request, obj, form, change):
        if form.cleaned_data.get("api_key"):
            obj.api_key_encrypted = encrypt(form.cleaned_data["api_key"])
        # A superuser's save stands for its address when requests are sent (a self-hosted
        # model); anyone else's, re-checked at every request (core.lib.addresses).
        obj.private_allowed = request.user.is_superuser
        super().save_model(request, obj, form, change)
        # As provider_credential_set does: this process's copy of the endpoint (or of its
        # absence) would otherwise outlive the change by PROVIDER_CACHE_SECONDS.
        provider_cache_clear()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        provider_cache_clear()

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        provider_cache_clear()


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(SuperuserOnlyAdmin):
    list_display = ["worker", "beat_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(WorkspaceScopedAdmin):
    list_display = ["at", "workspace", "actor", "action", "entity_type", "entity_id"]
    list_filter = ["action", "entity_type", "workspace"]
    list_select_related = ["workspace"]
    search_fields = ["entity_id", "actor"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(LLMBudget)
class LLMBudgetAdmin(WorkspaceScopedAdmin):
    """A workspace's daily token budget and what happens past it (core/lib/llm_budget.py)."""

    # A one-to-one field, which workspace_lookup does not take for the tenant key by itself.
    workspace_field = "workspace"
    list_display = ["workspace", "daily_tokens", "policy", "used_today", "updated_at"]
    list_select_related = ["workspace"]
    fields = ["workspace", "daily_tokens", "policy", "used_today"]
    readonly_fields = ["used_today"]

    @admin.display(description="tokens used today (UTC)")
    def used_today(self, obj):
        from core.lib.llm_budget import budget_day, llm_usage_total

        if obj is None or obj.workspace_id is None:
            return "-"
        return llm_usage_total(workspace=obj.workspace, day=budget_day())


@admin.register(LLMUsage)
class LLMUsageAdmin(WorkspaceScopedAdmin):
    """The ledger, filled from the provider's usage fields; read-only."""

    list_display = [
        "day",
        "workspace",
        "purpose",
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "refused",
    ]
    list_filter = ["purpose", "day", "workspace"]
    list_select_related = ["workspace"]
    date_hierarchy = "day"
    readonly_fields = [f.name for f in LLMUsage._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(LLMJob)
class LLMJobAdmin(WorkspaceScopedAdmin):
    """LLM-bound work waiting its workspace's turn (core/lib/fair_queue.py); read-only."""

    list_display = ["id", "workspace", "task", "state", "created_at", "sent_at", "finished_at"]
    list_filter = ["state", "task", "workspace"]
    list_select_related = ["workspace"]
    readonly_fields = [f.name for f in LLMJob._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
