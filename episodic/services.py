"""Every write to episodic memory and to the message vectors of semantic recall.

Episodic entries are source-backed notes about one person, readable only by the
(agent, memory user) pair that wrote them. `entry_extract` turns a finished turn into
entries: candidates (from an LLM and/or the client) must quote exact evidence from the
transcript, and survive normalization, caps and two kinds of dedupe before they are
stored. Vectors are computed in batches by Celery tasks; an entry is findable lexically
from the moment it is committed.
"""

import hashlib
import logging
import re
import unicodedata
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from core.access import Principal, scope_to_principal
from core.embeddings import EmbeddingError, embedding_provider_for
from core.errors import ApplicationError
from core.lib.escaping import strip_invisible, strip_invisible_json
from core.lib.sweep import sweep_take
from core.llm import LLMError, LLMUnavailable, chat_complete_json
from core.memory_settings import memory_settings_for
from core.ranking import PLAN_EXACT, vector_literal, vector_sql
from core.services import audit_record
from episodic.models import EntryEmbedding, EpisodicEntry

logger = logging.getLogger(__name__)

CONTENT_REQUIRED = "Content must not be empty."
SOURCE_UNKNOWN = "Unknown source label."
STATUS_UNKNOWN = "Unknown status."
TRANSCRIPT_REQUIRED = "Send a transcript (role-labelled messages) or a thread."
TRANSCRIPT_TOO_LONG = "The transcript has more than {limit} messages."
MEMORY_USER_OTHER_WORKSPACE = "Unknown memory user."
EPISODIC_DISABLED = "Episodic memory is switched off for this agent."

# Per-candidate rejection reasons (the `reason` of each rejected candidate).
REJECT_EMPTY = "empty_content"
REJECT_SOURCE = "unknown_source"
REJECT_NO_EVIDENCE = "evidence_missing"
REJECT_EVIDENCE_NOT_FOUND = "evidence_not_in_transcript"
REJECT_EVIDENCE_NOT_USER = "evidence_not_from_user"
REJECT_LIMIT = "over_max_entries_per_turn"
REJECT_DUPLICATE_HASH = "duplicate_exact"
REJECT_DUPLICATE_SIMILAR = "duplicate_similar"
REJECT_KNOWN = "already_in_context"

USER_SOURCES = {
    EpisodicEntry.Source.USER_ASSERTION,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL,
}

# The documented extraction prompt (docs/episodic.md explains each rule).
EXTRACTION_PROMPT = """You maintain the episodic memory of an AI agent about one person.
Read the conversation turn below and propose what is worth remembering about this person
for future conversations.

Store (episodic entries): concrete events, plans, decisions, experiences, situations and
commitments of the person, each as one short self-contained sentence in the third person,
with a date when the conversation gives one.
Do NOT store: greetings, small talk, the assistant's own suggestions that the person did
not accept, questions, instructions about the current task only, anything already listed
in <memory> or <user-profile>, secrets (passwords, keys, card numbers), or guesses.

Each entry needs:
- "content": the note;
- "source": "user_assertion" (the person said it), "user_accepted_assistant_proposal"
  (the assistant proposed it and the person agreed) or "verified_assistant_finding"
  (the assistant established it, e.g. with a tool, or the person confirmed it);
- "evidence": an EXACT quote copied character for character from one message that proves
  it (from a user message for the first two sources).

Stable preferences and relationships of the person (likes, dislikes, family, employer)
are profile facts, not episodic entries: put them under "facts" as
{"key": "snake_case_key", "value": "...", "evidence": "exact quote from a user message"}.

Answer with JSON only: {"entries": [...], "facts": [...]}. Empty lists are fine."""


def entry_normalize(text: str) -> str:
    """NFKC, invisible characters removed, whitespace collapsed, trimmed: the form that is
    stored and hashed (so a zero-width character neither hides text nor evades dedupe)."""
    return re.sub(r"\s+", " ", strip_invisible(unicodedata.normalize("NFKC", text or ""))).strip()


def entry_content_hash(text: str) -> str:
    """SHA-256 of the case-folded normal form: "Likes tea." and "likes  tea." collide."""
    return hashlib.sha256(entry_normalize(text).casefold().encode()).hexdigest()


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:") + "…"


# --- embedding ---------------------------------------------------------------------------------


def entry_embedding_text(entry: EpisodicEntry) -> str:
    return entry.content


def entry_embed_batch(*, entry_ids, provider=None) -> int:
    """Store vectors for the entries of `entry_ids` that lack one under the current model.

    Idempotent: entries already embedded with the model are skipped, and a concurrent
    run's rows win through the unique (entry, model) constraint. Returns rows written.
    """
    entries = list(EpisodicEntry.objects.filter(pk__in=list(entry_ids)).select_related("workspace"))
    written = 0
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
        written += _entry_vectors_store(entries=todo, vectors=vectors, model=model)
    return written


def _entry_vectors_store(*, entries, vectors, model: str) -> int:
    """Store the vectors of entries still holding the text they were computed from.

    An entry deleted while its vector was computed is skipped (a vector of it would fail
    the batch at commit, through the deferred foreign key), and so is one whose content was
    edited meanwhile: the edit dropped its vectors and queued its own embedding.
    """
    with transaction.atomic():
        # Locked until the vectors commit, in pk order so that two batches never deadlock.
        current = dict(
            EpisodicEntry.objects.filter(pk__in=[e.pk for e in entries])
            .order_by("pk")
            .select_for_update(no_key=True)
            .values_list("pk", "content")
        )
        rows = [
            EntryEmbedding(
                entry=entry,
                workspace_id=entry.workspace_id,
                agent_id=entry.agent_id,
                memory_user_id=entry.memory_user_id,
                model=model,
                dimensions=len(vector),
                embedding=vector,
            )
            for entry, vector in zip(entries, vectors, strict=True)
            if entry.pk in current and current[entry.pk] == entry_embedding_text(entry)
        ]
        EntryEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
        EpisodicEntry.objects.filter(pk__in=[row.entry_id for row in rows]).update(embedding_model=model)
    return len(rows)


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
            transaction.on_commit(lambda chunk=chunk: entry_embed_task.delay(chunk))
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


# --- entries -----------------------------------------------------------------------------------


def _source_clean(source: str) -> str:
    if source not in EpisodicEntry.Source.values:
        raise ApplicationError(SOURCE_UNKNOWN, fields={"source": [SOURCE_UNKNOWN]})
    return source


def entry_update(
    *, entry: EpisodicEntry, actor: str, content=None, status=None, metadata=None, source=None
) -> EpisodicEntry:
    """Edit an entry; a new content is re-hashed and re-embedded (old vectors dropped)."""
    from episodic.tasks import entry_embed_task

    changes = {}
    if content is not None:
        content = _truncate(entry_normalize(content), settings.EPISODIC_MAX_ENTRY_LENGTH)
        if not content:
            raise ApplicationError(CONTENT_REQUIRED, fields={"content": [CONTENT_REQUIRED]})
        if content != entry.content:
            changes["content"] = [entry.content, content]
            entry.content = content
            entry.content_hash = entry_content_hash(content)
            entry.embedding_model = ""
    if status is not None:
        if status not in EpisodicEntry.Status.values:
            raise ApplicationError(STATUS_UNKNOWN, fields={"status": [STATUS_UNKNOWN]})
        if status != entry.status:
            changes["status"] = [entry.status, status]
            entry.status = status
    if source is not None and source != entry.source:
        changes["source"] = [entry.source, _source_clean(source)]
        entry.source = source
    if metadata is not None:
        entry.metadata = metadata
        changes["metadata"] = True
    with transaction.atomic():
        entry.save()
        if "content" in changes:
            EntryEmbedding.objects.filter(entry=entry).delete()
            entry_embed_task.delay_on_commit([str(entry.pk)])
        if changes:
            audit_record(
                workspace=entry.workspace,
                actor=actor,
                action="update",
                entity_type="episodic_entry",
                entity_id=entry.pk,
                changes={k: v for k, v in changes.items() if k != "metadata"},
            )
    entry.refresh_from_db(fields=["search_vector", "updated_at"])
    return entry


def entry_delete(*, entry: EpisodicEntry, actor: str) -> None:
    with transaction.atomic():
        audit_record(
            workspace=entry.workspace,
            actor=actor,
            action="delete",
            entity_type="episodic_entry",
            entity_id=entry.pk,
        )
        entry.delete()


def entries_delete(*, queryset, workspace, actor: str) -> list[str]:
    """Delete the entries of `queryset` with one audit event each; returns their ids."""
    with transaction.atomic():
        found = [str(pk) for pk in queryset.values_list("pk", flat=True)]
        EpisodicEntry.objects.filter(pk__in=found).delete()
        for pk in found:
            audit_record(
                workspace=workspace,
                actor=actor,
                action="delete",
                entity_type="episodic_entry",
                entity_id=pk,
            )
    return found


def entry_batch_delete(*, principal: Principal, ids) -> dict:
    """Delete the principal's entries among `ids`; ids it cannot see are reported missing."""
    queryset = scope_to_principal(EpisodicEntry.objects.filter(pk__in=ids), principal)
    found = entries_delete(queryset=queryset, workspace=principal.workspace, actor=principal.actor)
    missing = sorted({str(i) for i in ids} - set(found))
    return {"deleted": len(found), "not_found": missing}


# --- extraction --------------------------------------------------------------------------------


@dataclass
class ExtractionResult:
    stored: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    llm_used: bool = False
    llm_error: str = ""


def _collapse(text: str) -> str:
    # Evidence is stored without invisible characters, so it is matched without them too.
    return re.sub(r"\s+", " ", strip_invisible(text or "")).strip()


def _evidence_messages(evidence: str, transcript: list[dict]) -> list[dict]:
    needle = _collapse(evidence)
    return [m for m in transcript if needle and needle in _collapse(m.get("content", ""))]


def _llm_candidates(*, workspace, transcript, known_memory, known_profile) -> tuple[list, list]:
    # Raw apart from invisible characters: the model must quote evidence character for
    # character, and the quote is matched against the transcript (_collapse).
    lines = "\n".join(f"[{m['role']}] {strip_invisible(m['content'])}" for m in transcript)
    known_memory, known_profile = strip_invisible(known_memory), strip_invisible(known_profile)
    context = ""
    if known_profile:
        context += f"<user-profile>\n{known_profile}\n</user-profile>\n"
    if known_memory:
        context += f"<memory>\n{known_memory}\n</memory>\n"
    reply = chat_complete_json(
        workspace=workspace,
        messages=[
            {"role": "system", "content": EXTRACTION_PROMPT},
            {"role": "user", "content": f"{context}<conversation>\n{lines}\n</conversation>"},
        ],
    )
    entries = reply.get("entries") or []
    facts = reply.get("facts") or []
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    facts = [f for f in facts if isinstance(f, dict)] if isinstance(facts, list) else []
    return entries, facts


def _similar_stored(*, agent, memory_user, vector, model) -> tuple[str | None, float]:
    """The most similar active stored entry of the scope under `model`, and its similarity."""
    where = "agent_id = %(agent)s AND memory_user_id = %(memory_user)s"
    sql = vector_sql(
        table="episodes_entryembedding", id_column="entry_id", scope_where=where, plan=PLAN_EXACT
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "agent": agent.pk,
                "memory_user": memory_user.pk,
                "qvec": vector_literal(vector),
                "model": model,
                "limit": 1,
            },
        )
        row = cursor.fetchone()
    return (str(row[0]), float(row[1])) if row else (None, 0.0)


def _cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5) or 1.0
    )


def entry_extract(
    *,
    agent,
    memory_user,
    transcript: list[dict],
    candidates: list[dict] | None = None,
    use_llm: bool = True,
    known_memory: str = "",
    known_profile: str = "",
    thread=None,
    actor: str = "system",
    provider=None,
) -> ExtractionResult:
    """Validate, dedupe and store episodic entries for one turn (module docstring).

    `transcript` items are `{"role", "content", "id"?}`. Candidates come from the
    workspace's chat endpoint (when `use_llm` and one is configured) followed by the
    client's. Every candidate is either stored or listed in `rejected` with a reason. The
    LLM's proposed profile facts go to `facts.services.fact_remember` with source
    "extraction". All entries of one call are written in one transaction.
    """
    workspace = agent.workspace
    if memory_user.workspace_id != workspace.pk:
        raise ApplicationError(MEMORY_USER_OTHER_WORKSPACE, code="not_found", status_code=404)
    agent_settings = memory_settings_for(agent)
    if not agent_settings.episodic_memory:
        raise ApplicationError(EPISODIC_DISABLED, code="episodic_disabled", status_code=409)
    result = ExtractionResult()
    proposed: list[tuple[str, dict]] = []
    llm_facts: list[dict] = []
    if use_llm:
        try:
            llm_entries, llm_facts = _llm_candidates(
                workspace=workspace,
                transcript=transcript,
                known_memory=known_memory,
                known_profile=known_profile,
            )
            result.llm_used = True
            proposed.extend(("llm", c) for c in llm_entries)
        except LLMUnavailable:
            pass
        except LLMError as exc:
            result.llm_error = str(exc)
            logger.warning("episodic extraction: LLM failed: %s", exc)
    proposed.extend(("client", c) for c in candidates or [])

    max_length = settings.EPISODIC_MAX_ENTRY_LENGTH
    valid: list[dict] = []
    for origin, raw in proposed:
        content = entry_normalize(str(raw.get("content") or ""))
        source = str(raw.get("source") or "")
        evidence = strip_invisible(str(raw.get("evidence") or "")).strip()
        item = {"content": content, "source": source, "evidence": evidence, "origin": origin}

        def reject(reason, item=item, **extra):
            result.rejected.append({**item, "reason": reason, **extra})

        if not content:
            reject(REJECT_EMPTY)
            continue
        if source not in EpisodicEntry.Source.values:
            reject(REJECT_SOURCE)
            continue
        if not evidence:
            reject(REJECT_NO_EVIDENCE)
            continue
        matches = _evidence_messages(evidence, transcript)
        if not matches:
            reject(REJECT_EVIDENCE_NOT_FOUND)
            continue
        if source in USER_SOURCES:
            matches = [m for m in matches if m["role"] == "user"]
            if not matches:
                reject(REJECT_EVIDENCE_NOT_USER)
                continue
        else:
            matches = [m for m in matches if m["role"] in ("user", "assistant")]
            if not matches:
                reject(REJECT_EVIDENCE_NOT_FOUND)
                continue
        if len(content) > max_length:
            item["content"] = content = _truncate(content, max_length)
            item["truncated"] = True
        item["hash"] = entry_content_hash(content)
        item["message_ids"] = [str(m["id"]) for m in matches if m.get("id")]
        valid.append(item)

    # Exact dedupe: within the turn, against stored entries and against the known context.
    known_hashes = {entry_content_hash(line) for line in _context_lines(known_memory + "\n" + known_profile)}
    stored_hashes = set(
        EpisodicEntry.objects.filter(
            agent=agent,
            memory_user=memory_user,
            content_hash__in=[i["hash"] for i in valid],
            status=EpisodicEntry.Status.ACTIVE,
        ).values_list("content_hash", flat=True)
    )
    seen: set = set()
    unique = []
    for item in valid:
        if item["hash"] in known_hashes:
            result.rejected.append({**_public(item), "reason": REJECT_KNOWN})
        elif item["hash"] in seen or item["hash"] in stored_hashes:
            result.rejected.append({**_public(item), "reason": REJECT_DUPLICATE_HASH})
        else:
            seen.add(item["hash"])
            unique.append(item)

    # Similarity dedupe, then the per-turn cap (applied to what would really be stored).
    threshold = agent_settings.dedupe_threshold
    vectors: list | None = None
    model = ""
    if unique:
        provider = provider or embedding_provider_for(workspace)
        model = provider.model_name
        try:
            vectors = provider.embed([i["content"] for i in unique])
        except EmbeddingError as exc:
            logger.warning("episodic extraction: embedding failed, similarity dedupe skipped: %s", exc)
    kept = []
    for index, item in enumerate(unique):
        if vectors is not None:
            vector = vectors[index]
            twin = next(
                (k for k in kept if _cosine(k["vector"], vector) >= threshold),
                None,
            )
            if twin is not None:
                result.rejected.append(
                    {
                        **_public(item),
                        "reason": REJECT_DUPLICATE_SIMILAR,
                        "similarity": round(_cosine(twin["vector"], vector), 4),
                    }
                )
                continue
            similar_id, similarity = _similar_stored(
                agent=agent, memory_user=memory_user, vector=vector, model=model
            )
            if similar_id is not None and similarity >= threshold:
                result.rejected.append(
                    {
                        **_public(item),
                        "reason": REJECT_DUPLICATE_SIMILAR,
                        "similarity": round(similarity, 4),
                        "duplicate_of": similar_id,
                    }
                )
                continue
            item["vector"] = vector
        if len(kept) >= settings.EPISODIC_MAX_ENTRIES_PER_TURN:
            result.rejected.append({**_public(item), "reason": REJECT_LIMIT})
            continue
        kept.append(item)

    with transaction.atomic():
        entries = [
            EpisodicEntry(
                workspace=workspace,
                agent=agent,
                memory_user=memory_user,
                content=item["content"],
                content_hash=item["hash"],
                source=item["source"],
                evidence=item["evidence"],
                source_thread=thread,
                source_message_ids=item["message_ids"],
                metadata={"origin": item["origin"], **({"truncated": True} if item.get("truncated") else {})},
            )
            for item in kept
        ]
        EpisodicEntry.objects.bulk_create(entries)
        with_vectors = [(e, i["vector"]) for e, i in zip(entries, kept, strict=True) if "vector" in i]
        if with_vectors:
            _entry_vectors_store(
                entries=[e for e, _ in with_vectors], vectors=[v for _, v in with_vectors], model=model
            )
        without = [str(e.pk) for e, i in zip(entries, kept, strict=True) if "vector" not in i]
        if without:
            from episodic.tasks import entry_embed_task

            entry_embed_task.delay_on_commit(without)
        for entry in entries:
            audit_record(
                workspace=workspace,
                actor=actor,
                action="create",
                entity_type="episodic_entry",
                entity_id=entry.pk,
                changes={"source": entry.source},
            )
        result.facts = _facts_remember(
            agent=agent, memory_user=memory_user, facts=llm_facts, transcript=transcript, actor=actor
        )
    result.stored = entries
    return result


def _public(item: dict) -> dict:
    return {k: item[k] for k in ("content", "source", "evidence", "origin") if k in item}


def _context_lines(text: str) -> list[str]:
    """Lines of a <memory>/<user-profile> block without markers and relative ages."""
    lines = []
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*[-*]\s*", "", line)
        line = re.sub(r"\s*\((?:today|yesterday|[^()]* ago)\)\s*$", "", line)
        if line and not line.startswith("<"):
            lines.append(line)
    return lines


def _facts_remember(*, agent, memory_user, facts, transcript, actor) -> list[dict]:
    """Proposed profile facts with user evidence go to global memory; others are dropped."""
    if not facts:
        return []
    from facts.models import Fact
    from facts.services import fact_remember

    outcomes = []
    for raw in facts:
        key, value = strip_invisible_json(raw.get("key")), strip_invisible_json(raw.get("value"))
        evidence = strip_invisible(str(raw.get("evidence") or ""))
        user_evidence = [m for m in _evidence_messages(evidence, transcript) if m["role"] == "user"]
        if not key or value in (None, "") or not user_evidence:
            outcomes.append({"key": key, "outcome": "rejected", "reason": REJECT_EVIDENCE_NOT_USER})
            continue
        try:
            with transaction.atomic():
                remembered = fact_remember(
                    workspace=agent.workspace,
                    key=str(key),
                    value=value,
                    scope=Fact.Scope.USER,
                    fact_type=Fact.FactType.USER_PREFERENCE,
                    memory_user=memory_user,
                    confidence=settings.EPISODIC_EXTRACTION_FACT_CONFIDENCE,
                    source=Fact.Source.EXTRACTION,
                    evidence=evidence,
                    overwrite=False,
                    actor=actor,
                )
        except ApplicationError as exc:
            outcomes.append({"key": key, "outcome": "rejected", "reason": exc.message})
            continue
        outcomes.append({"key": key, "outcome": getattr(remembered, "outcome", "stored")})
    return outcomes
