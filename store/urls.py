from django.urls import path

from store import apis

app_name = "store"

urlpatterns = [
    path("store/item/", apis.StoreItemApi.as_view(), name="item"),
    path("store/items/", apis.StoreItemListApi.as_view(), name="list"),
    path("store/items/batch-delete/", apis.StoreItemBatchDeleteApi.as_view(), name="batch-delete"),
    path("store/search/", apis.StoreSearchApi.as_view(), name="search"),
    path("store/namespaces/", apis.StoreNamespacesApi.as_view(), name="namespaces"),
    path("store/batch/", apis.StoreBatchApi.as_view(), name="batch"),
]
