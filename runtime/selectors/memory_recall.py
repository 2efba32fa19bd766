"""`recall`: the one read an agent's tool call makes across facts, procedures and episodes.

It sits in runtime because it reads three tiers; each tier answers for its own rows
(facts.selectors.fact_recall, procedures.selectors.procedure_search,
episodes.selectors.episode_search).
"""

from dataclasses import dataclass, field

from core.errors import ApplicationError
from episodes.models import EpisodeEmbedding
from episodes.selectors import episode_search
from facts.models import FactEmbedding
from facts.selectors import fact_recall, query_embed
from procedures.models import ProcedureEmbedding
from procedures.selectors import procedure_search
from threads.selectors import MemoryContext

RECALL_MEMORY_TYPE_UNKNOWN = "memory_type must be facts, procedures, episodes or all."

MEMORY_TYPES = ("facts", "procedures", "episodes", "all")


@dataclass
class RecallResult:
    mode: str  # list | key | fuzzy | query
    facts: list = field(default_factory=list)
    procedures: list = field(default_factory=list)
    episodes: list = field(default_factory=list)


def vectors_exist(*, workspace) -> bool:
    """Whether any fact, procedure or episode of the workspace has a vector: embedding the
    query (and loading a local model) is skipped until one does."""
    return (
        FactEmbedding.objects.filter(workspace=workspace).exists()
        or ProcedureEmbedding.objects.filter(workspace=workspace).exists()
        or EpisodeEmbedding.objects.filter(workspace=workspace).exists()
    )


def recall(
    *,
    context: MemoryContext,
    key: str | None = None,
    query: str | None = None,
    memory_type: str = "all",
    limit: int = 10,
    min_confidence: float = 0.5,
    semantic: bool = True,
) -> RecallResult:
    """What an agent remembers in `context`.

    - no key and no query: the facts visible in the context (mode "list");
    - key: the exact lookup (most specific scope first, mode "key"); when there is none,
      fuzzy key matching (mode "fuzzy");
    - query: full-text search over facts, procedures and episodes per `memory_type`, plus
      (with `semantic`) facts, procedures and episodes whose vectors are close to the query's under
      the workspace's embedding provider (mode "query"; a fact found so carries
      `similarity`). A failing provider degrades to full-text search.

    Facts below `min_confidence` (after decay) are left out; results are ordered by
    confidence, then recency.
    """
    if memory_type not in MEMORY_TYPES:
        raise ApplicationError(
            RECALL_MEMORY_TYPE_UNKNOWN, fields={"memory_type": [RECALL_MEMORY_TYPE_UNKNOWN]}
        )
    if key or not query:
        mode, facts = fact_recall(context=context, key=key, limit=limit, min_confidence=min_confidence)
        return RecallResult(mode=mode, facts=facts)

    want = {"facts", "procedures", "episodes"} if memory_type == "all" else {memory_type}
    result = RecallResult(mode="query")
    query_vector, model = (None, "")
    if semantic and vectors_exist(workspace=context.workspace):
        # One embedding of the query serves every tier's vector search.
        query_vector, model = query_embed(workspace=context.workspace, query=query)
    if "facts" in want:
        _, result.facts = fact_recall(
            context=context,
            query=query,
            limit=limit,
            min_confidence=min_confidence,
            query_vector=query_vector,
            model=model,
        )
    if "procedures" in want:
        result.procedures = procedure_search(
            workspace=context.workspace,
            agent=context.agent,
            query=query,
            limit=limit,
            query_vector=query_vector,
            model=model,
        )
    if "episodes" in want:
        result.episodes = episode_search(
            workspace=context.workspace,
            agent=context.agent,
            memory_user=context.memory_user,
            query=query,
            limit=limit,
            query_vector=query_vector,
            model=model,
        )
    return result
