"""Which rows of a batch selection are still there: the read before a tab's batch delete."""

from core.access import Principal, scope_to_principal


def batch_rows_present(
    *, model, principal: Principal, ids, agent_field: str | None = "agent", shared: bool = False
) -> set:
    """The ids among `ids` of rows of `model` the principal may read now, scoped as a read
    (core.access.scope_to_principal): a row of another workspace is as absent as one deleted
    or one that never existed, so what the caller does with the rest reveals nothing."""
    if not ids:
        return set()
    queryset = model.objects.filter(pk__in=list(ids))
    scoped = scope_to_principal(queryset, principal, agent_field=agent_field, shared=shared)
    return set(scoped.order_by().values_list("pk", flat=True))
