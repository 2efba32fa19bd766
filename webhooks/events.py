"""The event catalogue: which audit events are sent to subscribers, under which type."""

# (audit entity_type, audit action) -> event type. Anything else in the audit trail
# (threads, checkpoints, members) is not an event subscribers can ask for.
EVENT_TYPES_BY_AUDIT = {
    ("episodic_entry", "create"): "entry.created",
    ("episodic_entry", "update"): "entry.updated",
    ("episodic_entry", "delete"): "entry.deleted",
    ("fact", "create"): "fact.created",
    ("fact", "update"): "fact.updated",
    ("fact", "delete"): "fact.deleted",
    ("memory_user", "create"): "person.created",
    ("memory_user", "update"): "person.updated",
    ("memory_user", "merge"): "person.merged",
    ("memory_user", "erase"): "person.erased",
    ("procedure", "create"): "procedure.created",
    ("procedure", "update"): "procedure.updated",
    ("procedure", "delete"): "procedure.deleted",
    ("episode", "create"): "episode.created",
    ("episode", "update"): "episode.updated",
    ("episode", "delete"): "episode.deleted",
}
# Sent on request (POST .../ping/) so a receiver can be checked; never subscribed to.
PING = "ping"
# An item held for an operator's review (today: a procedure learned from episodes, proposed
# inactive), whatever its tier: its audit event carries `"review": "waiting"`.
REVIEW_WAITING = "review.waiting"
# The operator's decision on a held item (docs/review.md): its audit event carries `"review"`
# set to approved, rejected or merged.
REVIEW_DECIDED = {
    "approved": "review.approved",
    "rejected": "review.rejected",
    "merged": "review.merged",
}

EVENT_TYPES = tuple(sorted({*EVENT_TYPES_BY_AUDIT.values(), REVIEW_WAITING, *REVIEW_DECIDED.values()}))
# What each audit entity is called in a payload's `data.object`.
OBJECT_NAMES = {
    "episodic_entry": "entry",
    "fact": "fact",
    "memory_user": "person",
    "procedure": "procedure",
    "episode": "episode",
}
AUDIT_ENTITY_TYPES = tuple(sorted(OBJECT_NAMES))
# The body names the delivery it belongs to, inside the signature: receivers deduplicate on
# this field, since the X-Memory-Delivery header is not signed and a captured request could be
# replayed under a new one. `id` is the event's id (the same for every subscription).
DELIVERY_ID_FIELD = "delivery_id"


def delivery_payload(payload: dict, *, delivery_id) -> dict:
    """The body sent for a delivery: its stored payload with the delivery's own id, which
    every retry repeats, so a receiver's deduplication sees one delivery."""
    return {**payload, DELIVERY_ID_FIELD: str(delivery_id)}


def event_type_for(entity_type: str, action: str, changes=None) -> str | None:
    if entity_type in OBJECT_NAMES and isinstance(changes, dict) and "review" in changes:
        review = changes["review"]
        if review == "waiting":
            return REVIEW_WAITING
        if isinstance(review, str) and review in REVIEW_DECIDED:
            return REVIEW_DECIDED[review]
    return EVENT_TYPES_BY_AUDIT.get((entity_type, action))
