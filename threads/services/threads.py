"""Writes to threads themselves: create, resolve by conversation, update."""

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import ApplicationError, NotFoundError
from core.models import Agent
from core.services import audit_record
from threads.models import Thread

MEMORY_USER_UNKNOWN = "Unknown memory user."
METADATA_INVALID = "Metadata must be a JSON object."


def memory_user_canonical(memory_user):
    """The user a merged identity now belongs to (None stays None)."""
    from identities.selectors import memory_user_resolve_merged

    return None if memory_user is None else memory_user_resolve_merged(memory_user=memory_user)


def channel_normalize(channel) -> str:
    """A channel name as identities store it (identities.services: trimmed, lowercase), so a
    thread's channel equals its person's identity and one `channel` filter finds both."""
    return channel.strip().lower() if isinstance(channel, str) else ""


def thread_channel(*, channel: str = "", memory_user=None) -> str:
    """The channel a thread opened now records: the one the caller names, else the one channel
    its person was identified through. A person known on several channels gives none: which of
    them the conversation is on is not known. Every path that opens a thread (thread_create,
    and thread_resolve through it: the thread API, the context call and tool) records it here."""
    channel = channel_normalize(channel)
    if channel or memory_user is None:
        return channel
    from identities.models import ChannelIdentity
    from identities.selectors import memory_user_merged_subquery

    # Identities of records merged into the person count too (older data was never re-pointed).
    channels = list(
        ChannelIdentity.objects.filter(
            memory_user_id__in=memory_user_merged_subquery(memory_user=memory_user)
        )
        .order_by()
        .values_list("channel", flat=True)
        .distinct()[:2]
    )
    return channels[0] if len(channels) == 1 else ""


def thread_create(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> Thread:
    memory_user = memory_user_canonical(memory_user)
    if metadata is not None and not isinstance(metadata, dict):
        raise ApplicationError(METADATA_INVALID, fields={"metadata": [METADATA_INVALID]})
    if agent.workspace_id != workspace.pk:
        raise NotFoundError("Agent not found.")
    if memory_user is not None and memory_user.workspace_id != workspace.pk:
        raise NotFoundError(MEMORY_USER_UNKNOWN, fields={"memory_user": [MEMORY_USER_UNKNOWN]})
    thread = Thread(
        workspace=workspace,
        agent=agent,
        memory_user=memory_user,
        channel=thread_channel(channel=channel, memory_user=memory_user),
        channel_chat_id=channel_chat_id or "",
        client_key=client_key or "",
        title=title or "",
        metadata=metadata or {},
        model=model or "",
    )
    thread.full_clean(exclude=["workspace", "agent", "memory_user"], validate_unique=False)
    thread.save()
    return thread


def thread_resolve(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> Thread:
    """The thread of (agent, memory user, channel chat id), created on first use.

    With no chat id, the same person talking to the same agent continues one thread across
    runs and channels. With neither a user nor a chat id, `client_key` identifies the thread;
    with none of the three there is nothing to resolve by and a new thread is created.
    Concurrent resolves of the same conversation return the same thread (advisory lock).
    """
    return thread_resolve_or_create(
        workspace=workspace,
        agent=agent,
        memory_user=memory_user,
        channel=channel,
        channel_chat_id=channel_chat_id,
        client_key=client_key,
        title=title,
        metadata=metadata,
        model=model,
    )[0]


def thread_resolve_or_create(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> tuple[Thread, bool]:
    """`thread_resolve`, also saying whether the thread was created."""
    memory_user = memory_user_canonical(memory_user)
    if memory_user is None and not channel_chat_id and not client_key:
        thread = thread_create(
            workspace=workspace, agent=agent, channel=channel, title=title, metadata=metadata, model=model
        )
        return thread, True
    lookup = Q(workspace=workspace, agent=agent)
    if memory_user is not None:
        # Threads of records merged into this user continue too, along a chain as well (older
        # data: A into B, later B into C, A's threads never re-pointed).
        from identities.selectors import memory_user_merged_subquery

        merged = memory_user_merged_subquery(memory_user=memory_user)
        lookup &= Q(channel_chat_id=channel_chat_id or "", memory_user_id__in=merged)
        identity = f"{agent.pk}:{memory_user.pk}:{channel_chat_id}"
    elif channel_chat_id:
        lookup &= Q(memory_user__isnull=True, channel_chat_id=channel_chat_id)
        identity = f"{agent.pk}::{channel_chat_id}"
    else:
        lookup &= Q(memory_user__isnull=True, channel_chat_id="", client_key=client_key)
        identity = f"{agent.pk}:key:{client_key}"
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"threads:{identity}"])
        thread = Thread.objects.filter(lookup).order_by("-last_activity_at").first()
        if thread is not None:
            # The lookup matched `agent`: callers read the thread's agent (its memory settings)
            # without loading it again.
            thread.agent = agent
            _thread_channel_fill(thread, channel)
            return thread, False
        thread = thread_create(
            workspace=workspace,
            agent=agent,
            memory_user=memory_user,
            channel=channel,
            channel_chat_id=channel_chat_id,
            client_key=client_key,
            title=title,
            metadata=metadata,
            model=model,
        )
        return thread, True


def _thread_channel_fill(thread: Thread, channel) -> None:
    """A thread opened with no channel known takes the first one a resolve names; a channel
    once set stays (compare-and-set: a concurrent fill wins, this one changes nothing)."""
    channel = channel_normalize(channel)
    if thread.channel or not channel:
        return
    if Thread.objects.filter(pk=thread.pk, channel="").update(channel=channel, updated_at=timezone.now()):
        thread.channel = channel
    else:
        thread.channel = Thread.objects.filter(pk=thread.pk).values_list("channel", flat=True).first() or ""


def thread_update(*, thread: Thread, actor: str = "system", **changes) -> Thread:
    """Change title, metadata, model, channel or client key; audited."""
    allowed = {"title", "metadata", "model", "channel", "client_key"}
    if changes.get("metadata") is not None and not isinstance(changes["metadata"], dict):
        raise ApplicationError(METADATA_INVALID, fields={"metadata": [METADATA_INVALID]})
    if changes.get("channel") is not None:
        changes["channel"] = channel_normalize(changes["channel"])
    changed = {}
    for key, value in changes.items():
        if key not in allowed or value is None:
            continue
        if getattr(thread, key) != value:
            changed[key] = value
            setattr(thread, key, value)
    if not changed:
        return thread
    thread.full_clean(exclude=["workspace", "agent", "memory_user"], validate_unique=False)
    thread.save(update_fields=[*changed, "updated_at"])
    audit_record(
        workspace=thread.workspace,
        actor=actor,
        action="update",
        entity_type="thread",
        entity_id=thread.pk,
        changes={k: (True if k == "metadata" else v) for k, v in changed.items()},
    )
    return thread
