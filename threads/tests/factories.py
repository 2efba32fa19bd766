from threads.services import thread_append_messages, thread_create


def make_thread(*, workspace, agent, **kwargs):
    return thread_create(workspace=workspace, agent=agent, **kwargs)


def append(thread, *messages, **common):
    """Append messages given as (role, content) pairs or dicts; returns the stored messages."""
    payload = []
    for item in messages:
        if isinstance(item, tuple):
            item = {"role": item[0], "content": item[1]}
        payload.append({**common, **item})
    return thread_append_messages(thread=thread, messages=payload)
