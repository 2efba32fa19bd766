"""Purge by source: delete what was derived from one thread or one message (episodic entries,
facts, learned procedures not yet approved), in one transaction, each row audited."""

from django.db import transaction

from core.access import Principal, require_write
from core.models import AuditEvent
from core.services import audit_record, audit_record_deletes
from facts.models import Fact
from facts.services import facts_rows_delete
from identities.services import memory_users_hold
from provenance.selectors import derived_from_source
from threads.models import Message, Thread

AUDIT_ENTITY = {"entries": "episodic_entry", "facts": "fact", "procedures": "procedure"}


def _delete(model, ids: list) -> None:
    if model is Fact:
        # A person's preferences mirror their user_preference facts: rebuilt after.
        facts_rows_delete(ids=ids)
    else:
        model.objects.filter(pk__in=ids).delete()


def derived_purge(*, principal: Principal, thread: Thread, message: Message | None = None) -> dict:
    """Delete everything derived from `thread` (or `message`) that the principal may delete;
    returns the counts per kind. The thread and its messages stay."""
    require_write(principal)
    counts = {}
    with transaction.atomic():
        derived = derived_from_source(principal=principal, thread=thread, message=message)
        # The people first, as an erasure or a merge locks them before their rows: the purge
        # rebuilds their preferences (an UPDATE of the person) after it locked their entries
        # and facts, and an erasure that locked the person meanwhile and then waited for those
        # rows closed a cycle with it. Held, an erasure or merge under way is waited for
        # (its rows are then gone or moved), and one after waits for this purge.
        memory_users_hold(
            ids=set(derived["entries"].values_list("memory_user_id", flat=True))
            | set(derived["facts"].exclude(memory_user=None).values_list("memory_user_id", flat=True))
        )
        for name, rows in derived.items():
            # Key order: two purges of one source lock its rows in the same order.
            ids = list(rows.order_by("pk").select_for_update(of=("self",)).values_list("pk", flat=True))
            if ids:
                _delete(rows.model, ids)
                audit_record_deletes(
                    workspace=principal.workspace,
                    actor=principal.actor,
                    entity_type=AUDIT_ENTITY[name],
                    ids=ids,
                )
            counts[name] = len(ids)
        audit_record(
            workspace=principal.workspace,
            actor=principal.actor,
            action=AuditEvent.Action.DELETE,
            entity_type="source_purge",
            entity_id=message.pk if message is not None else thread.pk,
            changes={"thread": str(thread.pk), "message": str(message.pk) if message else None, **counts},
        )
    return counts
