"""Listeners told, after commit, that a workspace's audit trail grew.

The audit trail is written in the same transaction as every change of curated memory, so
it is the outbox of change events: an app above core (webhooks) registers a listener in
its `AppConfig.ready()` and reads the new audit events itself. Listeners get only the
workspace id and must be cheap; a listener that fails is logged and never fails the write.
"""

import logging
from collections.abc import Callable

from django.db import transaction

logger = logging.getLogger(__name__)

_listeners: dict[str, tuple[Callable[[object], None], frozenset[str] | None]] = {}


def audit_listener_register(
    name: str, listener: Callable[[object], None], *, entity_types: set[str] | None = None
) -> None:
    """Call `listener(workspace_id)` after each commit that wrote audit events (with
    `entity_types`: only events of those entity types); a name registered again replaces
    its listener (ready() may run twice in tests)."""
    _listeners[name] = (listener, frozenset(entity_types) if entity_types is not None else None)


def audit_recorded(workspace_id, entity_type: str) -> None:
    """Audit events of `entity_type` were written for `workspace_id` in this transaction."""
    listeners = [
        (name, listener)
        for name, (listener, entity_types) in _listeners.items()
        if entity_types is None or entity_type in entity_types
    ]
    if listeners:
        transaction.on_commit(lambda: _notify(workspace_id, listeners))


def _notify(workspace_id, listeners) -> None:
    for name, listener in listeners:
        try:
            listener(workspace_id)
        except Exception:
            logger.exception("Audit listener %s failed for workspace %s", name, workspace_id)
