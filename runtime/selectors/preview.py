"""`context_preview`: what POST /api/v1/context/ would answer for an agent, a person, a thread
and a message, with why each item was chosen, built by the same `context_build` (with
`explain`) and writing nothing.

The API may write on the way to the context: it registers an unknown agent, identifies a
person by channel identity, creates the person's thread, appends the message. The preview
does none of these: it names rows that exist, finds the thread the API would continue
without creating one, and reads inside a read-only transaction that is rolled back, so
PostgreSQL itself refuses any write a part of the path might attempt and nothing registered
to run on commit (a task, a counter) ever runs.
"""

from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Q

from core.access import Principal
from core.errors import NotFoundError
from runtime.selectors.build import ContextResult, context_build, context_result_data
from threads.selectors import THREAD_NOT_FOUND, memory_context_resolve, memory_scope

THREAD_OTHER_PERSON = "This thread belongs to another person."


@dataclass(frozen=True)
class ContextPreview:
    result: ContextResult
    # The body POST /api/v1/context/ answers (append false), and the explanation of each block.
    data: dict
    explanation: dict
    # True when no thread was named and the person's continuing thread was found, as the API
    # finds it; None there means the API would start an empty thread.
    thread_found: bool


def _continuing_thread(*, workspace, agent, memory_user):
    """The thread POST /context/ continues for (agent, person) when no thread or chat id is
    named, the lookup of `threads.services.thread_resolve` without its create."""
    from threads.models import Thread

    return (
        Thread.objects.select_related("agent", "memory_user")
        .filter(workspace=workspace, agent=agent, channel_chat_id="")
        .filter(Q(memory_user=memory_user) | Q(memory_user__merged_into=memory_user))
        .order_by("-last_activity_at")
        .first()
    )


def context_preview(
    *,
    principal: Principal,
    agent: str,
    memory_user=None,
    thread=None,
    node: str | None = None,
    message: str = "",
    token_budget: int = 4000,
) -> ContextPreview:
    """The context of one turn as the API would assemble it, explained; never a write.

    Ids resolve in the principal's scope: a row of another workspace is the same 404 as a
    missing one. A thread of another person than the one named is a 404 too, as in the API.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        context = memory_context_resolve(
            principal=principal, agent=agent, memory_user=memory_user, thread=thread
        )
        person = context.memory_user
        if context.thread is not None and person is not None and memory_user:
            owner = context.thread.memory_user
            if owner is not None and owner.pk != person.pk and owner.merged_into_id != person.pk:
                raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_OTHER_PERSON]})
        found = False
        if context.thread is None and person is not None:
            continuing = _continuing_thread(
                workspace=context.workspace, agent=context.agent, memory_user=person
            )
            if continuing is not None:
                context = type(context)(
                    workspace=context.workspace, agent=context.agent, memory_user=person, thread=continuing
                )
                found = True
        memory_mode, node = memory_scope(agent=context.agent, node=node, memory_mode=None)
        result = context_build(
            context=context,
            message=message,
            token_budget=token_budget,
            node=node,
            memory_mode=memory_mode,
            explain=True,
        )
        preview = ContextPreview(
            result=result,
            data=context_result_data(result),
            explanation=result.explanation,
            thread_found=found,
        )
        # Rolled back, not committed: the read-only mode ends with it (also inside a caller's
        # transaction, where a released savepoint would keep it), and so does any on-commit work.
        transaction.set_rollback(True)
    return preview
