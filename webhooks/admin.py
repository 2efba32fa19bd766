from django.contrib import admin

from core.lib.admin import WorkspaceScopedAdmin, admin_principal, audit_history_html
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import webhook_subscription_delete, webhook_subscription_update


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(WorkspaceScopedAdmin):
    """Read-mostly: subscriptions are created in /memories or the API, which show the secret
    once and check the URL; here an admin pauses or resumes one (is_active)."""

    list_display = ["url", "workspace", "is_active", "consecutive_failures", "last_delivery_at", "created_at"]
    list_filter = ["is_active", "workspace"]
    list_select_related = ["workspace"]
    search_fields = ["url", "description"]
    fields = [
        "workspace",
        "url",
        "description",
        "events",
        "is_active",
        "disabled_reason",
        "disabled_at",
        "consecutive_failures",
        "last_delivery_at",
        "created_at",
        "audit_history",
    ]
    readonly_fields = [
        "workspace",
        "url",
        "description",
        "events",
        "disabled_reason",
        "disabled_at",
        "consecutive_failures",
        "last_delivery_at",
        "created_at",
        "audit_history",
    ]

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="webhook_subscription", obj=obj)

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        if "is_active" in form.changed_data:
            webhook_subscription_update(
                principal=admin_principal(request, obj.workspace), subscription=obj, is_active=obj.is_active
            )

    def delete_model(self, request, obj):
        webhook_subscription_delete(principal=admin_principal(request, obj.workspace), subscription=obj)

    def delete_queryset(self, request, queryset):
        for subscription in queryset.select_related("workspace"):
            self.delete_model(request, subscription)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(WorkspaceScopedAdmin):
    workspace_field = "subscription__workspace"
    list_display = ["event_type", "subscription", "status", "attempts", "response_status", "created_at"]
    list_filter = ["status", "event_type"]
    list_select_related = ["subscription"]
    search_fields = ["event_id"]
    readonly_fields = [
        "subscription",
        "audit_event_id",
        "event_id",
        "event_type",
        "payload",
        "status",
        "attempts",
        "response_status",
        "last_error",
        "next_attempt_at",
        "last_attempt_at",
        "delivered_at",
        "created_at",
    ]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
