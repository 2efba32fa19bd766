"""Chat messages the server adds to what a model is sent (the compaction summary, the recalled
block, a turn's context blocks), in the role the caller asks for."""

from core.errors import ApplicationError

SYSTEM_AS_MODES = ("system", "user")
SYSTEM_AS_INVALID = "system_as must be system or user."


def system_as_clean(system_as: str) -> str:
    if system_as not in SYSTEM_AS_MODES:
        raise ApplicationError(SYSTEM_AS_INVALID, fields={"system_as": ["Must be system or user."]})
    return system_as


def chat_system_message(*, content: str, stable_id: str, system_as: str) -> dict:
    """A system message, or with `system_as="user"` a user message for providers that ignore
    (or refuse a second) system role. The user form carries `stable_id`, the same for every
    turn of the thread, so a client that keeps its transcript replaces the previous copy
    instead of piling one up per turn."""
    if system_as_clean(system_as) == "user":
        return {"id": stable_id, "role": "user", "content": content}
    return {"role": "system", "content": content}
