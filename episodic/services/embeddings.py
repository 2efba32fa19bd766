"""Entry vectors: embedding batches, storing them against concurrent edits, re-embedding, the sweep."""

from django.db import transaction
from django.db.models import Exists, OuterRef

from core.embeddings import embedding_provider_for
from core.lib.sweep import embed_skipped_requeue, sweep_take
from episodic.models import EntryEmbedding, EpisodicEntry
from identities.services import memory_users_hold


def entry_embedding_text(entry: EpisodicEntry) -> str:
    return entry.content


def entry_embed_batch(*, entry_ids, provider=None, attempt: int = 0) -> int:
    """Store vectors for the entries of `entry_ids` that lack one under the current model.

    Idempotent: entries already embedded with the model are skipped, and a concurrent
    run's rows win through the unique (entry, model) constraint. Returns rows written.

    Entries another transaction held are queued again after commit (`entry_embed_task`,
    `attempt` + 1, at most core.lib.sweep.EMBED_SKIPPED_ATTEMPTS) when the workspace's own provider is
    used: the sweep misses an entry that keeps a vector of the previous model.
    """
    entries = list(EpisodicEntry.objects.filter(pk__in=list(entry_ids)).select_related("workspace"))
    written, held = 0, []
    by_workspace: dict = {}
    for entry in entries:
        by_workspace.setdefault(entry.workspace_id, []).append(entry)
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].workspace)
        model = group_provider.model_name
        done = set(
            EntryEmbedding.objects.filter(entry__in=group, model=model).values_list("entry_id", flat=True)
        )
        todo = [e for e in group if e.pk not in done]
        if not todo:
            continue
        vectors = group_provider.embed([entry_embedding_text(e) for e in todo])
        stored, skipped = _entry_vectors_store(entries=todo, vectors=vectors, model=model)
        written += stored
        held.extend(skipped)
    if provider is None:
        # Once every group is stored: a group whose model fails raises before this, and the
        # task's retry runs the whole batch again, so no chain of retries is started twice.
        from episodic.tasks import entry_embed_task

        embed_skipped_requeue(entry_embed_task, ids=held, attempt=attempt)
    return written


def _entry_vectors_store(*, entries, vectors, model: str) -> tuple[int, list]:
    """Store the vectors of entries still holding the text they were computed from; returns
    (rows written, ids of the entries skipped because gone or held).

    An entry deleted while its vector was computed is skipped, and so is one whose content
    was edited meanwhile (the edit dropped its vectors and queued its own embedding) or that
    another transaction holds now: a deletion, an edit, a second batch.
    """
    ids = [e.pk for e in entries]
    with transaction.atomic():
        # The vector copies its entry's person, which a merge re-points: the people are held
        # first, so the person read below is the one a merge leaves the entry with, and a
        # merge after this one moves these vectors too.
        memory_users_hold(
            ids=set(EpisodicEntry.objects.filter(pk__in=ids).values_list("memory_user_id", flat=True))
        )
        # One statement in pk order, SKIP LOCKED: this batch never waits for an entry, so
        # nothing that holds entries and then waits for one of these can close a cycle with
        # it (a deletion unlinks the entries merged or superseded into the ones it deletes,
        # then deletes them: retention's batch, an entry or batch delete, an erasure). Skipped
        # entries are held by any write (a deletion, an edit, which queues its own embedding,
        # a confirmation, a review decision) and queued again by the caller: the sweep
        # (entry_embed_sweep) sees only entries with no vector at all, not one that keeps a
        # vector of the previous model during a re-embed. The lock keeps the others until
        # their vectors commit.
        current = {
            pk: (content, person)
            for pk, content, person in EpisodicEntry.objects.filter(pk__in=ids)
            .order_by("pk")
            .select_for_update(no_key=True, skip_locked=True)
            .values_list("pk", "content", "memory_user_id")
        }
        rows = []
        for entry, vector in zip(entries, vectors, strict=True):
            if entry.pk in current and current[entry.pk][0] == entry_embedding_text(entry):
                entry.memory_user_id = current[entry.pk][1]
                rows.append(EntryEmbedding.of(entry, vector, model=model))
        EntryEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
        EpisodicEntry.objects.filter(pk__in=[row.entry_id for row in rows]).update(embedding_model=model)
    # The caller's objects then answer `embedded` as the rows do (the extract response).
    stored = {row.entry_id for row in rows}
    for entry in entries:
        if entry.pk in stored:
            entry.embedding_model = model
    return len(rows), [pk for pk in ids if pk not in current]


def entries_reembed(*, workspace=None, batch_size: int = 256) -> int:
    """Enqueue embedding of every entry lacking a vector under its workspace's current model.

    Old vectors stay (and keep serving searches) until the new ones land; returns the
    number of entries enqueued.
    """
    from core.models import Workspace
    from episodic.tasks import entry_embed_task

    workspaces = [workspace] if workspace is not None else list(Workspace.objects.all())
    enqueued = 0
    for ws in workspaces:
        model = embedding_provider_for(ws).model_name
        missing = EntryEmbedding.objects.filter(entry=OuterRef("pk"), model=model)
        ids = list(
            EpisodicEntry.objects.filter(workspace=ws, status=EpisodicEntry.Status.ACTIVE)
            .filter(~Exists(missing))
            .values_list("pk", flat=True)
        )
        for start in range(0, len(ids), batch_size):
            chunk = [str(i) for i in ids[start : start + batch_size]]
            entry_embed_task.delay_on_commit(chunk)
        enqueued += len(ids)
    return enqueued


def entry_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of active entries created before `before` with no
    vector at all (core.lib.sweep.sweep_take's order): what a lost or failed task left behind."""
    has_vector = EntryEmbedding.objects.filter(entry=OuterRef("pk"))
    missing = EpisodicEntry.objects.filter(status=EpisodicEntry.Status.ACTIVE, created_at__lt=before).filter(
        ~Exists(has_vector)
    )
    return sweep_take(missing, limit=limit)
