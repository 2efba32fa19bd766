from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
