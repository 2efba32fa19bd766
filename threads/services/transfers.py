"""Transfers: control of a thread handed from one agent to another, recorded and audited."""

from django.db import transaction

from core.access import Principal, agent_resolve
from core.errors import ApplicationError, NotFoundError
from core.models import Agent
from core.services import audit_record
from threads.models import Message, Thread, Transfer

TRANSFER_MESSAGE_UNKNOWN = "Unknown message for this thread."
TRANSFER_NO_MESSAGES = "The thread has no message of its main conversation to transfer at."
TRANSFER_SAME_AGENT = "from_agent and to_agent must differ."
TRANSFER_REASON_MAX_CHARS = 2000


def transfer_record(
    *,
    principal: Principal,
    thread: Thread,
    from_agent: str | None,
    to_agent: str,
    reason: str = "",
    message_id=None,
    shared: bool = False,
) -> Transfer:
    """Record that `from_agent` handed the thread to `to_agent` after `message_id`.

    Both agents are slugs of the caller's workspace. The sender is resolved like any agent a
    request acts for: an agent-bound key acts only for its own agent (the default), so it may
    record only transfers *from* it, and naming another sender is a 404. The receiver must
    exist for a bound key; a workspace key registers an unknown one, as agents appear on
    first use elsewhere. `message_id` defaults to the newest message
    of the main conversation; a message of another thread answers as an unknown one.
    """
    sender = agent_resolve(principal, from_agent, create=False)
    if sender.slug == to_agent:
        raise ApplicationError(TRANSFER_SAME_AGENT, fields={"to_agent": [TRANSFER_SAME_AGENT]})
    messages = Message.objects.filter(thread=thread)
    if message_id is None:
        message = messages.filter(node_id="").order_by("-seq").only("id", "depth").first()
        if message is None:
            raise ApplicationError(TRANSFER_NO_MESSAGES, fields={"message": [TRANSFER_NO_MESSAGES]})
    else:
        message = messages.filter(pk=message_id).only("id", "depth").first()
        if message is None:
            raise ApplicationError(TRANSFER_MESSAGE_UNKNOWN, fields={"message": [TRANSFER_MESSAGE_UNKNOWN]})
    # The message before the receiver: an id out of scope answers the same whichever agent is named.
    if principal.agent is not None:
        # The receiver is another agent of the workspace, out of a bound key's own scope;
        # registering one is a workspace-level act, so it must exist already.
        receiver = Agent.objects.filter(workspace=principal.workspace, slug=to_agent).first()
        if receiver is None:
            raise NotFoundError(f"Agent '{to_agent}' not found.", fields={"to_agent": ["Unknown agent."]})
    else:
        receiver = agent_resolve(principal, to_agent)
    transfer = Transfer(
        workspace=thread.workspace,
        thread=thread,
        from_agent=sender.slug,
        to_agent=receiver.slug,
        reason=reason,
        message_id=message.pk,
        message_depth=message.depth,
        shared=shared,
        actor=principal.actor,
    )
    transfer.full_clean()
    with transaction.atomic():
        transfer.save()
        audit_record(
            workspace=thread.workspace,
            actor=principal.actor,
            action="create",
            entity_type="thread_transfer",
            entity_id=transfer.pk,
            changes={
                "thread": str(thread.pk),
                "from_agent": sender.slug,
                "to_agent": receiver.slug,
                "message": str(message.pk),
                "shared": shared,
            },
        )
    return transfer
