"""Builders for context-assembly tests, written through the tiers' own services."""

from facts.services import fact_remember
from identities.services import memory_user_identify
from threads.services import thread_append_messages, thread_create


def person(workspace, external_id="1001", **profile):
    return memory_user_identify(
        workspace=workspace, channel="telegram", external_id=external_id, profile=profile or None
    ).memory_user


def conversation(workspace, agent, memory_user, turns):
    """A thread with `turns` (user, assistant) pairs appended in one batch."""
    thread = thread_create(workspace=workspace, agent=agent, memory_user=memory_user)
    messages = []
    for index in range(turns):
        messages.append({"role": "user", "content": f"Question {index}: what about topic {index}?"})
        messages.append({"role": "assistant", "content": f"Answer {index}: topic {index} is fine. " * 3})
    if messages:
        thread_append_messages(thread=thread, messages=messages)
    return thread


def user_fact(workspace, memory_user, key, value, fact_type="world_knowledge", **extra):
    return fact_remember(
        workspace=workspace,
        key=key,
        value=value,
        scope="user",
        memory_user=memory_user,
        fact_type=fact_type,
        **extra,
    ).fact


def session_fact(workspace, thread, key, value):
    return fact_remember(workspace=workspace, key=key, value=value, scope="session", thread=thread).fact
