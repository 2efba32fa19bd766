from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"

    def ready(self):
        from core.events import audit_listener_register
        from webhooks.services import webhooks_audit_listener

        audit_listener_register("webhooks", webhooks_audit_listener)
