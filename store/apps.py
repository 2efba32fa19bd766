"""The store app (LangGraph's long-term store); it declares a memory user's items to core.holdings."""

from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "store"
    verbose_name = "Store"

    def ready(self):
        from core.holdings import Holding, holding_register
        from store.models import StoreItem

        holding_register(Holding("store_items", StoreItem))
