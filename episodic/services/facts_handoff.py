"""The facts an extraction proposes, handed to global memory when a user message backs them."""

from django.conf import settings

from core.errors import ApplicationError
from core.lib.escaping import strip_invisible, strip_invisible_json
from core.lib.evidence import claim_text, evidence_too_weak
from episodic.services.candidates import (
    REJECT_EVIDENCE_NOT_USER,
    REJECT_EVIDENCE_TOO_WEAK,
    _evidence_messages,
)


def _facts_remember(*, agent, memory_user, facts, transcript, actor) -> list[dict]:
    """Proposed profile facts with user evidence go to global memory; others are dropped."""
    if not facts:
        return []
    from facts.models import Fact
    from facts.services import fact_remember

    outcomes = []
    for raw in facts:
        key, value = strip_invisible_json(raw.get("key")), strip_invisible_json(raw.get("value"))
        # A key is text: the text of a number or an object would name a fact by its Python form.
        key = key if isinstance(key, str) else ""
        evidence = raw.get("evidence")
        evidence = strip_invisible(evidence) if isinstance(evidence, str) else ""
        user_evidence = [m for m in _evidence_messages(evidence, transcript) if m["role"] == "user"]
        if not key or value in (None, "") or not user_evidence:
            outcomes.append({"key": key, "outcome": "rejected", "reason": REJECT_EVIDENCE_NOT_USER})
            continue
        if evidence_too_weak(evidence, claim=claim_text(key, value)):
            outcomes.append({"key": key, "outcome": "rejected", "reason": REJECT_EVIDENCE_TOO_WEAK})
            continue
        try:
            # No transaction around it: fact_remember writes in its own, after it may have
            # asked the chat model about a similar key.
            remembered = fact_remember(
                workspace=agent.workspace,
                key=str(key),
                value=value,
                scope=Fact.Scope.USER,
                fact_type=Fact.FactType.USER_PREFERENCE,
                memory_user=memory_user,
                # Whose `review` setting holds it; a user fact stores no agent.
                agent=agent,
                confidence=settings.EPISODIC_EXTRACTION_FACT_CONFIDENCE,
                source=Fact.Source.EXTRACTION,
                evidence=evidence,
                overwrite=False,
                actor=actor,
            )
        except ApplicationError as exc:
            outcomes.append({"key": key, "outcome": "rejected", "reason": exc.message})
            continue
        outcome = {"key": key, "outcome": getattr(remembered, "outcome", "stored")}
        if getattr(remembered, "consolidation", None):
            # Reconciled with a fact of another key (facts.services.consolidation).
            outcome["consolidation"] = remembered.consolidation
        outcomes.append(outcome)
    return outcomes
