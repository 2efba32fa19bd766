"""Vectors of facts: the text embedded, the sweep that finds facts without one, and the batch
that embeds them."""

from django.db import transaction

from facts.models import Fact, FactEmbedding
from facts.services.remember import _value_encode


def fact_embedding_text(fact: Fact) -> str:
    value = fact.value if isinstance(fact.value, str) else _value_encode(fact.value)
    return f"{fact.key_normalized}: {value}"


def fact_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of current facts created before `before` with no
    vector at all (core.lib.sweep.sweep_take's order): what a lost or failed task left behind."""
    from django.db.models import Exists, OuterRef

    from core.lib.sweep import sweep_take

    has_vector = FactEmbedding.objects.filter(fact=OuterRef("pk"))
    missing = Fact.objects.filter(valid_to__isnull=True, created_at__lt=before).filter(~Exists(has_vector))
    return sweep_take(missing, limit=limit)


def fact_embed_batch(*, fact_ids, provider=None) -> int:
    """Store vectors for the current facts of `fact_ids` that lack one under their
    workspace's embedding model. Idempotent (existing vectors are skipped; a racing run's
    rows win through the unique constraint); a fact deleted meanwhile is skipped. Returns
    the rows written."""
    from core.embeddings import embedding_provider_for

    facts = list(
        Fact.objects.filter(pk__in=list(fact_ids), valid_to__isnull=True).select_related("workspace")
    )
    by_workspace: dict = {}
    for fact in facts:
        by_workspace.setdefault(fact.workspace_id, []).append(fact)
    written = 0
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].workspace)
        model = group_provider.model_name
        done = set(
            FactEmbedding.objects.filter(fact__in=group, model=model).values_list("fact_id", flat=True)
        )
        todo = [fact for fact in group if fact.pk not in done]
        if not todo:
            continue
        vectors = group_provider.embed([fact_embedding_text(fact) for fact in todo])
        with transaction.atomic():
            # Facts deleted while the vectors were computed are skipped: a vector of one would
            # fail the whole batch at commit (deferred foreign key). The lock keeps the others
            # until their vectors commit; pk order, so two batches never deadlock.
            alive = set(
                Fact.objects.filter(pk__in=[fact.pk for fact in todo])
                .order_by("pk")
                .select_for_update(no_key=True)
                .values_list("pk", flat=True)
            )
            rows = FactEmbedding.objects.bulk_create(
                [
                    FactEmbedding(
                        fact=fact,
                        workspace_id=fact.workspace_id,
                        model=model,
                        dimensions=len(vector),
                        embedding=vector,
                    )
                    for fact, vector in zip(todo, vectors, strict=True)
                    if fact.pk in alive
                ],
                ignore_conflicts=True,
            )
        written += len(rows)
    return written
