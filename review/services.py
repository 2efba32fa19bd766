"""Every write of the review queue: approve (optionally edited), reject, merge, one or many.

Each tier decides on its own rows (episodic.services.review, facts.services.review); a
learned procedure is approved by activating it and rejected by leaving it inactive, both
audited with `review` (its queue state is read from that audit, review.selectors). Items
named in a batch are decided one by one, each in its own transaction: one that is out of
scope, already decided or invalid is reported and the others still go through.

A decision the database aborted for a concurrent writer's sake (a deadlock, a serialization
failure: its transaction rolled back whole) is read and decided again from the start, up to
DECIDE_ATTEMPTS times, then answered 409 (ITEM_CHANGED): never a 503 for the whole request,
and never, in a batch, one that hides which items were decided before it.
"""

import uuid
from dataclasses import dataclass

from django.db import OperationalError, transaction

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError, NotFoundError, transaction_lost
from core.models import AuditEvent
from core.services import audit_record
from episodic.models import EpisodicEntry
from episodic.services import entry_review_approve, entry_review_merge, entry_review_reject
from facts.models import Fact
from facts.selectors import fact_scope_for_principal
from facts.services import fact_review_approve, fact_review_merge, fact_review_reject
from facts.services.review import review_reason_clean
from procedures.models import Procedure
from procedures.services import procedure_lineage_lock, procedure_update
from review.selectors import (
    BUILDERS,
    REVIEW_ITEM_NOT_FOUND,
    STATE_HELD,
    TIER_ENTRY,
    TIER_FACT,
    TIER_PROCEDURE,
    TIERS,
    ReviewItem,
    review_item_get,
)

ACTION_APPROVE = "approve"
ACTION_REJECT = "reject"
ACTION_MERGE = "merge"

OUTCOME_NOT_FOUND = "not_found"
OUTCOME_NOT_HELD = "not_held"
OUTCOME_INVALID = "invalid"

EDITABLE = {
    TIER_ENTRY: ("content",),
    TIER_FACT: ("value", "fact_type", "confidence"),
    TIER_PROCEDURE: ("name", "description"),
}
EDIT_NOT_FOR_TIER = "Not an editable field of this tier."
ITEM_NOT_HELD = "This item is not waiting for review (it was approved, rejected or merged already)."
MERGE_NOT_FOR_PROCEDURES = "Procedures are not merged: approve or reject them."
MERGE_TARGET_NOT_FOUND = "The item to merge into was not found."
MERGE_INTO_REQUIRED = "Name the item to merge into."


def _held(*, principal: Principal, tier: str, item_id) -> ReviewItem:
    """The held item, or NotFoundError (out of scope or missing) / 409 (decided already)."""
    try:
        return review_item_get(principal=principal, tier=tier, item_id=item_id, state=STATE_HELD)
    except NotFoundError:
        review_item_get(principal=principal, tier=tier, item_id=item_id)  # NotFoundError if missing
        raise ApplicationError(ITEM_NOT_HELD, code="conflict", status_code=409)


def _edits_clean(tier: str, edits: dict | None) -> dict:
    edits = {name: value for name, value in (edits or {}).items() if value is not None}
    wrong = sorted(set(edits) - set(EDITABLE[tier]))
    if wrong:
        raise ApplicationError(EDIT_NOT_FOR_TIER, fields={name: [EDIT_NOT_FOR_TIER] for name in wrong})
    return edits


def _decided(tier: str, row) -> ReviewItem:
    """The item as a decision left it. Built from the row itself: a decision may answer with
    the stored item it merged into, which the principal may read (a person's shared fact)
    but which is not in its review scope (no `review_agent`): looking it up there would report
    an applied decision as not found."""
    return BUILDERS[tier](row, row.review)


# A decision aborted by the database, or a held proposal renamed between the decision's read
# and its lock, is decided again; one that meets either on every attempt is a 409
# (ITEM_CHANGED) rather than a wait without end.
DECIDE_ATTEMPTS = 3
ITEM_CHANGED = "This item was changed while it was being decided; read it again."


def _retrying(decide):
    """`decide()` again from its first read when the database aborted it for a concurrent
    writer: every tier's decision is one transaction, so the aborted one left nothing, and the
    item is read anew (the other writer may have decided it: then a 409 ITEM_NOT_HELD)."""
    for _ in range(DECIDE_ATTEMPTS):
        try:
            return decide()
        except OperationalError as exc:
            if not transaction_lost(exc) or transaction.get_connection().in_atomic_block:
                # Inside a caller's transaction the abort may have undone the caller's work
                # too: only the caller can run it again.
                raise
    raise ApplicationError(ITEM_CHANGED, code="conflict", status_code=409)


def review_approve(*, principal: Principal, tier: str, item_id, edits: dict | None = None) -> ReviewItem:
    """Approve the held item after `edits` (EDITABLE per tier); returns it as approved (or, for
    an entry or fact that turned out to restate a stored one, that stored item it merged into)."""
    return _retrying(lambda: _review_approve(principal=principal, tier=tier, item_id=item_id, edits=edits))


def _review_approve(*, principal: Principal, tier: str, item_id, edits: dict | None) -> ReviewItem:
    if tier not in TIERS:
        raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
    edits = _edits_clean(tier, edits)
    item = _held(principal=principal, tier=tier, item_id=item_id)
    actor = principal.actor
    if tier == TIER_ENTRY:
        return _decided(tier, entry_review_approve(entry=item.row, actor=actor, **edits))
    if tier == TIER_FACT:
        return _decided(tier, fact_review_approve(fact=item.row, actor=actor, principal=principal, **edits))
    _procedure_decide(principal=principal, procedure=item.row, decision="approved", edits=edits)
    return review_item_get(principal=principal, tier=tier, item_id=item.row.pk)


def review_reject(*, principal: Principal, tier: str, item_id, reason: str = "") -> ReviewItem:
    """Reject the held item with `reason`: kept, never recalled, not proposed again."""
    return _retrying(lambda: _review_reject(principal=principal, tier=tier, item_id=item_id, reason=reason))


def _review_reject(*, principal: Principal, tier: str, item_id, reason: str) -> ReviewItem:
    if tier not in TIERS:
        raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
    reason = review_reason_clean(reason)
    item = _held(principal=principal, tier=tier, item_id=item_id)
    if tier == TIER_ENTRY:
        entry_review_reject(entry=item.row, actor=principal.actor, reason=reason)
    elif tier == TIER_FACT:
        fact_review_reject(fact=item.row, actor=principal.actor, reason=reason)
    else:
        _procedure_decide(principal=principal, procedure=item.row, decision="rejected", reason=reason)
    return review_item_get(principal=principal, tier=tier, item_id=item.row.pk)


def review_merge(*, principal: Principal, tier: str, item_id, into) -> ReviewItem:
    """Merge the held entry or fact into `into`, a stored item of the same tier the principal
    may read; returns that item."""
    return _retrying(lambda: _review_merge(principal=principal, tier=tier, item_id=item_id, into=into))


def _review_merge(*, principal: Principal, tier: str, item_id, into) -> ReviewItem:
    if tier not in TIERS:
        raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
    if tier == TIER_PROCEDURE:
        raise ApplicationError(MERGE_NOT_FOR_PROCEDURES, fields={"tier": [MERGE_NOT_FOR_PROCEDURES]})
    if not into:
        raise ApplicationError(MERGE_INTO_REQUIRED, fields={"into": [MERGE_INTO_REQUIRED]})
    item = _held(principal=principal, tier=tier, item_id=item_id)
    not_found = NotFoundError(MERGE_TARGET_NOT_FOUND, fields={"into": [MERGE_TARGET_NOT_FOUND]})
    try:
        into = uuid.UUID(str(into))
    except ValueError:
        raise not_found from None  # no id at all names no stored item (the /memories form posts text)
    if tier == TIER_ENTRY:
        target = scope_to_principal(EpisodicEntry.objects.filter(pk=into), principal).first()
        if target is None:
            raise not_found
        row = entry_review_merge(entry=item.row, target=target, actor=principal.actor)
    else:
        target = fact_scope_for_principal(Fact.objects.filter(pk=into), principal).first()
        if target is None:
            raise not_found
        row = fact_review_merge(fact=item.row, target=target, actor=principal.actor)
    return _decided(tier, row)


def _proposal_lock(*, procedure: Procedure, names) -> Procedure | None:
    """Lock the lineages `names` of the proposal, its learned signature and the proposal itself;
    return it if it is still inactive.

    procedure_lineage_lock is the one lock every write of a lineage takes, so a decision and
    an activation of the same lineage at once end one after the other. Locking the proposal row
    alone first, then the lineage, deadlocked with an activation of the same lineage that held a
    version with a lower key and waited for the proposal (PostgreSQL aborted one: a 503).
    Every advisory key of the decision is taken here, in one call: a second call for a key lower
    than one held would wait while holding it, and deadlock with a locker holding that key and
    waiting for a held one. procedure_update, called under it, is told so (`lineage_held`)
    and asks for none.
    """
    procedure_lineage_lock(
        workspace_id=procedure.workspace_id,
        lineages=[(procedure.agent_id, name) for name in sorted(names)],
        signatures=[(procedure.agent_id, procedure.learned_signature)] if procedure.learned_signature else (),
        also=procedure.pk,
    )
    return Procedure.objects.filter(pk=procedure.pk, is_active=False).first()


class _ProposalMoved(Exception):
    """The proposal was renamed between its read and its lock: decided again from `procedure`."""

    def __init__(self, procedure: Procedure):
        super().__init__()
        self.procedure = procedure


def _procedure_decide(*, principal: Principal, procedure: Procedure, decision: str, edits=None, reason=""):
    """Decide the held proposal. A rename that lands between the read and the lock rolls the
    attempt back, which releases its locks, and the decision starts again on the new name: the
    lineage it is in now is never locked by a second call (_proposal_lock)."""
    for _ in range(DECIDE_ATTEMPTS):
        try:
            return _procedure_decide_once(
                principal=principal, procedure=procedure, decision=decision, edits=edits, reason=reason
            )
        except _ProposalMoved as moved:
            procedure = moved.procedure
    raise ApplicationError(ITEM_CHANGED, code="conflict", status_code=409)


def _procedure_decide_once(*, principal: Principal, procedure: Procedure, decision: str, edits, reason):
    fields = dict(edits or {})
    # The names procedure_update ends with: the edited one as it strips it, else the current one.
    names = {procedure.name, (fields.get("name") or "").strip()} - {""}
    with transaction.atomic():
        # Also serializes two reviewers of one proposal: the second sees the first one's audit event.
        locked = _proposal_lock(procedure=procedure, names=names)
        if locked is not None and (
            locked.name not in names or locked.learned_signature != procedure.learned_signature
        ):
            # Leaving the block rolls back to before the lock: its keys are released (even in a
            # savepoint) before the keys of the new name are asked for.
            raise _ProposalMoved(locked)
        decided = AuditEvent.objects.filter(
            workspace_id=procedure.workspace_id,
            entity_type="procedure",
            entity_id=str(procedure.pk),
            changes__review__in=["approved", "rejected"],
        ).exists()
        if locked is None or decided:
            raise ApplicationError(ITEM_NOT_HELD, code="conflict", status_code=409)
        if decision == "approved":
            fields["is_active"] = True
        if fields:
            # `names` holds the name the update ends with, and `locked` is the proposal: held.
            procedure_update(procedure=locked, actor=principal.actor, lineage_held=True, **fields)
        audit_record(
            workspace=locked.workspace,
            actor=principal.actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="procedure",
            entity_id=locked.pk,
            changes={"review": decision, **({"reason": reason} if reason else {})},
        )


@dataclass
class BatchOutcome:
    tier: str
    id: str
    outcome: str  # approved | rejected | merged | not_found | not_held | invalid
    message: str = ""
    item: ReviewItem | None = None


def review_batch(
    *, principal: Principal, action: str, items: list[dict], reason: str = ""
) -> list[BatchOutcome]:
    """Apply `action` to each of `items` ({tier, id, into?}) in order; one outcome each."""
    outcomes = []
    for raw in items:
        tier, item_id = raw["tier"], raw["id"]
        try:
            if action == ACTION_APPROVE:
                item = review_approve(principal=principal, tier=tier, item_id=item_id)
            elif action == ACTION_REJECT:
                item = review_reject(principal=principal, tier=tier, item_id=item_id, reason=reason)
            else:
                item = review_merge(principal=principal, tier=tier, item_id=item_id, into=raw.get("into"))
        except NotFoundError as exc:
            outcome = OUTCOME_INVALID if exc.fields else OUTCOME_NOT_FOUND
            outcomes.append(BatchOutcome(tier, str(item_id), outcome, exc.message))
            continue
        except ApplicationError as exc:
            outcome = OUTCOME_NOT_HELD if exc.status_code == 409 else OUTCOME_INVALID
            outcomes.append(BatchOutcome(tier, str(item_id), outcome, exc.message))
            continue
        done = {ACTION_APPROVE: "approved", ACTION_REJECT: "rejected", ACTION_MERGE: "merged"}[action]
        outcomes.append(BatchOutcome(tier, str(item_id), done, item=item))
    return outcomes
