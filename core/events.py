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

_listeners: dict[str, Callable[[object], None]] = {}


def audit_listener_register(name: str, listener: Callable[[object], None]) -> None:
    """Call `listener(workspace_id)` after each commit that wrote audit events; a name
    registered again replaces its listener (ready() may run twice in tests)."""
    _listeners[name] = listener


def audit_recorded(workspace_id) -> None:
    if not _listeners:
        return
    transaction.on_commit(lambda: _notify(workspace_id))


def _notify(workspace_id) -> None:
    for name, listener in list(_listeners.items()):
        try:
            listener(workspace_id)
        except Exception:
            logger.exception("Audit listener %s failed for workspace %s", name, workspace_id)
