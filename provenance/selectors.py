"""Why the agent believes something: the evidence of an entry, fact, episode or procedure.

Each answer holds the quoted evidence, the source messages in their thread, how the item was
made (the extraction origin and the creating event of the audit trail), its later
confirmations and contradictions (replaced and replacing versions, successful and failed
runs), and every change in the audit trail. Every row read goes through the principal's
scope: a source thread of another agent is left out, as if it did not exist.
"""

import uuid

from django.db.models import Exists, OuterRef, Q

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError
from core.models import AuditEvent
from episodes.models import Episode
from episodes.selectors import episode_get
from episodic.models import EpisodicEntry
from episodic.selectors import entry_get
from facts.models import Fact
from facts.selectors import fact_get
from procedures.models import Procedure, ProcedureRun
from procedures.selectors import procedure_get
from threads.models import Message, Thread

TIERS = ("entry", "fact", "episode", "procedure")
TIER_UNKNOWN = "tier must be entry, fact, episode or procedure."
# The audit trail and the source messages shown at most; an item with more says so.
AUDIT_SHOWN = 100
MESSAGES_SHOWN = 20
RELATED_SHOWN = 20


def _audit(*, workspace, entity_type: str, entity_id) -> dict:
    events = AuditEvent.objects.filter(workspace=workspace, entity_type=entity_type, entity_id=str(entity_id))
    rows = list(events.order_by("at", "id")[: AUDIT_SHOWN + 1])
    return {
        "events": [
            {"at": e.at, "actor": e.actor, "action": e.action, "changes": e.changes}
            for e in rows[:AUDIT_SHOWN]
        ],
        "truncated": len(rows) > AUDIT_SHOWN,
    }


def _thread_visible(*, principal: Principal, thread_id) -> Thread | None:
    if thread_id is None:
        return None
    return (
        scope_to_principal(Thread.objects.all(), principal).filter(pk=thread_id).only("id", "title").first()
    )


def _message_ids(ids) -> list[uuid.UUID]:
    """The ids of stored messages among `ids`: an entry extracted from a transcript the client
    sent names its turns with the client's own ids, which no stored message has."""
    valid = []
    for pk in ids:
        try:
            valid.append(uuid.UUID(str(pk)))
        except ValueError:
            continue
    return valid


def _messages(*, thread: Thread | None, ids) -> list[dict]:
    ids = _message_ids(ids or [])
    if thread is None or not ids:
        return []
    rows = Message.objects.filter(thread=thread, pk__in=ids[:MESSAGES_SHOWN]).order_by("seq")
    return [
        {
            "id": m.pk,
            "role": m.role,
            "content": m.content,
            "node_id": m.node_id,
            "created_at": m.created_at,
        }
        for m in rows.only("id", "role", "content", "node_id", "created_at", "seq")
    ]


def _source(*, principal: Principal, thread_id, message_ids) -> dict:
    thread = _thread_visible(principal=principal, thread_id=thread_id)
    return {
        "thread": {"id": thread.pk, "title": thread.title} if thread else None,
        "messages": _messages(thread=thread, ids=message_ids),
    }


def _created(audit: dict) -> dict | None:
    return next((e for e in audit["events"] if e["action"] == AuditEvent.Action.CREATE), None)


def _entry_evidence(principal: Principal, item_id) -> dict:
    entry = entry_get(principal=principal, entry_id=item_id)
    audit = _audit(workspace=principal.workspace, entity_type="episodic_entry", entity_id=entry.pk)
    replaced = EpisodicEntry.objects.filter(superseded_by=entry).order_by("valid_from")[:RELATED_SHOWN]
    later = entry.superseded_by if entry.superseded_by_id else None
    return {
        "tier": "entry",
        "id": entry.pk,
        "content": entry.content,
        "evidence": entry.evidence,
        "source": entry.source,
        "origin": (entry.metadata or {}).get("origin", ""),
        **_source(
            principal=principal, thread_id=entry.source_thread_id, message_ids=entry.source_message_ids
        ),
        "episode": None,
        "created": _created(audit),
        "confirmations": {"count": entry.times_confirmed, "last_at": entry.last_confirmed_at},
        "replaces": [_version(e.pk, e.content, e.valid_from, e.valid_to) for e in replaced],
        "replaced_by": _version(later.pk, later.content, later.valid_from, later.valid_to) if later else None,
        "audit": audit,
    }


def _version(pk, text, valid_from, valid_to) -> dict:
    return {"id": pk, "text": text, "valid_from": valid_from, "valid_to": valid_to}


def _fact_text(fact: Fact) -> str:
    return f"{fact.key}: {fact.value}"


def _fact_evidence(principal: Principal, item_id) -> dict:
    fact = fact_get(principal=principal, fact_id=item_id)
    audit = _audit(workspace=principal.workspace, entity_type="fact", entity_id=fact.pk)
    message = (
        Message.objects.filter(pk=fact.source_message_id).only("id", "thread_id").first()
        if fact.source_message_id
        else None
    )
    source = _source(
        principal=principal,
        thread_id=message.thread_id if message else None,
        message_ids=[message.pk] if message else [],
    )
    episode = None
    if fact.source_episode_id:
        visible = (
            scope_to_principal(Episode.objects.all(), principal).filter(pk=fact.source_episode_id).first()
        )
        episode = _episode_brief(visible) if visible else None
    replaced = Fact.objects.filter(superseded_by=fact).order_by("valid_from")[:RELATED_SHOWN]
    later = fact.superseded_by if fact.superseded_by_id else None
    return {
        "tier": "fact",
        "id": fact.pk,
        "content": _fact_text(fact),
        "evidence": fact.evidence,
        "source": fact.source,
        "origin": fact.source,
        **source,
        "episode": episode,
        "created": _created(audit),
        "confirmations": {"count": fact.times_confirmed, "last_at": fact.last_confirmed_at},
        "replaces": [_version(f.pk, _fact_text(f), f.valid_from, f.valid_to) for f in replaced],
        "replaced_by": _version(later.pk, _fact_text(later), later.valid_from, later.valid_to)
        if later
        else None,
        "audit": audit,
    }


def _episode_brief(episode: Episode) -> dict:
    return {
        "id": episode.pk,
        "outcome": episode.outcome,
        "trigger_type": episode.trigger_type,
        "started_at": episode.started_at,
    }


def _episode_evidence(principal: Principal, item_id) -> dict:
    episode = episode_get(principal=principal, episode_id=item_id)
    audit = _audit(workspace=principal.workspace, entity_type="episode", entity_id=episode.pk)
    thread = _thread_visible(principal=principal, thread_id=episode.thread_id)
    messages = []
    if thread is not None:
        newest = Message.objects.filter(thread=thread).order_by("-seq").values_list("pk", flat=True)
        messages = _messages(thread=thread, ids=list(newest[:MESSAGES_SHOWN]))
    facts = scope_to_principal(Fact.objects.all(), principal, shared=True).filter(source_episode=episode)
    procedures = scope_to_principal(Procedure.objects.all(), principal, shared=True).filter(
        source_episode_ids__contains=[episode.pk]
    )
    return {
        "tier": "episode",
        "id": episode.pk,
        "content": str((episode.input or {}).get("goal") or episode.trigger_type or ""),
        "evidence": episode.feedback_comment,
        "source": episode.trigger_type,
        "origin": "recorded",
        "thread": {"id": thread.pk, "title": thread.title} if thread else None,
        "messages": messages,
        "episode": _episode_brief(episode),
        "created": _created(audit),
        "confirmations": {"count": 1 if episode.rating and episode.rating >= 4 else 0, "last_at": None},
        "replaces": [],
        "replaced_by": None,
        "derived": {
            "facts": [{"id": f.pk, "text": _fact_text(f)} for f in facts[:RELATED_SHOWN]],
            "procedures": [{"id": p.pk, "text": p.name} for p in procedures[:RELATED_SHOWN]],
        },
        "audit": audit,
    }


def _procedure_evidence(principal: Principal, item_id) -> dict:
    procedure = procedure_get(principal=principal, procedure_id=item_id)
    audit = _audit(workspace=principal.workspace, entity_type="procedure", entity_id=procedure.pk)
    episodes = scope_to_principal(Episode.objects.all(), principal).filter(
        pk__in=procedure.source_episode_ids
    )
    # A workspace procedure counts every agent's runs; an agent-bound key sees its own.
    runs = (
        ProcedureRun.objects.filter(
            procedure=procedure, episode__in=scope_to_principal(Episode.objects.all(), principal)
        )
        .select_related("episode")
        .order_by("-counted_at")
    )
    parent = procedure.parent if procedure.parent_id else None
    return {
        "tier": "procedure",
        "id": procedure.pk,
        "content": procedure.name,
        "evidence": procedure.description,
        "source": procedure.origin,
        "origin": procedure.origin,
        "thread": None,
        "messages": [],
        "episode": None,
        "created": _created(audit),
        "confirmations": {"count": procedure.success_count, "last_at": procedure.last_used_at},
        "contradictions": {"count": procedure.failure_count},
        "replaces": [_version(parent.pk, parent.name, parent.created_at, None)] if parent else [],
        "replaced_by": None,
        "episodes": [_episode_brief(e) for e in episodes.order_by("started_at")[:RELATED_SHOWN]],
        "runs": [
            {"episode": r.episode_id, "success": r.success, "counted_at": r.counted_at}
            for r in runs[:RELATED_SHOWN]
        ],
        "audit": audit,
    }


_BY_TIER = {
    "entry": _entry_evidence,
    "fact": _fact_evidence,
    "episode": _episode_evidence,
    "procedure": _procedure_evidence,
}


def evidence_get(*, principal: Principal, tier: str, item_id) -> dict:
    """The evidence of one item; an item out of the principal's scope is a 404."""
    if tier not in _BY_TIER:
        raise ApplicationError(TIER_UNKNOWN, fields={"tier": [TIER_UNKNOWN]})
    return _BY_TIER[tier](principal, item_id)


def derived_from_source(*, principal: Principal, thread: Thread, message: Message | None = None) -> dict:
    """The querysets of what was derived from `thread` (or one `message` of it) that the
    principal may delete: entries, facts and proposed (not yet active) learned procedures.

    Workspace keys reach every row; an agent-bound key only its agent's rows (a fact shared by
    the workspace, with no agent, is left to a workspace key).
    """
    entries = scope_to_principal(EpisodicEntry.objects.all(), principal).filter(source_thread=thread)
    facts = scope_to_principal(Fact.objects.all(), principal)
    procedures = Procedure.objects.none()
    if message is not None:
        said = [str(message.pk)]
        # A restatement merged into an entry in review lends it its source messages; such a
        # message only confirmed the entry (the restatement, which came from it, goes). The
        # first source message is always the entry's own.
        confirmed_only = EpisodicEntry.objects.filter(
            superseded_by=OuterRef("pk"),
            review=EpisodicEntry.Review.MERGED,
            source_message_ids__contains=said,
        )
        entries = entries.filter(source_message_ids__contains=said).filter(
            Q(source_message_ids__0=said[0]) | ~Exists(confirmed_only)
        )
        facts = facts.filter(source_message=message)
    else:
        facts = facts.filter(Q(source_message__thread=thread) | Q(source_episode__thread=thread))
        episode_ids = list(Episode.objects.filter(thread=thread).values_list("pk", flat=True))
        if episode_ids:
            procedures = scope_to_principal(Procedure.objects.all(), principal).filter(
                origin=Procedure.Origin.SELF_LEARNED, is_active=False, source_episode_ids__overlap=episode_ids
            )
    return {"entries": entries, "facts": facts, "procedures": procedures}


def derived_preview(*, principal: Principal, thread: Thread, message: Message | None = None) -> dict:
    derived = derived_from_source(principal=principal, thread=thread, message=message)
    return {
        name: {"count": rows.count(), "ids": list(rows.values_list("pk", flat=True)[:RELATED_SHOWN])}
        for name, rows in derived.items()
    }
