"""Reads of episode records (the records of past runs; episodic entries live in entry_*.py)."""

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import TextField
from django.db.models.functions import Cast

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from episodes.filters import EpisodeFilter
from episodes.models import Episode

EPISODE_NOT_FOUND = "Episode not found."
# Full-text search over episodes runs without an index (see docs/global-memory.md), so it
# ranks only the most recent episodes in scope: 5,000 rows ~ 30 ms on the dev box.
EPISODE_SEARCH_WINDOW = 5000


def episode_scope(principal: Principal):
    return scope_to_principal(Episode.objects.all(), principal)


def episode_get(*, principal: Principal, episode_id) -> Episode:
    episode = (
        episode_scope(principal)
        .select_related("agent", "memory_user", "thread")
        .filter(pk=episode_id)
        .first()
    )
    if episode is None:
        raise NotFoundError(EPISODE_NOT_FOUND)
    return episode


def episode_list(*, principal: Principal, filters=None):
    from facts.filters import filterset_apply

    queryset = episode_scope(principal).select_related("agent", "memory_user", "thread")
    return filterset_apply(EpisodeFilter, filters, queryset)


def episode_search(*, workspace, query: str, agent=None, memory_user=None, limit: int = 10) -> list:
    """Episodes whose trigger, input, output, error or feedback match `query` (websearch
    syntax), best rank first, among the most recent EPISODE_SEARCH_WINDOW in scope."""
    recent = Episode.objects.filter(workspace=workspace)
    if agent is not None:
        recent = recent.filter(agent=agent)
    if memory_user is not None:
        recent = recent.filter(memory_user=memory_user)
    window = recent.order_by("-started_at").values("pk")[:EPISODE_SEARCH_WINDOW]
    vector = (
        SearchVector("trigger_type", weight="A", config="english")
        + SearchVector(Cast("input", TextField()), weight="B", config="english")
        + SearchVector(Cast("final_output", TextField()), weight="B", config="english")
        + SearchVector("error", weight="B", config="english")
        + SearchVector("feedback_comment", weight="C", config="english")
    )
    search = SearchQuery(query, search_type="websearch", config="english")
    return list(
        Episode.objects.filter(pk__in=window)
        .annotate(rank=SearchRank(vector, search))
        .filter(rank__gt=0)
        .select_related("agent", "memory_user", "thread")
        .order_by("-rank", "-started_at")[:limit]
    )
