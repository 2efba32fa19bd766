"""Deleting facts (one statement for any number of rows) and counting reads."""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.access import Principal, references_resolve
from core.errors import NotFoundError
from facts.models import Fact
from facts.services.access import fact_delete_authorize
from facts.services.memory_users import facts_people_hold, memory_user_preferences_sync

_DELETE_SQL = """
WITH unlinked AS (
    -- Histories point at their successors (SET NULL in Django, not in the database; the
    -- deferred foreign key is checked at commit, after this).
    UPDATE facts_fact SET superseded_by_id = NULL
    WHERE superseded_by_id = ANY(%(ids)s::uuid[]) AND NOT (id = ANY(%(ids)s::uuid[]))
), unembedded AS (
    -- The database cascades too (facts 0007), which also catches a vector committed while
    -- this statement waited for the fact's row lock; this delete covers the rest in one pass.
    DELETE FROM facts_factembedding e USING facts_fact f
    WHERE e.fact_id = f.id AND f.workspace_id = %(workspace)s AND f.id = ANY(%(ids)s::uuid[])
), deleted AS (
    DELETE FROM facts_fact
    WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s::uuid[]) {agent_condition}
    RETURNING id, key, scope, memory_user_id, fact_type
), audited AS (
    INSERT INTO core_auditevent (workspace_id, at, actor, action, entity_type, entity_id, changes)
    SELECT %(workspace)s, now(), %(actor)s, 'delete', 'fact', id::text,
           jsonb_build_object('key', key, 'scope', scope)
    FROM deleted
)
SELECT count(*),
       coalesce(array_agg(DISTINCT memory_user_id) FILTER (
           WHERE fact_type = 'user_preference' AND memory_user_id IS NOT NULL), '{{}}')
FROM deleted
"""


def _facts_delete(*, workspace, ids: list, actor: str, agent=None) -> dict:
    """Delete the facts in `ids` (of `workspace`, and of `agent` or agent-less when given)
    and audit each one; all or nothing: when a row is missing, raise and roll back.

    One statement deletes, audits and reports: through the ORM, 10,000 rows cost ~3 s of
    per-row Python (collector, audit objects, 10,000 bound parameters per query); as an
    array parameter and a data-modifying CTE they take ~0.3 s. Must run in a transaction.
    """
    from django.db import connection

    ids = [str(pk) for pk in ids]
    agent_condition = "AND (agent_id IS NULL OR agent_id = %(agent)s)" if agent is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(
            _DELETE_SQL.format(agent_condition=agent_condition),
            {"workspace": workspace.pk, "ids": ids, "actor": actor, "agent": agent.pk if agent else None},
        )
        deleted, preference_users = cursor.fetchone()
    if deleted != len(ids):
        raise NotFoundError(FACTS_NOT_FOUND, fields={"ids": ["Unknown id."]})
    if preference_users:
        memory_user_preferences_sync(memory_user_ids=preference_users)
    return {"facts": deleted}


def facts_rows_delete(*, ids: list) -> None:
    """Delete the facts `ids`, chosen, locked and audited by the caller (retention, purge by
    source), and rebuild the `preferences` of the people whose user preferences they were: the
    memory-user API and the agent's context read that mirror, not the facts."""
    people = list(
        Fact.objects.filter(
            pk__in=ids,
            scope=Fact.Scope.USER,
            fact_type=Fact.FactType.USER_PREFERENCE,
            memory_user__isnull=False,
        )
        .values_list("memory_user_id", flat=True)
        .distinct()
    )
    Fact.objects.filter(pk__in=ids).delete()
    memory_user_preferences_sync(memory_user_ids=people)


FACTS_NOT_FOUND = "Some of these facts do not exist."
# What fact_delete_authorize reads.
_AUTHORIZE_FIELDS = ("pk", "scope", "workspace_id", "agent_id", "review", "review_agent_id")


def fact_delete(*, fact: Fact, actor: str, principal: Principal | None = None) -> dict:
    """Delete one version. Deleting the current version forgets the key in that scope; its
    history stays listable until deleted too. A global fact is not an agent-bound key's to
    delete (`principal`): 403, except its own proposal still held for review
    (facts.services.access.fact_delete_authorize)."""
    with transaction.atomic():
        facts_people_hold(fact_ids=[fact.pk])
        # Checked on the locked row: a proposal approved meanwhile is the current global value.
        locked = Fact.objects.select_for_update().only(*_AUTHORIZE_FIELDS).filter(pk=fact.pk).first()
        if locked is None:
            raise NotFoundError(FACTS_NOT_FOUND, fields={"ids": ["Unknown id."]})
        fact_delete_authorize(fact=locked, principal=principal)
        return _facts_delete(workspace=fact.workspace, ids=[fact.pk], actor=actor)


def fact_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Delete every fact in `ids`, or nothing: an id the principal cannot see is a 404.

    The visibility rule is facts.selectors.fact_scope_for_principal's: the workspace, and for
    an agent-bound key, agent-less facts or the key's agent's. An agent-bound key that names
    a global fact deletes nothing: 403 (facts.services.access), after the 404 of a missing id;
    its own proposal still held for review is the exception.
    """
    ids = list(dict.fromkeys(ids))
    with transaction.atomic():
        facts_people_hold(fact_ids=ids)
        if principal.agent is not None:
            # A fact never changes scope, so the scope read here is the one deleted below.
            # Locked: a held proposal approved meanwhile is the current global value.
            found = references_resolve(
                Fact.objects.select_for_update().only(*_AUTHORIZE_FIELDS),
                principal,
                ids,
                shared=True,
                not_found=NotFoundError(FACTS_NOT_FOUND, fields={"ids": ["Unknown id."]}),
            )
            for fact in found:
                fact_delete_authorize(fact=fact, principal=principal)
        return _facts_delete(
            workspace=principal.workspace, ids=ids, actor=actor or principal.actor, agent=principal.agent
        )


def fact_touch(*, fact_ids) -> None:
    """Count a read (access_count, last_accessed_at) without loading the rows."""
    if fact_ids:
        Fact.objects.filter(pk__in=list(fact_ids)).update(
            access_count=F("access_count") + 1, last_accessed_at=timezone.now()
        )
