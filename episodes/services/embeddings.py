"""Episode vectors: the text embedded, batches that store them against concurrent edits, the sweep."""

import json

from django.db import transaction
from django.db.models import Exists, OuterRef

from core.embeddings import embedding_provider_for
from core.lib.sweep import sweep_take
from episodes.models import Episode, EpisodeEmbedding

# Characters kept of each part of the rendered text. The local model reads 256 tokens
# (~1,000 characters) in all, so longer parts would only crowd out the ones after them.
EMBED_PART_MAX = 600
# The columns the rendered text is made of: a change to one of them re-embeds the episode.
EMBEDDED_FIELDS = (
    "trigger_type",
    "trigger_payload",
    "input",
    "outcome",
    "final_output",
    "error",
    "feedback_comment",
)


def _flat(value) -> str:
    # JSON read as prose: braces and quotes cost the model meaning. The local model rated
    # "refund request" 0.26 against {"goal": "...money back for a broken kettle"} and 0.37
    # against "goal: ...money back for a broken kettle".
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "; ".join(
            f"{key}: {_flat(item)}" for key, item in value.items() if item not in (None, "", {}, [])
        )
    if isinstance(value, list):
        return "; ".join(_flat(item) for item in value if item not in (None, "", {}, []))
    return json.dumps(value, ensure_ascii=False)


def _part(value) -> str:
    if value in (None, "", {}, []):
        return ""
    return " ".join(_flat(value).split())[:EMBED_PART_MAX]


def episode_embedding_text(episode: Episode) -> str:
    """A compact rendering of what the run was about and how it went, one line per part
    present: the trigger (type, then payload), the input, then labelled outcome, output,
    error and feedback comment. JSON is flattened to `key: value` pairs."""
    payload = _part(episode.trigger_payload)
    trigger = " ".join(p for p in (_part(episode.trigger_type), f"({payload})" if payload else "") if p)
    parts = (
        ("", trigger),
        ("", _part(episode.input)),
        ("outcome: ", _part(episode.outcome)),
        ("output: ", _part(episode.final_output)),
        ("error: ", _part(episode.error)),
        ("feedback: ", _part(episode.feedback_comment)),
    )
    return "\n".join(f"{label}{text}" for label, text in parts if text)


def episode_vectors_reset(*, episode: Episode, before_text: str) -> bool:
    """After a write of `episode` (inside its transaction): when its rendered text changed
    from `before_text`, drop its vectors and queue a new one once the write commits."""
    if episode_embedding_text(episode) == before_text:
        return False
    from episodes.tasks import episode_embed_task

    EpisodeEmbedding.objects.filter(episode=episode).delete()
    episode_embed_task.delay_on_commit([str(episode.pk)])
    return True


def episode_embed_batch(*, episode_ids, provider=None) -> int:
    """Store vectors for the episodes of `episode_ids` that lack one under their workspace's
    current model. Idempotent: episodes already embedded are skipped, and a concurrent run's
    rows win through the unique (episode, model) constraint. Returns the rows written."""
    episodes = list(Episode.objects.filter(pk__in=list(episode_ids)).select_related("workspace"))
    by_workspace: dict = {}
    for episode in episodes:
        by_workspace.setdefault(episode.workspace_id, []).append(episode)
    written = 0
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].workspace)
        model = group_provider.model_name
        done = set(
            EpisodeEmbedding.objects.filter(episode__in=group, model=model).values_list(
                "episode_id", flat=True
            )
        )
        todo = [episode for episode in group if episode.pk not in done]
        if not todo:
            continue
        texts = [episode_embedding_text(episode) for episode in todo]
        vectors = group_provider.embed(texts)
        written += _episode_vectors_store(episodes=todo, texts=texts, vectors=vectors, model=model)
    return written


def _episode_vectors_store(*, episodes, texts, vectors, model: str) -> int:
    """Store the vectors of episodes still rendering to the text they were computed from.

    An episode deleted while its vector was computed is skipped (its vector would fail the
    batch at commit through the deferred foreign key), and so is one edited meanwhile: the
    edit dropped its vectors and queued its own embedding.
    """
    with transaction.atomic():
        # Locked until the vectors commit, in pk order so that two batches never deadlock.
        current = {
            episode.pk: episode_embedding_text(episode)
            for episode in Episode.objects.filter(pk__in=[e.pk for e in episodes])
            .order_by("pk")
            .select_for_update(no_key=True)
            .only("pk", *EMBEDDED_FIELDS)
        }
        rows = [
            EpisodeEmbedding(
                episode=episode,
                workspace_id=episode.workspace_id,
                model=model,
                dimensions=len(vector),
                embedding=vector,
            )
            for episode, text, vector in zip(episodes, texts, vectors, strict=True)
            if current.get(episode.pk) == text
        ]
        EpisodeEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def episode_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of episodes created before `before` with no vector at
    all (core.lib.sweep.sweep_take's order): what a lost or failed task left behind, and
    every episode recorded before episodes had vectors."""
    has_vector = EpisodeEmbedding.objects.filter(episode=OuterRef("pk"))
    missing = Episode.objects.filter(created_at__lt=before).filter(~Exists(has_vector))
    return sweep_take(missing, limit=limit)


def episodes_reembed(*, workspace, batch_size: int = 256) -> int:
    """Enqueue embedding of every episode of `workspace` lacking a vector under its current
    model (after a model change). Old vectors keep serving until the new ones land."""
    from episodes.tasks import episode_embed_task

    model = embedding_provider_for(workspace).model_name
    missing = EpisodeEmbedding.objects.filter(episode=OuterRef("pk"), model=model)
    ids = list(
        Episode.objects.filter(workspace=workspace).filter(~Exists(missing)).values_list("pk", flat=True)
    )
    for start in range(0, len(ids), batch_size):
        chunk = [str(i) for i in ids[start : start + batch_size]]
        episode_embed_task.delay_on_commit(chunk)
    return len(ids)
