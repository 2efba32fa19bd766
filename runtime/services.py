"""Context assembly: one call per agent turn.

`context_assemble` resolves who is talking (a memory user by id, or by channel identity,
found or created), the thread (by id, or resolved for agent + person + chat id), optionally
appends the incoming user message (idempotently), then builds the context with
`runtime.selectors.context_build`. The append and the identification are the only writes.
"""

from dataclasses import dataclass

from django.db import transaction

from core.access import Principal, agent_resolve, require_write
from core.errors import ApplicationError, ConflictError, NotFoundError
from runtime.selectors import ContextResult, context_build
from threads.selectors import MemoryContext, memory_scope

PERSON_AMBIGUOUS = "Name the person by `memory_user` or by `channel` + `external_id`, not both."
IDENTITY_INCOMPLETE = "`channel` and `external_id` go together."
APPEND_NEEDS_MESSAGE = "Send the `message` to append."
APPEND_NEEDS_THREAD = "Appending needs a thread: pass `thread`, or a person or chat id to resolve one."
MEMORY_USER_NOT_FOUND = "Memory user not found."
THREAD_NOT_FOUND = "Thread not found."
THREAD_OTHER_PERSON = "This thread belongs to another person."
IDEMPOTENCY_KEY_REUSED = (
    "This idempotency key already stored a different message in this thread; "
    "send a new key with a new message."
)


def replayed_messages_check(*, sent: list[dict], stored: list) -> None:
    """Refuse an idempotency key that comes back with another message.

    `threads.services.thread_append_messages` answers a known key with the message stored
    under it (`duplicate`); a retry sends that same message again, so anything else under the
    key is a new message the caller would lose without noticing.
    """
    for message, row in zip(sent, stored, strict=True):
        if not getattr(row, "duplicate", False):
            continue
        again = (message["role"], message.get("content", ""), message.get("node_id", ""))
        if (row.role, row.content, row.node_id or "") != again:
            raise ConflictError(IDEMPOTENCY_KEY_REUSED, fields={"idempotency_key": [IDEMPOTENCY_KEY_REUSED]})


@dataclass(frozen=True)
class ContextRequest:
    agent: str | None = None
    memory_user: object = None
    channel: str = ""
    external_id: str = ""
    profile: dict | None = None
    thread: object = None
    channel_chat_id: str = ""
    message: str = ""
    token_budget: int = 4000
    append: bool = False
    idempotency_key: str = ""
    node: str | None = None
    memory_mode: str | None = None
    allocation: dict | None = None
    include: tuple = ()
    system_as: str = "system"
    content_format: str = "plain"
    tool_format: str = "native"

    @classmethod
    def from_validated(cls, data: dict) -> "ContextRequest":
        """Build from `ContextAssembleApi.InputSerializer.validated_data` (REST and MCP)."""
        return cls(
            agent=data.get("agent"),
            memory_user=data.get("memory_user"),
            channel=data.get("channel", ""),
            external_id=data.get("external_id", ""),
            profile=data.get("profile"),
            thread=data.get("thread"),
            channel_chat_id=data.get("channel_chat_id", ""),
            message=data.get("message", ""),
            token_budget=data.get("token_budget", 4000),
            append=data.get("append", False),
            idempotency_key=data.get("idempotency_key", ""),
            node=data.get("node"),
            memory_mode=data.get("memory_mode"),
            allocation=data.get("allocation"),
            include=tuple(data.get("include") or ()),
            system_as=data.get("system_as", "system"),
            content_format=data.get("content_format", "plain"),
            tool_format=data.get("tool_format", "native"),
        )


def _invalid(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def _memory_user(principal: Principal, request: ContextRequest):
    from identities.models import ChannelIdentity
    from identities.selectors import memory_user_in_scope, memory_user_resolve_merged

    if request.memory_user and (request.channel or request.external_id):
        raise _invalid("memory_user", PERSON_AMBIGUOUS)
    if request.memory_user:
        user = memory_user_in_scope(principal=principal, memory_user_id=request.memory_user)
        return memory_user_resolve_merged(memory_user=user)
    if not request.channel and not request.external_id:
        return None
    if not (request.channel and request.external_id):
        raise _invalid("external_id" if request.channel else "channel", IDENTITY_INCOMPLETE)
    if principal.can_write:
        from identities.services import memory_user_identify

        return memory_user_identify(
            workspace=principal.workspace,
            channel=request.channel,
            external_id=request.external_id,
            profile=request.profile,
            actor=principal.actor,
        ).memory_user
    # A read-only key may read the context of a person it cannot create.
    identity = (
        ChannelIdentity.objects.select_related("memory_user")
        .filter(
            workspace=principal.workspace, channel=request.channel.lower(), external_id=request.external_id
        )
        .first()
    )
    if identity is None:
        raise NotFoundError(MEMORY_USER_NOT_FOUND, fields={"external_id": [MEMORY_USER_NOT_FOUND]})
    return memory_user_resolve_merged(memory_user=identity.memory_user)


def _thread(principal: Principal, request: ContextRequest, *, agent, memory_user):
    from threads.models import Thread
    from threads.services import thread_resolve

    if request.thread:
        thread = (
            Thread.objects.select_related("agent", "memory_user")
            .filter(workspace=principal.workspace, agent=agent, pk=request.thread)
            .first()
        )
        if thread is None:
            raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_NOT_FOUND]})
        if memory_user is not None and thread.memory_user_id not in (None, memory_user.pk):
            owner = thread.memory_user
            if owner is None or owner.merged_into_id != memory_user.pk:
                raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_OTHER_PERSON]})
        return thread
    if (memory_user is None and not request.channel_chat_id) or not principal.can_write:
        return None
    return thread_resolve(
        workspace=principal.workspace,
        agent=agent,
        memory_user=memory_user,
        channel=request.channel,
        channel_chat_id=request.channel_chat_id,
    )


def _turn_thread(principal: Principal, request: ContextRequest):
    """The named thread with its agent and person, in one query, for the usual turn (thread
    and agent named, the person by id or not at all, not merged away); None sends the
    request down the general path, which also produces the precise errors."""
    from threads.selectors import thread_for_turn

    if not request.thread or request.channel or request.external_id:
        return None
    if principal.agent is not None:
        agent = agent_resolve(principal, request.agent)
        thread = thread_for_turn(workspace=principal.workspace, thread_id=request.thread, agent=agent)
    elif request.agent:
        thread = thread_for_turn(
            workspace=principal.workspace, thread_id=request.thread, agent_slug=request.agent
        )
    else:
        return None
    if thread is None:
        return None
    if request.memory_user and str(thread.memory_user_id) != str(request.memory_user):
        return None
    if thread.memory_user is not None and thread.memory_user.merged_into_id is not None:
        return None
    return thread


def context_assemble(*, principal: Principal, request: ContextRequest) -> ContextResult:
    """Everything the agent sends to its model this turn, within `request.token_budget`.

    With `append`, the incoming message is stored first (a retried call with the same
    `idempotency_key` stores it once) so the history window ends with it. Registering the
    agent, identification, thread resolution and the append commit together or not at all.
    """
    if request.append:
        require_write(principal)
        if not request.message:
            raise _invalid("message", APPEND_NEEDS_MESSAGE)
    appended = None
    thread = _turn_thread(principal, request)
    with transaction.atomic():
        if thread is not None:
            agent, memory_user = thread.agent, thread.memory_user
        else:
            # Registered in this transaction: a refused person, thread or append leaves no agent.
            agent = agent_resolve(principal, request.agent, create=principal.can_write)
        # The node a named node reads and appends to: none in `conversation` memory mode.
        memory_mode, node = memory_scope(agent=agent, node=request.node, memory_mode=request.memory_mode)
        if thread is None:
            memory_user = _memory_user(principal, request)
            thread = _thread(principal, request, agent=agent, memory_user=memory_user)
        if memory_user is None and thread is not None and thread.memory_user_id:
            from identities.selectors import memory_user_resolve_merged

            memory_user = memory_user_resolve_merged(memory_user=thread.memory_user)
        if request.append:
            if thread is None:
                raise _invalid("thread", APPEND_NEEDS_THREAD)
            from threads.services import thread_append_messages

            message = {"role": "user", "content": request.message}
            if request.idempotency_key:
                message["idempotency_key"] = request.idempotency_key
            if node:
                message["node_id"] = node
            appended = thread_append_messages(thread=thread, messages=[message], actor=principal.actor)[0]
            # Inside the transaction: a refused retry leaves no new person or thread behind.
            replayed_messages_check(sent=[message], stored=[appended])
    context = MemoryContext(
        workspace=principal.workspace, agent=agent, memory_user=memory_user, thread=thread
    )
    return context_build(
        context=context,
        message=request.message,
        token_budget=request.token_budget,
        message_in_history=appended is not None,
        appended=appended,
        channel=request.channel,
        node=node,
        memory_mode=memory_mode,
        allocation=request.allocation,
        include=request.include,
        system_as=request.system_as,
        content_format=request.content_format,
        tool_format=request.tool_format,
    )
