"""Writes of episode records: create (open), close, edit, feedback, delete."""

from datetime import datetime

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from core.access import Principal, references_resolve
from core.errors import ApplicationError, ConflictError, NotFoundError
from core.models import AuditEvent
from core.services import audit_record, audit_record_deletes
from episodes.models import Episode
from episodes.services.embeddings import episode_embedding_text, episode_vectors_reset

EPISODE_OUTCOME_UNKNOWN = "outcome must be success or failure."
EPISODE_ALREADY_CLOSED = "This episode is already closed."
EPISODE_ENDS_BEFORE_START = "An episode cannot end before it started."
EPISODE_RATING_RANGE = "rating must be an integer from 1 to 5."
EPISODE_LIST_EXPECTED = "Must be a list."
EPISODE_THREAD_OTHER_AGENT = "The thread belongs to another agent."
EPISODE_REFERENCE_WORKSPACE = "The referenced object belongs to another workspace."
EPISODES_NOT_FOUND = "Some of these episodes do not exist."
EPISODE_OUTCOME_OPEN = "An open episode gets its outcome when it is closed."
EPISODE_END_NEEDS_OUTCOME = "ended_at is given with the outcome; an open episode has no end yet."

# episode_close's "not given": final_output may be closed to null on purpose.
KEEP = object()


def _invalid(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def _duration_ms(started_at: datetime, ended_at: datetime) -> int:
    if ended_at < started_at:
        raise _invalid("ended_at", EPISODE_ENDS_BEFORE_START)
    return int((ended_at - started_at).total_seconds() * 1000)


def episode_create(
    *,
    workspace,
    agent,
    memory_user=None,
    thread=None,
    trigger_type: str = "",
    trigger_payload: dict | None = None,
    input=None,
    messages: list | None = None,
    actions: list | None = None,
    started_at: datetime | None = None,
    outcome: str = "",
    final_output=None,
    error: str = "",
    ended_at: datetime | None = None,
    actor: str = "system",
) -> Episode:
    """Open an episode; with `outcome` it is recorded already closed. A thread implies its
    memory user when none is given."""
    for name, obj in (("agent", agent), ("memory_user", memory_user), ("thread", thread)):
        if obj is not None and obj.workspace_id != workspace.pk:
            raise NotFoundError(EPISODE_REFERENCE_WORKSPACE, fields={name: [EPISODE_REFERENCE_WORKSPACE]})
    if thread is not None and thread.agent_id != agent.pk:
        raise _invalid("thread", EPISODE_THREAD_OTHER_AGENT)
    if memory_user is None and thread is not None:
        memory_user = thread.memory_user
    if memory_user is not None:
        from identities.selectors import memory_user_resolve_merged

        memory_user = memory_user_resolve_merged(memory_user=memory_user)
    for name, value in (("messages", messages), ("actions", actions)):
        if value is not None and not isinstance(value, list):
            raise _invalid(name, EPISODE_LIST_EXPECTED)
    if outcome and outcome not in Episode.Outcome.values:
        raise _invalid("outcome", EPISODE_OUTCOME_UNKNOWN)
    if ended_at is not None and not outcome:
        # Dropping it would record an open episode the caller believes closed.
        raise _invalid("ended_at", EPISODE_END_NEEDS_OUTCOME)
    started_at = started_at or timezone.now()
    episode = Episode(
        workspace=workspace,
        agent=agent,
        memory_user=memory_user,
        thread=thread,
        trigger_type=trigger_type or "",
        trigger_payload=trigger_payload or {},
        input=input if input is not None else {},
        messages=messages or [],
        actions=actions or [],
        started_at=started_at,
        outcome=outcome or "",
        final_output=final_output,
        error=error or "",
    )
    if outcome:
        episode.ended_at = ended_at or timezone.now()
        episode.duration_ms = _duration_ms(started_at, episode.ended_at)
    episode.full_clean(validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        episode.save()
        # Its vector is computed once the record commits (episodes.services.embeddings).
        from episodes.tasks import episode_embed_task

        episode_embed_task.delay_on_commit([str(episode.pk)])
        audit_record(
            workspace=workspace,
            actor=actor,
            action=AuditEvent.Action.CREATE,
            entity_type="episode",
            entity_id=episode.pk,
            changes={"agent": agent.slug, "trigger_type": episode.trigger_type, "outcome": episode.outcome},
        )
    return episode


def episode_close(
    *,
    episode: Episode,
    outcome: str,
    final_output=KEEP,
    error: str | None = None,
    actions: list | None = None,
    ended_at: datetime | None = None,
    actor: str = "system",
) -> Episode:
    """Record how the run ended. `actions` are appended to the ones already recorded; the
    final output and error recorded while the run was open are kept unless given here.
    Closing twice is a 409 (compare-and-set on ended_at IS NULL)."""
    if outcome not in Episode.Outcome.values:
        raise _invalid("outcome", EPISODE_OUTCOME_UNKNOWN)
    if actions is not None and not isinstance(actions, list):
        raise _invalid("actions", EPISODE_LIST_EXPECTED)
    ended_at = ended_at or timezone.now()
    duration = _duration_ms(episode.started_at, ended_at)
    with transaction.atomic():
        locked = Episode.objects.select_for_update().get(pk=episode.pk)
        if locked.ended_at is not None:
            raise ConflictError(EPISODE_ALREADY_CLOSED)
        before_text = episode_embedding_text(locked)
        locked.outcome = outcome
        if final_output is not KEEP:
            locked.final_output = final_output
        if error is not None:
            locked.error = error
        locked.actions = [*locked.actions, *(actions or [])]
        locked.ended_at = ended_at
        locked.duration_ms = duration
        locked.save()
        episode_vectors_reset(episode=locked, before_text=before_text)
        audit_record(
            workspace=locked.workspace,
            actor=actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="episode",
            entity_id=locked.pk,
            changes={"outcome": outcome, "duration_ms": duration},
        )
    return locked


def episode_feedback(
    *, episode: Episode, rating: int | None, comment: str = "", actor: str = "system"
) -> Episode:
    """Store a human rating (1-5) and comment; giving feedback again replaces it."""
    if rating is not None and (
        isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 5
    ):
        raise _invalid("rating", EPISODE_RATING_RANGE)
    with transaction.atomic():
        before_text = episode_embedding_text(episode)
        episode.rating = rating
        episode.feedback_comment = comment or ""
        episode.save(update_fields=["rating", "feedback_comment", "updated_at"])
        episode_vectors_reset(episode=episode, before_text=before_text)
        audit_record(
            workspace=episode.workspace,
            actor=actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="episode",
            entity_id=episode.pk,
            changes={"rating": rating, "feedback_comment": episode.feedback_comment},
        )
    return episode


EPISODE_EDITABLE = (
    "trigger_type",
    "trigger_payload",
    "input",
    "messages",
    "actions",
    "final_output",
    "error",
    "outcome",
)


def episode_update(*, episode: Episode, actor: str, **fields) -> Episode:
    """Edit the recorded content of an episode, not its timing. The outcome of a closed
    episode may be corrected (an open one gets it from episode_close); procedure statistics
    already learned from the old outcome are not recounted."""
    unknown = set(fields) - set(EPISODE_EDITABLE)
    if unknown:
        raise ApplicationError(
            "Unknown field.", fields={name: ["Unknown field."] for name in sorted(unknown)}
        )
    for name in ("messages", "actions"):
        if name in fields and not isinstance(fields[name], list):
            raise _invalid(name, EPISODE_LIST_EXPECTED)
    if "outcome" in fields and fields["outcome"] != episode.outcome:
        if episode.ended_at is None:
            raise _invalid("outcome", EPISODE_OUTCOME_OPEN)
        if fields["outcome"] not in Episode.Outcome.values:
            raise _invalid("outcome", EPISODE_OUTCOME_UNKNOWN)
    changed = [name for name, value in fields.items() if getattr(episode, name) != value]
    if not changed:
        return episode
    before_text = episode_embedding_text(episode)
    for name in changed:
        setattr(episode, name, fields[name] if fields[name] is not None or name == "final_output" else "")
    episode.full_clean(validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        episode.save(update_fields=[*changed, "updated_at"])
        episode_vectors_reset(episode=episode, before_text=before_text)
        audit_record(
            workspace=episode.workspace,
            actor=actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="episode",
            entity_id=episode.pk,
            changes={"fields": changed},
        )
    return episode


def _episodes_delete(*, workspace, ids: list, actor: str) -> dict:
    # The episodes first, in key order, before the delete clears the facts citing them: a fact
    # write holds the episode it cites before it locks its key's versions (facts'
    # _sources_held), and a delete that took those versions first waited for it in a cycle.
    list(Episode.objects.filter(pk__in=ids).order_by("pk").select_for_update().values_list("pk"))
    # Facts learned from an episode keep their value; only the link goes (SET NULL). Counted
    # through the reverse relation: episodes sit below facts and do not import them.
    unlinked = Episode.objects.filter(pk__in=ids).aggregate(n=Count("learned_facts"))["n"]
    deleted, _ = Episode.objects.filter(pk__in=ids).delete()
    audit_record_deletes(workspace=workspace, actor=actor, entity_type="episode", ids=ids)
    return {"episodes": deleted, "facts_unlinked": unlinked}


def episode_delete(*, episode: Episode, actor: str) -> dict:
    with transaction.atomic():
        return _episodes_delete(workspace=episode.workspace, ids=[episode.pk], actor=actor)


def episode_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Delete every episode in `ids`, or nothing: an id the principal cannot see is a 404."""
    with transaction.atomic():
        found = references_resolve(
            Episode.objects.only("pk"),
            principal,
            ids,
            not_found=NotFoundError(EPISODES_NOT_FOUND, fields={"ids": ["Unknown id."]}),
        )
        return _episodes_delete(
            workspace=principal.workspace, ids=[e.pk for e in found], actor=actor or principal.actor
        )
