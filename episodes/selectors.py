"""Reads of episode records (the records of past runs; episodic entries live in entry_*.py)."""

from django.db.models import BooleanField, FloatField
from django.db.models.expressions import RawSQL

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from episodes.filters import EpisodeFilter
from episodes.models import Episode

EPISODE_NOT_FOUND = "Episode not found."


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
    from core.filters import filterset_apply

    queryset = episode_scope(principal).select_related("agent", "memory_user", "thread")
    return filterset_apply(EpisodeFilter, filters, queryset)


def episode_search(*, workspace, query: str, agent=None, memory_user=None, limit: int = 10) -> list:
    """Episodes whose trigger, input, output, error or feedback match `query` (websearch
    syntax), best rank first, then most recent.

    Matching and ranking read `episodes_episode.search_tsv` (episodes migration 0004: a
    stored, weighted tsvector with a GIN index; a column, not a model field)."""
    episodes = Episode.objects.filter(workspace=workspace)
    if agent is not None:
        episodes = episodes.filter(agent=agent)
    if memory_user is not None:
        episodes = episodes.filter(memory_user=memory_user)
    tsquery = "websearch_to_tsquery('english'::regconfig, %s)"
    return list(
        episodes.filter(RawSQL(f'"episodes_episode"."search_tsv" @@ {tsquery}', [query], BooleanField()))
        .annotate(rank=RawSQL(f'ts_rank("episodes_episode"."search_tsv", {tsquery})', [query], FloatField()))
        .select_related("agent", "memory_user", "thread")
        .order_by("-rank", "-started_at")[:limit]
    )
