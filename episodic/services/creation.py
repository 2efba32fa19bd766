"""Direct creation of episodic entries, by an agent or operator that already knows what to remember.

Unlike extraction there is no transcript to quote: evidence is optional, and an entry
without it has the source `agent_direct`. Everything else is extraction's: the same
normal form and hash, the length cap, exact and near-duplicate dedupe against the person's
stored entries under the per-person lock, the inline vector (or the embedding task when
the endpoint fails) and one audit event per entry (`episodic.services.storing`).
"""

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from core.embeddings import embedding_provider_for
from core.errors import ApplicationError, ConflictError
from core.lib.consolidation import claim_decided_by_rule
from core.lib.escaping import strip_invisible
from core.memory_settings import memory_settings_for, review_holds
from core.parsers import json_storable
from core.services import agent_pending, agent_pending_store, agent_pending_written
from episodic.models import EpisodicEntry
from episodic.services.candidates import USER_SOURCES, _evidence_messages
from episodic.services.entries import CONTENT_REQUIRED, EVIDENCE_REQUIRED, SOURCE_UNKNOWN
from episodic.services.extraction import EPISODIC_DISABLED, MEMORY_USER_OTHER_WORKSPACE
from episodic.services.normalize import entry_content_hash, entry_normalize
from episodic.services.storing import _dedupe_exact, _dedupe_similar, _entries_insert

CONTENT_TOO_LONG = "At most {limit} characters (after whitespace is collapsed)."
EVIDENCE_NOT_IN_MESSAGE = "The evidence is not a quote of the source message."
EVIDENCE_NOT_FROM_USER = "This source needs a quote of a user message."
MESSAGE_OTHER_PERSON = "The source message is not from a conversation of this agent with this person."
MESSAGE_OTHER_THREAD = "The source message is not in the thread named."
ITEMS_REQUIRED = "Send at least one entry."
ITEMS_TOO_MANY = "At most {limit} entries per request."
METADATA_NOT_OBJECT = "Must be an object."
METADATA_NOT_JSON = "Must be JSON that PostgreSQL can store: no NaN or Infinity, no NUL or lone surrogate."
DUPLICATE_VANISHED = "The entry this one duplicates was deleted meanwhile; send it again."

DIRECT_ORIGIN = "direct"


@dataclass
class EntryCreateResult:
    """One requested entry: stored (`created`), or the stored entry it duplicates."""

    entry: EpisodicEntry
    created: bool
    reason: str = ""  # When not created: duplicate_exact, duplicate_similar or confirmed_existing.
    similarity: float | None = None
    # The consolidation decision with a similar stored entry (core.lib.consolidation), if any.
    consolidation: dict | None = None


def _item_clean(raw: dict, *, agent, memory_user, thread) -> dict:
    """The stored form of one requested entry, or ApplicationError naming its bad fields."""
    errors: dict[str, list[str]] = {}
    content = entry_normalize(raw.get("content") or "")
    limit = settings.EPISODIC_MAX_ENTRY_LENGTH
    if not content:
        errors["content"] = [CONTENT_REQUIRED]
    elif len(content) > limit:
        errors["content"] = [CONTENT_TOO_LONG.format(limit=limit)]
    evidence = strip_invisible(raw.get("evidence") or "").strip()
    source = raw.get("source") or EpisodicEntry.Source.AGENT_DIRECT
    if source not in EpisodicEntry.Source.values:
        errors["source"] = [SOURCE_UNKNOWN]
    elif source != EpisodicEntry.Source.AGENT_DIRECT and not evidence:
        errors["evidence"] = [EVIDENCE_REQUIRED]
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        errors["metadata"] = [METADATA_NOT_OBJECT]
    elif not json_storable(metadata):
        # The API's parser refuses them; a tool call's JSON may not have.
        errors["metadata"] = [METADATA_NOT_JSON]
    message = raw.get("source_message")
    if message is not None:
        if thread is not None and message.thread_id != thread.pk:
            errors["source_message"] = [MESSAGE_OTHER_THREAD]
        elif message.thread.agent_id != agent.pk or message.thread.memory_user_id != memory_user.pk:
            errors["source_message"] = [MESSAGE_OTHER_PERSON]
        elif evidence and "evidence" not in errors:
            # With a message named, the evidence is checked like an extracted candidate's.
            said = [{"role": message.role, "content": message.content}]
            if not _evidence_messages(evidence, said):
                errors["evidence"] = [EVIDENCE_NOT_IN_MESSAGE]
            elif source in USER_SOURCES and message.role != "user":
                errors["evidence"] = [EVIDENCE_NOT_FROM_USER]
    if errors:
        raise ApplicationError("Invalid entry.", fields=errors)
    return {
        "content": content,
        "hash": entry_content_hash(content),
        "source": source,
        "evidence": evidence,
        "thread": message.thread if message is not None else thread,
        "message_ids": [str(message.pk)] if message is not None else [],
        "metadata": {**metadata, "origin": DIRECT_ORIGIN},
    }


def entries_create(
    *, agent, memory_user, items: list[dict], actor: str, thread=None, provider=None
) -> list[EntryCreateResult]:
    """Store `items` ({content, source?, evidence?, source_message?, metadata?}) for the
    (agent, person) pair, all or none, in one transaction; one result per item, in order.

    Any invalid item refuses the whole call (ApplicationError whose fields are named
    `items[<index>].<field>`). A valid item that duplicates an active stored entry, exactly
    (same hash) or nearly (cosine >= the agent's dedupe threshold), or an earlier item of
    the call, is not stored: its result holds that entry with `created` false. An item
    similar to a stored entry below that threshold is consolidated with it
    (episodic.services.consolidation): a restatement is not stored either (`confirmed_existing`),
    and the result carries the decision as `consolidation`. The messages named are resolved
    (and scoped) by the caller.

    An `agent` not stored yet (threads.selectors.memory_context_for_write) is inserted in the
    transaction that writes the entries, so a refused call registers no agent; registered
    meanwhile by another request, the call is decided again for that row.
    """
    return agent_pending_written(
        _entries_create,
        agent=agent,
        memory_user=memory_user,
        items=items,
        actor=actor,
        thread=thread,
        provider=provider,
    )


def _entries_create(*, agent, memory_user, items, actor, thread, provider) -> list[EntryCreateResult]:
    workspace = agent.workspace
    if memory_user.workspace_id != workspace.pk:
        raise ApplicationError(MEMORY_USER_OTHER_WORKSPACE, code="not_found", status_code=404)
    limit = settings.EPISODIC_CREATE_BATCH_MAX
    if not items:
        raise ApplicationError(ITEMS_REQUIRED, fields={"items": [ITEMS_REQUIRED]})
    if len(items) > limit:
        message = ITEMS_TOO_MANY.format(limit=limit)
        raise ApplicationError(message, fields={"items": [message]})
    agent_settings = memory_settings_for(agent)
    if not agent_settings.episodic_memory:
        raise ApplicationError(EPISODIC_DISABLED, code="episodic_disabled", status_code=409)
    cleaned, errors = [], {}
    for index, raw in enumerate(items):
        try:
            item = _item_clean(raw, agent=agent, memory_user=memory_user, thread=thread)
        except ApplicationError as exc:
            errors.update({f"items[{index}].{name}": value for name, value in exc.fields.items()})
            continue
        item["index"] = index
        cleaned.append(item)
    if errors:
        raise ApplicationError("Invalid entries: nothing was stored.", fields=errors)
    return _entries_store(
        cleaned,
        agent=agent,
        memory_user=memory_user,
        actor=actor,
        agent_settings=agent_settings,
        provider=provider,
    )


def entry_create(
    *,
    agent,
    memory_user,
    content: str,
    actor: str,
    source: str = EpisodicEntry.Source.AGENT_DIRECT,
    evidence: str = "",
    thread=None,
    source_message=None,
    metadata: dict | None = None,
    provider=None,
) -> EntryCreateResult:
    """`entries_create` for one entry; invalid fields are named plainly (`content`)."""
    return agent_pending_written(
        _entry_create,
        agent=agent,
        memory_user=memory_user,
        content=content,
        actor=actor,
        source=source,
        evidence=evidence,
        thread=thread,
        source_message=source_message,
        metadata=metadata,
        provider=provider,
    )


def _entry_create(
    *, agent, memory_user, content, actor, source, evidence, thread, source_message, metadata, provider
) -> EntryCreateResult:
    workspace = agent.workspace
    if memory_user.workspace_id != workspace.pk:
        raise ApplicationError(MEMORY_USER_OTHER_WORKSPACE, code="not_found", status_code=404)
    agent_settings = memory_settings_for(agent)
    if not agent_settings.episodic_memory:
        raise ApplicationError(EPISODIC_DISABLED, code="episodic_disabled", status_code=409)
    raw = {
        "content": content,
        "source": source,
        "evidence": evidence,
        "source_message": source_message,
        "metadata": metadata,
    }
    item = _item_clean(raw, agent=agent, memory_user=memory_user, thread=thread)
    item["index"] = 0
    (result,) = _entries_store(
        [item],
        agent=agent,
        memory_user=memory_user,
        actor=actor,
        agent_settings=agent_settings,
        provider=provider,
    )
    return result


def _duplicated_entries(dropped: dict) -> dict:
    """{id: entry} of the stored entries that dropped items duplicate; ConflictError when one
    was deleted meanwhile."""
    stored_ids = {d[2] for d in dropped.values() if d[2] is not None}
    if not stored_ids:
        return {}
    stored = EpisodicEntry.objects.select_related("agent").in_bulk(list(stored_ids))
    if len(stored) != len(stored_ids):
        raise ConflictError(DUPLICATE_VANISHED)
    return stored


def _entries_store(items, *, agent, memory_user, actor, agent_settings, provider) -> list[EntryCreateResult]:
    dropped: dict[int, tuple] = {}

    def reject(item, reason, *, similarity=None, duplicate_of=None, twin=None, consolidation=None):
        dropped[item["index"]] = (reason, similarity, duplicate_of, twin, consolidation)

    threshold = agent_settings.dedupe_threshold
    # Stored directly, an entry waits for review only when the agent's setting is `all`.
    held = review_holds(agent, extracted=False)
    for item in items:
        item["held"] = held
    unique = _dedupe_exact(items, agent=agent, memory_user=memory_user, reject=reject)
    by_rule = False
    if unique:
        provider = provider or embedding_provider_for(agent.workspace)
        # Decided by rule, consolidation costs nothing under the person's lock: the stored
        # entries are then compared once, there, not before it and again under it (docs/speed.md);
        # but a batch on the local model reads them while it is embedded (`_dedupe_similar`).
        by_rule = claim_decided_by_rule(workspace=agent.workspace)
    kept, model = _dedupe_similar(
        unique,
        agent=agent,
        memory_user=memory_user,
        provider=provider,
        threshold=threshold,
        reject=reject,
        check_stored=not by_rule,
    )
    if kept or agent_pending(agent):
        with transaction.atomic():
            # An agent named for the first time is stored with the entries, or not at all.
            agent = agent_pending_store(agent, refuse_other=True)
            if kept:
                _entries_insert(
                    kept,
                    agent=agent,
                    memory_user=memory_user,
                    thread=None,
                    actor=actor,
                    threshold=threshold,
                    model=model,
                    reject=reject,
                )
            # Read in the transaction, after the person's lock: an entry of the same person
            # deleted meanwhile cannot be answered as the one a duplicate stands for.
            stored = _duplicated_entries(dropped)
    else:
        # Nothing to store (every item repeats a stored entry): no transaction, no lock. The
        # entries are read as committed now, so the answer is as of this read.
        stored = _duplicated_entries(dropped)
    stored = {str(pk): entry for pk, entry in stored.items()}
    results: list[EntryCreateResult] = []
    for item in items:
        if "entry" in item:
            entry = item["entry"]
            results.append(
                EntryCreateResult(entry=entry, created=True, consolidation=entry.consolidation or None)
            )
            continue
        reason, similarity, duplicate_of, twin, consolidation = dropped[item["index"]]
        # A twin has a lower index, so its result is already known.
        entry = stored[duplicate_of] if duplicate_of is not None else results[twin["index"]].entry
        results.append(
            EntryCreateResult(
                entry=entry, created=False, reason=reason, similarity=similarity, consolidation=consolidation
            )
        )
    return results
