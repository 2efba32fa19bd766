"""Consolidation of a new entry with the similar stored entry of the same person (core.lib.consolidation).

`entry_consolidation_decide` runs before the per-person lock (a model call may be slow);
`_noop_confirm` and `_replaced_close` apply a decision under the lock as compare-and-set
writes on the stored entry, so a stored entry changed meanwhile turns the decision into an
`add`: nothing is dropped on a stale decision. Every decision is audited on the stored entry.
"""

from django.db.models import F

from core.lib.consolidation import DECISION_ADD, Decision, claim_decide
from core.services import audit_record
from episodic.models import EpisodicEntry

STALE_REASON = " Stored as a new entry: the similar entry changed meanwhile."

# An assistant's finding does not replace what the person said; anything else may.
_SOURCE_RANK = {
    EpisodicEntry.Source.USER_ASSERTION: 2,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL: 2,
    EpisodicEntry.Source.AGENT_DIRECT: 2,
    EpisodicEntry.Source.VERIFIED_FINDING: 1,
}


def entry_consolidation_decide(*, agent, item: dict, old_id, similarity: float) -> Decision | None:
    """The decision for `item` against the stored entry `old_id`; None when it is gone."""
    old = (
        EpisodicEntry.objects.filter(pk=old_id, status=EpisodicEntry.Status.ACTIVE)
        .only("content", "source", "valid_from")
        .first()
    )
    if old is None:
        return None
    return claim_decide(
        workspace=agent.workspace,
        old_id=old.pk,
        old_text=old.content,
        new_text=item["content"],
        old_when=f"stored {old.valid_from:%Y-%m-%d}",
        similarity=similarity,
        new_may_replace=_SOURCE_RANK.get(item["source"], 1) >= _SOURCE_RANK.get(old.source, 1),
    )


def _audit(*, agent, actor: str, decision: Decision, new, entity_id, action: str) -> dict:
    record = decision.record(new=new)
    audit_record(
        workspace=agent.workspace,
        actor=actor,
        action=action,
        entity_type="episodic_entry",
        entity_id=entity_id,
        changes=record,
    )
    return record


def _stale(decision: Decision) -> Decision:
    return Decision(
        DECISION_ADD, decision.reason + STALE_REASON, decision.by, decision.old, decision.similarity
    )


def _noop_confirm(*, agent, actor: str, decision: Decision, now) -> dict | None:
    """Count a restatement as a confirmation of the stored entry; None when it is no longer active."""
    # The agent's own entries only: a decision's id is data (kept in JSON on held entries).
    confirmed = EpisodicEntry.objects.filter(
        pk=decision.old, agent=agent, status=EpisodicEntry.Status.ACTIVE
    ).update(times_confirmed=F("times_confirmed") + 1, last_confirmed_at=now)
    if not confirmed:
        return None
    return _audit(
        agent=agent, actor=actor, decision=decision, new=None, entity_id=decision.old, action="update"
    )


def _replaced_close(*, agent, actor: str, decision: Decision, entry: EpisodicEntry, now) -> Decision:
    """Close the stored entry in favour of `entry` (update or supersede); the decision applied."""
    # Only an entry of the same agent and person: a held entry keeps `decision.old` in JSON
    # until it is approved, where an import or a crafted row may have put any id.
    closed = EpisodicEntry.objects.filter(
        pk=decision.old, agent=agent, memory_user_id=entry.memory_user_id, status=EpisodicEntry.Status.ACTIVE
    ).update(status=EpisodicEntry.Status.SUPERSEDED, valid_to=now, superseded_by=entry, updated_at=now)
    if not closed:
        return _stale(decision)
    _audit(agent=agent, actor=actor, decision=decision, new=entry.pk, entity_id=decision.old, action="update")
    return decision
