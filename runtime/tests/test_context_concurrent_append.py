"""Concurrent first turns of a new person with one idempotency key: one person, one thread,
one message; the calls that sent another message under the key are refused."""

import threading

from django.db import connection
from rest_framework.test import APIClient

from identities.models import ChannelIdentity
from threads.models import Message, Thread

URL = "/api/v1/context/"
CALLS = 4


def _race(key: str, messages: list[str]) -> list:
    barrier = threading.Barrier(len(messages))
    responses = [None] * len(messages)

    def turn(index: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        body = {
            "agent": "concierge",
            "channel": "telegram",
            "external_id": "777",
            "message": messages[index],
            "append": True,
            "idempotency_key": "turn-1",
        }
        try:
            barrier.wait()
            responses[index] = client.post(URL, body, format="json")
        finally:
            connection.close()

    workers = [threading.Thread(target=turn, args=(index,)) for index in range(len(messages))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return responses


def test_concurrent_retries_store_one_person_thread_and_message(fresh_workspace):
    responses = _race(fresh_workspace["key"], ["Hello, I am new here."] * CALLS)
    assert [r.status_code for r in responses] == [200] * CALLS, [r.content for r in responses]
    assert len({r.json()["appended_message"] for r in responses}) == 1
    identities = ChannelIdentity.objects.filter(workspace=fresh_workspace["workspace"], external_id="777")
    assert identities.count() == 1
    thread = Thread.objects.get(workspace=fresh_workspace["workspace"])
    assert Message.objects.filter(thread=thread).count() == 1


def test_concurrent_calls_with_other_messages_under_one_key_store_one(fresh_workspace):
    responses = _race(fresh_workspace["key"], [f"Message number {index}" for index in range(CALLS)])
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * (CALLS - 1), [r.content for r in responses]
    thread = Thread.objects.get(workspace=fresh_workspace["workspace"])
    [stored] = Message.objects.filter(thread=thread)
    winner = next(r for r in responses if r.status_code == 200)
    assert winner.json()["appended_message"] == str(stored.pk)
