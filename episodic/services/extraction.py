"""Extraction of episodic entries from one finished turn: prompt, candidates, dedupe, storing.

Episodic entries are source-backed notes about one person, readable only by the
(agent, memory user) pair that wrote them. `entry_extract` turns a finished turn into
entries: candidates (from an LLM and/or the client) must quote exact evidence from the
transcript, and survive normalization, caps and two kinds of dedupe before they are
stored. Vectors are computed in batches by Celery tasks; an entry is findable lexically
from the moment it is committed.

An asynchronous extraction (`entry_extract_enqueue`) waits its workspace's turn in the fair
queue (core.lib.fair_queue) and runs as `entry_extract_job`. Refused by a `wait` budget, the
job is deferred to the next budget day and runs whole then (the client's candidates too),
instead of storing the client's candidates only as a synchronous extraction does.
"""

import logging
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from core.counters import EXTRACTIONS_RUN, counters_add, rejections_count
from core.embeddings import embedding_provider_for
from core.errors import ApplicationError
from core.lib.escaping import strip_invisible
from core.lib.evidence import evidence_too_weak
from core.lib.fair_queue import llm_job_begin, llm_job_defer, llm_job_enqueue, llm_job_finish
from core.llm import LLMBudgetWait, LLMError, LLMUnavailable, chat_complete_json
from core.memory_settings import memory_settings_for, review_holds
from core.models import Agent
from core.services import agent_pending, agent_pending_store, agent_pending_written
from episodic.services.candidates import (
    EXTRACTED_SOURCES,
    REJECT_EMPTY,
    REJECT_EVIDENCE_NOT_FOUND,
    REJECT_EVIDENCE_NOT_USER,
    REJECT_EVIDENCE_TOO_WEAK,
    REJECT_KNOWN,
    REJECT_NO_EVIDENCE,
    REJECT_PREFERENCE,
    REJECT_SOURCE,
    USER_SOURCES,
    _evidence_messages,
    _preference_fact,
    _relevance_reason,
    _sentence_around,
)
from episodic.services.facts_handoff import _facts_remember
from episodic.services.normalize import _truncate, entry_content_hash, entry_normalize
from episodic.services.offline import offline_candidates
from episodic.services.storing import _dedupe_exact, _dedupe_similar, _entries_insert

logger = logging.getLogger(__name__)

TRANSCRIPT_REQUIRED = "Send a transcript (role-labelled messages) or a thread."
TRANSCRIPT_TOO_LONG = "The transcript has more than {limit} messages."
MEMORY_USER_OTHER_WORKSPACE = "Unknown memory user."
EPISODIC_DISABLED = "Episodic memory is switched off for this agent."

# The documented extraction prompt (docs/episodic.md explains each rule).
EXTRACTION_PROMPT = """You keep the episodic memory of an AI agent about one person: notes that let
the agent handle the next similar situation with this person without starting from zero.
Read the conversation turn below and propose what is worth keeping.

Keep the mechanism of a situation, not a diary of small talk:
- the symptoms and the environment (what failed, where, versions, accounts, dates);
- causal links and their direction: which record or system held the state and which one was
  checked or read (e.g. "the billing service read the old card; the new card was only on
  the profile");
- mismatched identifiers or values, naming both sides (what the producer sent versus what
  the matcher expected);
- diagnostic findings, each marked as confirmed or still open;
- a resolution only once the person confirmed it worked; otherwise the open state of the
  case (what was tried, what is still unknown, what is pending);
- concrete events, plans, decisions and commitments of the person, dated when the
  conversation gives a date.
Write each note as one self-contained sentence in the third person. Keep uncertainty
explicit ("suspected", "not yet confirmed") instead of turning a guess into a fact.

Leave out:
- stable preferences, traits and relationships (likes, dislikes, diet, family, employer):
  they are profile facts, put them under "facts" (below), never under "entries";
- instructions about how the agent should behave or answer (tone, language, format);
- what the person asks for in this conversation only (the current task or question);
- generic advice or how-to knowledge that names nothing specific to this person's case;
- anything already in <memory> or <user-profile>, even reworded;
- branches the conversation abandoned or the person contradicted, and the assistant's
  guesses or suggestions the person did not confirm or accept;
- greetings, thanks, small talk, secrets (passwords, keys, card numbers).

Each entry needs:
- "content": the note;
- "source": "user_assertion" (the person said it), "user_accepted_assistant_proposal"
  (the assistant proposed it and the person agreed) or "verified_assistant_finding"
  (the assistant established it, e.g. with a tool, or the person confirmed it);
- "evidence": an EXACT quote copied character for character from one message that proves
  it (from a user message for the first two sources).

Profile facts: {"key": "snake_case_key", "value": "...", "evidence": "exact quote from a user
message"}.

Answer with JSON only: {"entries": [...], "facts": [...]}. Empty lists are fine."""


@dataclass
class ExtractionResult:
    stored: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    llm_used: bool = False
    llm_error: str = ""
    # True when no chat endpoint was configured and the offline method proposed candidates.
    offline_used: bool = False


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
        purpose="extraction",
    )
    entries = reply.get("entries") or []
    facts = reply.get("facts") or []
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    facts = [f for f in facts if isinstance(f, dict)] if isinstance(facts, list) else []
    return entries, facts


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
    defer_on_wait: bool = False,
) -> ExtractionResult:
    """Validate, dedupe and store episodic entries for one turn (module docstring).

    `transcript` items are `{"role", "content", "id"?}`. Candidates come from the
    workspace's chat endpoint when `use_llm` (or, with no endpoint configured, from the
    offline method of `episodic.services.offline`), followed by the client's. Every
    candidate is either stored or listed in `rejected` with a reason; the model's and the
    offline method's also pass the relevance checks (`candidates._relevance_reason`). Proposed
    profile facts, and stated preferences routed away from entries, go to
    `facts.services.fact_remember` with source "extraction". All entries of one call are
    written in one transaction.

    With `defer_on_wait`, a refusal by a `wait` budget raises LLMBudgetWait before anything
    is stored (the queued job is deferred); otherwise it is recorded as `llm_error`.

    An `agent` not stored yet (threads.selectors.memory_context_for_write) is inserted in the
    transaction that writes the entries, unless the model failed (`llm_error`) and nothing is
    stored: a failed extraction registers no agent. Registered meanwhile by another request,
    the candidates (the model is not asked again) are stored again for that row.
    """
    workspace = agent.workspace
    if memory_user.workspace_id != workspace.pk:
        raise ApplicationError(MEMORY_USER_OTHER_WORKSPACE, code="not_found", status_code=404)
    agent_settings = memory_settings_for(agent)
    if not agent_settings.episodic_memory:
        raise ApplicationError(EPISODIC_DISABLED, code="episodic_disabled", status_code=409)
    result = ExtractionResult()
    proposed: list[tuple[str, dict]] = []
    proposed_facts: list[dict] = []
    if use_llm:
        try:
            llm_entries, proposed_facts = _llm_candidates(
                workspace=workspace,
                transcript=transcript,
                known_memory=known_memory,
                known_profile=known_profile,
            )
            result.llm_used = True
            proposed.extend(("llm", c) for c in llm_entries)
        except LLMUnavailable:
            offline_entries, proposed_facts = offline_candidates(transcript)
            result.offline_used = True
            proposed.extend(("offline", c) for c in offline_entries)
        except LLMError as exc:
            if defer_on_wait and isinstance(exc, LLMBudgetWait):
                raise
            result.llm_error = str(exc)
            logger.warning("episodic extraction: LLM failed: %s", exc)
    proposed.extend(("client", c) for c in candidates or [])

    known_lines = _context_lines(known_memory + "\n" + known_profile)
    valid, rejected, routed = _candidates_validate(proposed, transcript=transcript, known_lines=known_lines)
    result.rejected.extend(rejected)
    proposed_facts = proposed_facts + routed
    checked = len(result.rejected)

    def store(*, agent):
        # Run again for a row another request registered meanwhile (agent_pending_written):
        # the first run was rolled back with nothing written, and its checks read the pending
        # agent's settings (the defaults) and its entries (none).
        del result.rejected[checked:]
        agent_settings = memory_settings_for(agent)
        if not agent_settings.episodic_memory:
            raise ApplicationError(EPISODIC_DISABLED, code="episodic_disabled", status_code=409)
        return _extracted_store(
            [dict(item) for item in valid],
            agent=agent,
            memory_user=memory_user,
            thread=thread,
            actor=actor,
            provider=provider,
            known_lines=known_lines,
            agent_settings=agent_settings,
            result=result,
        )

    agent, entries = agent_pending_written(store, agent=agent)
    # After the entries' transaction, which holds the person's lock: remembering a profile fact
    # may ask the chat model about a similar key (cross-key consolidation), and the person's
    # other writes would wait for that call. Each fact is its own transaction; an extraction
    # run again finds its entries stored (exact copies) and confirms its facts. An agent still
    # not stored is stored by fact_remember with a fact it accepts.
    result.facts = _facts_remember(
        agent=agent, memory_user=memory_user, facts=proposed_facts, transcript=transcript, actor=actor
    )
    result.stored = entries
    rejections_count(
        workspace_id=workspace.pk,
        agent_id=None if agent_pending(agent) else agent.pk,
        rejected=result.rejected,
    )
    return result


def _extracted_store(
    valid, *, agent, memory_user, thread, actor, provider, known_lines, agent_settings, result
) -> tuple:
    """(agent, stored entries) of the `valid` candidates of an extraction, the dropped ones
    added to `result.rejected`; the agent as stored, or still pending when nothing was stored
    after the model failed. Raises AgentRegisteredMeanwhile (entry_extract)."""
    # Extracted entries wait for review when the agent's `review` setting says so (docs/review.md).
    held = review_holds(agent, extracted=True)
    for item in valid:
        item["held"] = held

    def reject_dropped(item, reason, *, twin=None, **extra):
        result.rejected.append({**_public(item), "reason": reason, **extra})

    # Exact dedupe: against the known context, stored entries and within the turn.
    known = {entry_content_hash(line): REJECT_KNOWN for line in known_lines}
    unique = _dedupe_exact(
        valid, agent=agent, memory_user=memory_user, reject=reject_dropped, known_hashes=known
    )
    # Similarity dedupe, then the per-turn cap (applied to what would really be stored).
    threshold = agent_settings.dedupe_threshold
    if unique:
        provider = provider or embedding_provider_for(agent.workspace)
    kept, model = _dedupe_similar(
        unique,
        agent=agent,
        memory_user=memory_user,
        provider=provider,
        threshold=threshold,
        reject=reject_dropped,
        limit=settings.EPISODIC_MAX_ENTRIES_PER_TURN,
    )
    with transaction.atomic():
        # An agent named for the first time is stored with the entries; a failed model with
        # nothing to store leaves it unknown (a pending agent has no stored entries, so every
        # item kept here is stored).
        if kept or not result.llm_error:
            agent = agent_pending_store(agent, refuse_other=True)
        entries = _entries_insert(
            kept,
            agent=agent,
            memory_user=memory_user,
            thread=thread,
            actor=actor,
            threshold=threshold,
            model=model,
            reject=reject_dropped,
        )
    return agent, entries


def _extract_task_name() -> str:
    # Imported here: the task module imports the services. Importing it also registers the
    # task in this process, so the dispatcher finds it by name.
    from episodic.tasks import entry_extract_task

    return entry_extract_task.name


def entry_extract_enqueue(
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
):
    """Queue an extraction of one turn for its workspace's turn in the fair queue (sent after
    commit); returns the LLMJob. Runs as `entry_extract_job`."""
    return llm_job_enqueue(
        workspace_id=agent.workspace_id,
        task=_extract_task_name(),
        kwargs={
            "agent_id": str(agent.pk),
            "memory_user_id": str(memory_user.pk),
            "thread_id": str(thread.pk) if thread is not None else None,
            "transcript": transcript,
            "candidates": candidates or [],
            "use_llm": use_llm,
            "known_memory": known_memory,
            "known_profile": known_profile,
            "actor": actor,
        },
    )


def entry_extract_job(*, llm_job_id=None, agent_id, memory_user_id, thread_id=None, **kwargs) -> dict:
    """Run one queued extraction (`entry_extract_enqueue`) and finish its fair-queue job.

    A `wait` budget defers the job to the next budget day instead ({"status": "deferred"}).
    Idempotent enough for a job re-sent after a lost worker: what the first run stored is
    found again by the exact and similarity dedupe. A job no longer in the sent state (done
    or deferred by an earlier delivery) is skipped.
    """
    from identities.models import MemoryUser
    from threads.models import Thread

    if not llm_job_begin(llm_job_id):
        return {"status": "skipped"}
    agent, finish = None, True
    try:
        agent = Agent.objects.select_related("workspace").get(pk=agent_id)
        memory_user = MemoryUser.objects.get(pk=memory_user_id)
        thread = Thread.objects.filter(pk=thread_id).first() if thread_id else None
        try:
            result = entry_extract(
                agent=agent, memory_user=memory_user, thread=thread, defer_on_wait=True, **kwargs
            )
        except LLMBudgetWait as exc:
            llm_job_defer(
                llm_job_id,
                not_before=exc.retry_at,
                workspace_id=agent.workspace_id,
                task=_extract_task_name(),
                kwargs={
                    "agent_id": agent_id,
                    "memory_user_id": memory_user_id,
                    "thread_id": thread_id,
                    **kwargs,
                },
            )
            finish = False
            logger.info("episodic extraction: budget spent, deferred until %s", exc.retry_at)
            return {"status": "deferred", "until": exc.retry_at.isoformat()}
        return {"status": "done", "stored": len(result.stored), "rejected": len(result.rejected)}
    finally:
        if finish:
            if agent is not None:
                counters_add(workspace_id=agent.workspace_id, agent_id=agent.pk, counts={EXTRACTIONS_RUN: 1})
            llm_job_finish(llm_job_id)


def _candidates_validate(
    proposed: list[tuple[str, dict]], *, transcript: list[dict], known_lines: list[str]
) -> tuple[list[dict], list[dict], list[dict]]:
    """(valid items, rejected candidates with reasons, facts routed from entries) of `proposed`
    ((origin, raw candidate) pairs); reads nothing from the database, so benches run it alone."""
    max_length = settings.EPISODIC_MAX_ENTRY_LENGTH
    valid: list[dict] = []
    rejected: list[dict] = []
    routed_facts: list[dict] = []
    for origin, raw in proposed:
        # A model's JSON may hold anything where text belongs: only text is a note, a label or
        # a quote (the text of a number or an object would be stored as its Python form).
        content, source, evidence = (_text(raw.get(name)) for name in ("content", "source", "evidence"))
        content = entry_normalize(content)
        evidence = strip_invisible(evidence).strip()
        item = {"content": content, "source": source, "evidence": evidence, "origin": origin}

        def reject(reason, item=item, **extra):
            rejected.append({**item, "reason": reason, **extra})

        if not content:
            reject(REJECT_EMPTY)
            continue
        if source not in EXTRACTED_SOURCES:
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
        # Found is not enough: "I" or "yes" is in every transcript. Like a quote not found, a
        # weak quote rejects the candidate whoever proposed it (the client's too).
        if evidence_too_weak(evidence, claim=content):
            reject(REJECT_EVIDENCE_TOO_WEAK)
            continue
        # The client decided what its own candidates are worth; the model and the offline
        # method are held to the prompt's rules where a rule can be checked without a model.
        reason = _relevance_reason(item, matches, transcript, known_lines) if origin != "client" else None
        if reason == REJECT_PREFERENCE:
            sentence = _sentence_around(evidence, matches[0]["content"])
            routed_facts.append(_preference_fact(sentence, evidence=evidence))
            reject(reason, routed_to="facts")
            continue
        if reason:
            reject(reason)
            continue
        if len(content) > max_length:
            item["content"] = content = _truncate(content, max_length)
            item["truncated"] = True
        item["hash"] = entry_content_hash(content)
        item["message_ids"] = [str(m["id"]) for m in matches if m.get("id")]
        item["metadata"] = {"origin": origin, **({"truncated": True} if item.get("truncated") else {})}
        valid.append(item)
    return valid, rejected, routed_facts


def _text(value) -> str:
    return value if isinstance(value, str) else ""


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
