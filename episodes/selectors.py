"""Reads of episode records (the records of past runs): get, list, full-text and hybrid search."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import BooleanField, FloatField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.filters import filterset_apply
from core.ranking import (
    Corpus,
    RankingWeights,
    hybrid_search,
    mode_weights,
    query_clean,
    query_vector_for,
    queryset_scope_sql,
    recency_term,
)
from episodes.filters import EpisodeFilter
from episodes.models import Episode, EpisodeEmbedding

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
    queryset = episode_scope(principal).select_related("agent", "memory_user", "thread")
    return filterset_apply(EpisodeFilter, filters, queryset)


def episode_search(
    *,
    workspace,
    query: str,
    agent=None,
    memory_user=None,
    limit: int = 10,
    query_vector: list[float] | None = None,
    model: str = "",
) -> list:
    """Episodes whose trigger, input, output, error or feedback match `query` (websearch
    syntax), best rank first, then most recent; then (when a query vector is given) those
    whose vector is at least RECALL_SEMANTIC_MIN_SIMILARITY close to it, closest first,
    each of those with a `similarity` attribute (as procedures.selectors.procedure_search).

    Matching and ranking read `episodes_episode.search_tsv` (episodes migration 0004: a
    stored, weighted tsvector with a GIN index; a column, not a model field)."""
    from django.conf import settings
    from pgvector.django import CosineDistance

    episodes = Episode.objects.filter(workspace=workspace)
    if agent is not None:
        episodes = episodes.filter(agent=agent)
    if memory_user is not None:
        episodes = episodes.filter(memory_user=memory_user)
    tsquery = "websearch_to_tsquery('english'::regconfig, %s)"
    found = list(
        episodes.filter(RawSQL(f'"episodes_episode"."search_tsv" @@ {tsquery}', [query], BooleanField()))
        .annotate(rank=RawSQL(f'ts_rank("episodes_episode"."search_tsv", {tsquery})', [query], FloatField()))
        .select_related("agent", "memory_user", "thread")
        .order_by("-rank", "-started_at")[:limit]
    )
    if query_vector is None or len(found) >= limit:
        return found
    # An exact scan of the scope's vectors (an agent's episodes with one person), as
    # recall's fact and procedure vectors are read; hybrid ranking is episode_search_hybrid.
    close = (
        EpisodeEmbedding.objects.filter(
            workspace=workspace, episode__in=episodes, model=model, dimensions=len(query_vector)
        )
        .exclude(episode__in=[e.pk for e in found])
        .annotate(distance=CosineDistance("embedding", query_vector))
        .filter(distance__lte=1 - settings.RECALL_SEMANTIC_MIN_SIMILARITY)
        .order_by("distance")
        .values_list("episode_id", "distance")[: limit - len(found)]
    )
    distances = dict(close)
    by_id = Episode.objects.select_related("agent", "memory_user", "thread").in_bulk(list(distances))
    for episode_id, distance in sorted(distances.items(), key=lambda item: item[1]):
        episode = by_id[episode_id]
        episode.similarity = round(1 - distance, 4)
        found.append(episode)
    return found


@dataclass
class EpisodeHit:
    episode: Episode
    score: float
    # The parts of the fused score: BM25 of the stored tsvector (0 without a shared term),
    # cosine similarity of the episode's vector (None without one or in lexical mode), and
    # the recency term added to the fused score.
    lexical: float
    vector: float | None
    recency: float


@dataclass
class EpisodeSearchResult:
    hits: list[EpisodeHit]
    plan: str | None
    scope_size: int | None


def episode_search_hybrid(
    *,
    principal: Principal,
    query: str,
    filters: dict | None = None,
    top_k: int = 10,
    mode: str = "hybrid",
    weights: RankingWeights | None = None,
    now: datetime | None = None,
    provider=None,
) -> EpisodeSearchResult:
    """The `top_k` episodes in the principal's scope (narrowed by EpisodeFilter `filters`)
    most related to `query`, best first.

    Ranked as episodic entries are (core.ranking): BM25 over the stored tsvector
    (`search_tsv`, episodes migration 0004), cosine of the episode's vector under the
    workspace's current model, and recency of the run's start. An episode whose vector has
    not landed yet is still found lexically; a failing embedding endpoint degrades the
    search to lexical ranking.
    """
    query = query_clean(query)
    weights = mode_weights(mode, weights, top_k=top_k)
    workspace = principal.workspace
    query_vector, model = query_vector_for(
        workspace=workspace, query=query, weights=weights, provider=provider
    )
    scope = filterset_apply(EpisodeFilter, filters, episode_scope(principal))
    scope_sql, params = queryset_scope_sql(scope)
    params["workspace"] = workspace.pk
    corpus = Corpus(
        rows_model=Episode,
        lexical_scope_sql=(
            "SELECT id, search_tsv AS tsv, started_at AS created_at FROM episodes_episode "
            f"WHERE workspace_id = %(workspace)s AND id IN ({scope_sql})"
        ),
        scope_size_sql=(
            "SELECT count(*) FROM (SELECT 1 FROM episodes_episodeembedding "
            f"WHERE workspace_id = %(workspace)s AND model = %(model)s AND episode_id IN ({scope_sql}) "
            "LIMIT %(count_cap)s) capped"
        ),
        vector_table="episodes_episodeembedding",
        vector_id_column="episode_id",
        vector_scope_where=f"workspace_id = %(workspace)s AND episode_id IN ({scope_sql})",
        graph_scope=(("workspace_id", "workspace"),),
        describe_sql=(
            "SELECT e.id, extract(epoch FROM e.started_at)::float8, NULL, NULL, NULL, NULL, "
            "1 - (v.embedding <=> %(qvec)s::vector), NULL, NULL::text, NULL::uuid "
            "FROM episodes_episode e LEFT JOIN episodes_episodeembedding v "
            "ON v.episode_id = e.id AND v.model = %(model)s WHERE e.id = ANY(%(ids)s)"
        ),
        params=params,
    )
    now = now or timezone.now()
    outcome = hybrid_search(
        corpus=corpus, query=query, query_vector=query_vector, model=model or "", weights=weights, now=now
    )
    top = [(candidate, score) for candidate, score in outcome.ranked if candidate.rankable][:top_k]
    episodes = scope.select_related("agent", "memory_user", "thread").in_bulk([c.id for c, _ in top])
    hits = [
        EpisodeHit(
            episode=episodes[candidate.id],
            score=score,
            lexical=candidate.lexical or 0.0,
            vector=candidate.vector,
            recency=recency_term(candidate.created_at, now=now, weights=weights),
        )
        for candidate, score in top
        if candidate.id in episodes
    ]
    return EpisodeSearchResult(hits=hits, plan=outcome.plan, scope_size=outcome.scope_size)
