"""Cross-key consolidation: a fact remembered under a new key that says what a current fact of
the same owner and scope already says under another key (core.lib.consolidation).

`fact_cross_key_decide` runs before `fact_remember`'s transaction (a model call may be slow)
and finds the nearest current fact of the owner with a similar key (normalised key tokens,
one key's tokens within the other's or half of them shared) or the same value. The decision
is applied under the row lock by `_fact_cross_key_apply`; a fact closed meanwhile turns it
into an `add`. Same-key remembering is untouched (facts.services.remember).

The rule without a model, for a key holding the other's words (`city`, `home_city`): the same
value is a restatement (`noop`, a confirmation of the stored fact), another value a newer
value (`supersede`). Keys that only share some words, or the same value under an unrelated
key, are kept alongside (`add`): `sister: Ana` and `mother: Ana`, `local_time_zone` and
`get_local_time`, are two facts each.
"""

import re

from django.db.models import F

from core.lib.consolidation import (
    DECISION_ADD,
    DECISION_NOOP,
    DECISION_SUPERSEDE,
    REPLACING,
    Decision,
    claim_decide,
)
from core.models import AuditEvent
from core.services import audit_record
from facts.models import Fact, key_normalize

KEY_SIMILARITY_FLOOR = 0.5
# Owners with many facts: only this many current facts are compared (newest first).
CANDIDATES_MAX = 200
STALE_REASON = " Stored as a new fact: the similar fact changed meanwhile."
NO_OVERWRITE_REASON = " Kept alongside: overwrite is false."
_KEY_STOP = frozenset(("the", "of", "a", "an", "my", "user", "is", "s"))


def _key_tokens(key: str) -> set[str]:
    tokens = set()
    for token in re.split(r"[^a-z0-9]+", key_normalize(key)):
        if token and token not in _KEY_STOP:
            tokens.add(token[:-1] if len(token) > 3 and token.endswith("s") else token)
    return tokens


def key_similarity(a: str, b: str) -> float:
    """1.0 when one key's tokens hold the other's (`city` in `home_city`), else their Jaccard."""
    ta, tb = _key_tokens(a), _key_tokens(b)
    if not ta or not tb:
        return 0.0
    if ta <= tb or tb <= ta:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def _text(value, encode) -> str:
    return value if isinstance(value, str) else encode(value)


def _same_value(a, b, encode) -> bool:
    return _text(a, encode).strip().casefold() == _text(b, encode).strip().casefold()


def fact_cross_key_twin(*, workspace, key: str, value, scope: str, reference: dict, encode) -> Fact | None:
    """The current fact of the owner and scope, under another key, nearest to (key, value)."""
    normalized = key_normalize(key)
    candidates = (
        Fact.objects.filter(workspace=workspace, scope=scope, valid_to__isnull=True, **reference)
        .exclude(key_normalized=normalized)
        .order_by("-valid_from")[:CANDIDATES_MAX]
    )
    best, best_score = None, 0.0
    for fact in candidates:
        score = key_similarity(fact.key, key)
        if score < KEY_SIMILARITY_FLOOR and _same_value(fact.value, value, encode):
            score = KEY_SIMILARITY_FLOOR  # Same value under an unrelated key: worth a look.
        if score >= KEY_SIMILARITY_FLOOR and score > best_score:
            best, best_score = fact, score
    return best


def _fact_rule(old: Fact, key: str, value, encode) -> tuple[str, str]:
    # Only a key that holds the other's words (`city` in `home_city`, `favorite_colors` and
    # `favorite_color`) names the same thing; keys that merely share words (`local_time_zone`,
    # `get_local_time`; `item_1`, `item_2`) are two facts unless a model says otherwise.
    similarity = key_similarity(old.key, key)
    if similarity == 1.0 and _same_value(old.value, value, encode):
        return DECISION_NOOP, f"Same value under a similar key ({old.key} ~ {key})."
    if similarity == 1.0:
        return DECISION_SUPERSEDE, f"A newer value under a similar key ({old.key} ~ {key})."
    if similarity >= KEY_SIMILARITY_FLOOR:
        return DECISION_ADD, f"A key that only shares words with {old.key}: kept as two facts."
    return DECISION_ADD, f"The same value under an unrelated key ({old.key}, {key}): kept as two facts."


def fact_cross_key_decide(
    *, workspace, key: str, value, scope: str, reference: dict, encode, overwrite: bool
) -> Decision | None:
    """The decision for a new key against its nearest current fact of another key; None when
    the key already has a current version (same-key remembering applies) or nothing is near."""
    exists = Fact.objects.filter(
        workspace=workspace, key=key, scope=scope, valid_to__isnull=True, **reference
    ).exists()
    if exists:
        return None
    old = fact_cross_key_twin(
        workspace=workspace, key=key, value=value, scope=scope, reference=reference, encode=encode
    )
    if old is None:
        return None
    decision = claim_decide(
        workspace=workspace,
        old_id=old.pk,
        old_text=f"{old.key}: {_text(old.value, encode)}",
        new_text=f"{key}: {_text(value, encode)}",
        old_when=f"stored {old.valid_from:%Y-%m-%d}",
        kind="profile fact (key: value)",
        rule=lambda: _fact_rule(old, key, value, encode),
    )
    if not overwrite and decision.decision in REPLACING:
        decision = Decision(DECISION_ADD, decision.reason + NO_OVERWRITE_REASON, decision.by, decision.old)
    return decision


def _audit(*, workspace, actor, fact_id, decision: Decision, new) -> dict:
    record = decision.record(new=new)
    record.pop("similarity", None)
    audit_record(
        workspace=workspace,
        actor=actor,
        action=AuditEvent.Action.UPDATE,
        entity_type="fact",
        entity_id=fact_id,
        changes=record,
    )
    return record


def _fact_cross_key_old(decision: Decision) -> Fact | None:
    """The stored fact of `decision`, locked, if it is still current."""
    return Fact.objects.select_for_update().filter(pk=decision.old, valid_to__isnull=True).first()


def _fact_noop_confirm(*, old: Fact, decision: Decision, now, confirm_rate: float, actor) -> dict:
    raised = old.confidence + (1 - old.confidence) * confirm_rate
    # updated_at too, as a same-key confirmation's save does: retention ages facts by it.
    Fact.objects.filter(pk=old.pk).update(
        times_confirmed=F("times_confirmed") + 1,
        confidence=round(min(1.0, raised), 6),
        last_confirmed_at=now,
        updated_at=now,
    )
    old.refresh_from_db()
    return _audit(workspace=old.workspace, actor=actor, fact_id=old.pk, decision=decision, new=None)


def _fact_close(*, old: Fact, new: Fact, decision: Decision, now, actor) -> dict:
    """Close `old` in favour of `new` (update or supersede), audited on `old`."""
    contradicted = 1 if decision.decision == DECISION_SUPERSEDE else 0
    Fact.objects.filter(pk=old.pk).update(
        valid_to=now,
        superseded_by=new,
        times_contradicted=F("times_contradicted") + contradicted,
        updated_at=now,
    )
    old.refresh_from_db()
    return _audit(workspace=old.workspace, actor=actor, fact_id=old.pk, decision=decision, new=new.pk)


def _stale(decision: Decision) -> Decision:
    return Decision(DECISION_ADD, decision.reason + STALE_REASON, decision.by, decision.old)
