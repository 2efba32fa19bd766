"""Facts learned from an episode's record, each citing the episode and a quote of it.

The candidates come from the caller, the workspace's chat model or the deterministic
patterns (episodes.services.episode_facts_propose); every one is checked here the way
extraction's hand-off checks its facts (episodic.services.facts_handoff): a key, a value,
and evidence that occurs in the record, from a user message when the fact is about the
person, and says enough to prove something (core.lib.evidence). A fact that passes is
remembered without overwriting a different current value.
"""

from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from core.errors import ApplicationError
from core.lib.escaping import strip_invisible, strip_invisible_json
from core.lib.evidence import EVIDENCE_TOO_WEAK, claim_text, evidence_too_weak
from episodes.models import Episode
from episodes.services import EpisodeFactCandidate, episode_evidence_finder, episode_facts_propose
from episodes.services.facts_proposal import METHOD_GIVEN
from facts.models import Fact
from facts.services.remember import fact_remember

# Per-candidate rejection reasons (the `reason` of each rejected candidate).
REJECT_KEY_MISSING = "key_missing"
REJECT_VALUE_MISSING = "value_missing"
REJECT_NO_EVIDENCE = "evidence_missing"
REJECT_EVIDENCE_NOT_FOUND = "evidence_not_in_episode"
REJECT_EVIDENCE_NOT_USER = "evidence_not_from_user"
REJECT_EVIDENCE_TOO_WEAK = EVIDENCE_TOO_WEAK
REJECT_CURRENT_DIFFERS = "current_value_differs"
REJECT_LIMIT = "over_max_facts"

# Candidates checked per call; more (a model listing everything) are rejected by reason.
EPISODE_FACTS_MAX = 50


@dataclass
class EpisodeFactsResult:
    method: str
    llm_error: str = ""
    stored: list = field(default_factory=list)
    rejected: list = field(default_factory=list)


def episode_facts_extract(
    *, episode: Episode, candidates: list | None = None, use_llm: bool = True, actor: str = "system"
) -> EpisodeFactsResult:
    """Check and remember facts of `episode`: `candidates` ({key, value, evidence}) when
    given, else those the chat model (or, without one, the patterns) proposes.

    A fact about the episode's memory user is a user-scope preference and needs a quote of a
    user message; an episode without a person gives agent-scope facts, quoted from any
    message, its input or its final output. Each stored fact has `source_episode` set and
    the quote as `evidence`. Idempotent: the same fact again confirms the stored one.
    """
    if candidates is None:
        proposed, method, llm_error = episode_facts_propose(episode=episode, use_llm=use_llm)
    else:
        proposed, method, llm_error = [EpisodeFactCandidate(**c) for c in candidates], METHOD_GIVEN, ""
    result = EpisodeFactsResult(method=method, llm_error=llm_error)
    about_person = episode.memory_user_id is not None
    evidence_find = episode_evidence_finder(episode)
    for index, candidate in enumerate(proposed):
        key = strip_invisible_json(candidate.key)
        value = strip_invisible_json(candidate.value)
        evidence = strip_invisible(candidate.evidence) if isinstance(candidate.evidence, str) else ""
        echo = {"key": key, "value": value, "evidence": evidence}
        reason = None
        sources = []
        if index >= EPISODE_FACTS_MAX:
            reason = REJECT_LIMIT
        elif not isinstance(key, str) or not key.strip():
            reason = REJECT_KEY_MISSING
        elif value is None or (isinstance(value, str) and not value.strip()):
            reason = REJECT_VALUE_MISSING
        elif not evidence.strip():
            reason = REJECT_NO_EVIDENCE
        else:
            sources = evidence_find(evidence)
            if not sources:
                reason = REJECT_EVIDENCE_NOT_FOUND
            elif about_person:
                sources = [source for source in sources if source.role == "user"]
                if not sources:
                    reason = REJECT_EVIDENCE_NOT_USER
            # Found is not enough: "I" or "ok" is in every record (core.lib.evidence).
            if reason is None and evidence_too_weak(evidence, claim=claim_text(key, value)):
                reason = REJECT_EVIDENCE_TOO_WEAK
        if reason is not None:
            result.rejected.append({**echo, "reason": reason})
            continue
        try:
            with transaction.atomic():
                remembered = fact_remember(
                    workspace=episode.workspace,
                    key=key,
                    value=value,
                    scope=Fact.Scope.USER if about_person else Fact.Scope.AGENT,
                    fact_type=Fact.FactType.USER_PREFERENCE
                    if about_person
                    else Fact.FactType.WORLD_KNOWLEDGE,
                    agent=episode.agent,
                    memory_user=episode.memory_user,
                    confidence=settings.EPISODIC_EXTRACTION_FACT_CONFIDENCE,
                    source=Fact.Source.EXTRACTION,
                    source_episode=episode,
                    evidence=evidence,
                    overwrite=False,
                    actor=actor,
                )
        except ApplicationError as exc:
            result.rejected.append({**echo, "reason": exc.message})
            continue
        if remembered.outcome == "skipped":
            result.rejected.append({**echo, "reason": REJECT_CURRENT_DIFFERS, "fact": remembered.fact})
            continue
        result.stored.append(
            {**echo, "outcome": remembered.outcome, "fact": remembered.fact, "found_in": sources[0].where}
        )
    return result
