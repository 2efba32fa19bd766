"""`episodic_entries.create` and `.create_batch` against the live server, sync and async."""

import asyncio

import pytest

from memory_client import MemoryClient
from memory_client.errors import NotFoundError, PermissionDeniedError, ValidationError


def test_create_stores_once_and_answers_the_duplicate(client):
    user = client.memory_users.identify(channel="web", external_id="c-1")["memory_user"]
    stored = client.episodic_entries.create(
        agent="assistant", memory_user=user["id"], content="Ada  is learning the cello.", metadata={"k": 1}
    )
    assert stored["created"] is True
    assert stored["content"] == "Ada is learning the cello."
    assert stored["source"] == "agent_direct" and stored["embedded"] is True
    again = client.episodic_entries.create(
        agent="assistant", memory_user=user["id"], content="ada is learning the CELLO."
    )
    assert again["created"] is False and again["reason"] == "duplicate_exact"
    assert again["id"] == stored["id"]
    found = client.episodic_entries.search(agent="assistant", memory_user=user["id"], query="cello")
    assert [hit["entry"]["id"] for hit in found["results"]] == [stored["id"]]


def test_create_refuses_bad_input_and_read_only_keys(client, live_server_url, workspace_keys):
    user = client.memory_users.identify(channel="web", external_id="c-2")["memory_user"]
    with pytest.raises(ValidationError) as caught:
        client.episodic_entries.create(
            agent="assistant", memory_user=user["id"], content="Got a dog.", source="user_assertion"
        )
    assert "evidence" in caught.value.fields
    with (
        MemoryClient(live_server_url, workspace_keys["read_only_key"], timeout=180) as read_only,
        pytest.raises(PermissionDeniedError),
    ):
        read_only.episodic_entries.create(agent="assistant", memory_user=user["id"], content="Got a dog.")
    with pytest.raises(NotFoundError):
        client.episodic_entries.create(
            agent="assistant", memory_user="00000000-0000-4000-8000-000000000000", content="Got a dog."
        )


def test_create_batch_reports_each_item_and_is_all_or_none(client):
    user = client.memory_users.identify(channel="web", external_id="c-3")["memory_user"]
    result = client.episodic_entries.create_batch(
        [
            {"content": "Ada moved to Porto in March."},
            {"content": "Ada moved to Porto in March."},
            {"content": "Ada adopted a cat.", "source": "user_assertion", "evidence": "I adopted a cat"},
        ],
        agent="assistant",
        memory_user=user["id"],
    )
    assert (result["created"], result["duplicates"]) == (2, 1)
    assert [r["status"] for r in result["results"]] == ["created", "duplicate", "created"]
    with pytest.raises(ValidationError) as caught:
        client.episodic_entries.create_batch(
            [{"content": "Ada plays chess."}, {"content": "x", "source": "rumour"}],
            agent="assistant",
            memory_user=user["id"],
        )
    assert set(caught.value.fields) == {"items[1].source"}
    listed = client.episodic_entries.list(memory_user=user["id"])
    assert sorted(e["content"] for e in listed["results"]) == [
        "Ada adopted a cat.",
        "Ada moved to Porto in March.",
    ]


def test_async_create_and_create_batch(client, async_client_factory, workspace_keys):
    user = client.memory_users.identify(channel="web", external_id="c-4")["memory_user"]

    async def scenario():
        # The agent-bound key acts for its own agent without naming it.
        async with async_client_factory(workspace_keys["agent_key"]) as memory:
            one = await memory.episodic_entries.create(memory_user=user["id"], content="Ada runs on Sundays.")
            many = await memory.episodic_entries.create_batch(
                [{"content": "Ada runs on Sundays."}, {"content": "Ada bakes bread."}], memory_user=user["id"]
            )
            return one, many

    one, many = asyncio.run(scenario())
    assert one["created"] is True and one["agent"] == "assistant"
    assert [(r["status"], r["entry"]["id"]) for r in many["results"]][0] == ("duplicate", one["id"])
    assert many["results"][1]["status"] == "created"
