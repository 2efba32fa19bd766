from django.apps import AppConfig


class IdentitiesConfig(AppConfig):
    name = "identities"
