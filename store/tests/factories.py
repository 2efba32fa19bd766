from store.services import store_item_put


def make_item(*, workspace, agent=None, namespace=("memories", "ada"), key="k1", value=None, **kwargs):
    item, _created = store_item_put(
        workspace=workspace,
        agent=agent,
        namespace=namespace,
        key=key,
        value=value if value is not None else {"text": "Ada lives in Lisbon."},
        **kwargs,
    )
    return item
