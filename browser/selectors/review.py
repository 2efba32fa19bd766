"""Reads of the /memories Review tab: one page of the queue with its counts, the tab's count,
and the held items a batch names (with the merge each would take)."""

from django.core.exceptions import ValidationError

from core.access import Principal
from core.errors import NotFoundError
from core.lib.replica import read_connection
from core.models import Agent
from episodic.models import EpisodicEntry
from review.selectors import (
    STATE_HELD,
    STATES,
    TIERS,
    ReviewItem,
    review_counts,
    review_item_get,
    review_list,
    review_similar_attach,
)

# One screen of decisions; the queue is emptied from the top, so no deeper pages are offered
# than "more waiting" (the counts say how many).
REVIEW_PAGE_SIZE = 50

# Held rows of a workspace, in one round trip over the two partial indexes (episodes_entry_review,
# facts_review) and the learned procedures (a few per agent). Read on every /memories page for
# the tab's label: ~0.3 ms with 10,000 held entries, since only held rows are in those indexes.
_TAB_COUNT_SQL = """
SELECT (SELECT count(*) FROM episodes_episodicentry WHERE workspace_id = %(ws)s AND review = 'held')
     + (SELECT count(*) FROM facts_fact WHERE workspace_id = %(ws)s AND review = 'held')
     + (SELECT count(*) FROM procedures_procedure p
        WHERE p.workspace_id = %(ws)s AND p.origin = 'self_learned' AND NOT p.is_active
          AND NOT EXISTS (
            SELECT 1 FROM core_auditevent a
            WHERE a.workspace_id = p.workspace_id AND a.entity_type = 'procedure'
              AND a.entity_id = p.id::text AND a.changes->>'review' IN ('approved', 'rejected')))
"""


def review_tab_count(workspace_id) -> int:
    """Held items of the workspace (every agent): the number on the Review tab."""
    with read_connection(EpisodicEntry).cursor() as cursor:
        cursor.execute(_TAB_COUNT_SQL, {"ws": workspace_id})
        return int(cursor.fetchone()[0])


def review_filters_clean(params) -> dict:
    """The page's filters from a query string; an unknown value reads as unset, as a link would."""
    tier = params.get("tier") if params.get("tier") in TIERS else None
    state = params.get("state") if params.get("state") in STATES else STATE_HELD
    return {"tier": tier, "state": state, "agent": (params.get("agent") or "").strip()[:100]}


def review_page(*, principal: Principal, params) -> dict:
    filters = review_filters_clean(params)
    agents = list(Agent.objects.filter(workspace=principal.workspace).order_by("slug").only("pk", "slug"))
    agent = next((a for a in agents if a.slug == filters["agent"]), None)
    if filters["agent"] and agent is None:
        items, counts = [], {"entry": 0, "fact": 0, "procedure": 0, "total": 0}
    else:
        items = review_list(
            principal=principal,
            tier=filters["tier"],
            state=filters["state"],
            agent=agent,
            limit=REVIEW_PAGE_SIZE,
        )
        counts = review_counts(principal=principal, agent=agent)
    shown = counts[filters["tier"]] if filters["tier"] else counts["total"]
    return {
        "items": items,
        "counts": counts,
        "filters": filters,
        "agents": agents,
        "more": filters["state"] == STATE_HELD and shown > len(items),
    }


def review_items_named(*, principal: Principal, keys: list[str]) -> tuple[list[ReviewItem], list[str]]:
    """The held items named `<tier>:<id>` (with their merge suggestions) and the keys that name
    nothing the principal can decide."""
    found, missing = [], []
    for key in keys:
        tier, _, item_id = key.partition(":")
        try:
            found.append(review_item_get(principal=principal, tier=tier, item_id=item_id, state=STATE_HELD))
        except (NotFoundError, ValidationError, ValueError):  # Missing, out of scope or malformed.
            missing.append(key)
    review_similar_attach(found)
    return found, missing
