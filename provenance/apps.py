from django.apps import AppConfig


class ProvenanceConfig(AppConfig):
    name = "provenance"
