"""Registry of the rows each tier holds about a memory user, so identities can merge, erase
and count a person's data without importing the tiers above it.

Each tier declares its rows in its `AppConfig.ready()`. Django runs `ready()` in
INSTALLED_APPS order, which lists the tiers bottom-up, so a holding registered later may
point at one registered earlier (a fact at its thread, a message at its thread): erasure
runs in reverse registration order, before the rows it joins through are gone.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce

from core.access import Principal, scope_to_principal


@dataclass(frozen=True)
class Holding:
    """Rows of `model` that belong to a memory user.

    - `label`: the key of this holding in merge and erase counts ("threads").
    - `owner`: lookups from a row to its memory user; a row matching any of them belongs
      to the user (a session fact through its thread).
    - `moves`: a merge re-points `owner[0]`, a plain foreign key, at the target. False for
      rows that follow their parent (messages move with their thread).
    - `merge`: replaces that re-point, `merge(source=, target=, now=) -> counts`, for rows
      with their own invariants (two current facts with one key).
    - `statistic`: the name of a per-user count annotated on memory-user lists, or "".
    - `agent_field`: the row's agent lookup, so an agent-bound key counts only its rows.
    - `counted`: False for copies of a parent row's owner (a vector's memory_user, which
      the vector search filters on): moved on merge, left out of the counts, and erased by
      their parent's cascade.
    - `locked_first`: erasure locks these rows, in key order, before it deletes anything: the
      parents other writers lock before their children (a thread, which appends and
      compactions lock before its messages), so an erasure waits for them instead of
      deadlocking with them.
    """

    label: str
    model: type
    owner: tuple[str, ...] = ("memory_user",)
    moves: bool = True
    merge: Callable[..., dict] | None = None
    statistic: str = ""
    agent_field: str = "agent"
    counted: bool = True
    locked_first: bool = False

    def rows(self, memory_user_ids):
        """Every row of the users in `memory_user_ids`."""
        owned = Q()
        for lookup in self.owner:
            owned |= Q(**{f"{lookup}__in": memory_user_ids})
        return self.model.objects.filter(owned)


_holdings: dict[str, Holding] = {}


def holding_register(holding: Holding) -> None:
    """Declare `holding`; registering a label again replaces it (ready() may run twice in tests)."""
    _holdings[holding.label] = holding


def holdings() -> list[Holding]:
    """Every registered holding, lowest tier first."""
    return list(_holdings.values())


def holdings_merge(*, source, target, now) -> dict:
    """Move every holding of `source` to `target`; returns the counts per label. Runs in the
    caller's transaction."""
    counts = {}
    for holding in holdings():
        if holding.merge is not None:
            counts.update(holding.merge(source=source, target=target, now=now))
        elif holding.moves:
            field = holding.owner[0]
            moved = holding.model.objects.filter(**{field: source}).update(**{field: target})
            if holding.counted:
                counts[holding.label] = moved
    return counts


def holdings_count(*, memory_user_ids) -> dict:
    """How many rows each holding has of the users in `memory_user_ids`."""
    return {holding.label: holding.rows(memory_user_ids).count() for holding in holdings() if holding.counted}


def holdings_erase(*, memory_user_ids) -> None:
    """Delete every holding of the users in `memory_user_ids`, highest tier first, one
    statement-sized delete per holding rather than leaving the collector to discover each
    cascade."""
    for holding in holdings():
        if holding.locked_first:
            rows = holding.rows(memory_user_ids).order_by("pk")
            list(rows.select_for_update(of=("self",)).values_list("pk"))
    for holding in reversed(holdings()):
        if holding.counted:
            holding.rows(memory_user_ids).delete()


def holdings_statistics(queryset, *, principal: Principal | None = None):
    """Annotate each holding's `statistic` on a memory-user queryset, as correlated
    subqueries (joining several holdings would multiply rows) so list pages stay free of
    N+1. With `principal`, only the rows it may read count (an agent-bound key: its agent's)."""
    annotations = {}
    for holding in holdings():
        if not holding.statistic:
            continue
        rows = holding.model.objects.all()
        if principal is not None:
            rows = scope_to_principal(rows, principal, agent_field=holding.agent_field)
        owner = holding.owner[0]
        per_user = rows.filter(**{owner: OuterRef("pk")}).order_by().values(owner)
        per_user = per_user.annotate(n=Count("pk")).values("n")
        annotations[holding.statistic] = Coalesce(Subquery(per_user, output_field=IntegerField()), Value(0))
    return queryset.annotate(**annotations)
