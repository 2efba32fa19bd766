from django.apps import AppConfig


class FactsConfig(AppConfig):
    name = "facts"
