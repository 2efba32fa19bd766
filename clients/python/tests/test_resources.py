"""Every resource of the client against the live server: paths, bodies and responses agree."""

import json
import time

import pytest

from memory_client import ConflictError, MemoryClient, NotFoundError, RetryPolicy, ValidationError

from .test_transport import _FlakyProxy

pytestmark = pytest.mark.slow


def test_retried_append_reuses_idempotency_keys(live_server_url, workspace_keys):
    """The first append reaches the server but its response is lost; the retry sends the same
    keys, so the server stores each message once."""
    proxy = _FlakyProxy(live_server_url, failures=1, mode="drop", path_contains="/messages/")
    try:
        retry = RetryPolicy(max_attempts=3, backoff=0.01, max_backoff=0.05)
        with MemoryClient(proxy.url, workspace_keys["key"], retry=retry) as client:
            thread = client.threads.create(agent="assistant", title="retry")
            appended = client.threads.append_messages(
                thread["id"], [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi!"}]
            )
            assert len(appended["messages"]) == 2
            stored = client.threads.messages(thread["id"])
        posts = [seen for seen in proxy.seen if seen[0] == "POST" and "/messages/" in seen[1]]
        assert len(posts) == 2 and posts[0][2] == posts[1][2]
        assert stored["count"] == 2
    finally:
        proxy.close()


def test_conversation_resources(client):
    thread = client.threads.resolve(agent="assistant", client_key="conv-1")
    assert client.threads.resolve(agent="assistant", client_key="conv-1")["id"] == thread["id"]
    client.threads.append_message(thread["id"], role="user", content="Plan my week")
    client.threads.append_message(thread["id"], role="assistant", content="Sure: Monday gym, Tuesday piano.")
    window = client.threads.history(thread["id"], max_messages=1)
    assert [m["content"] for m in window["messages"]] == ["Sure: Monday gym, Tuesday piano."]
    assert window["cut_count"] == 1

    client.threads.put_plan(thread["id"], {"steps": ["gym", "piano"]})
    client.threads.put_plan(thread["id"], {"steps": ["gym", "piano", "rest"]})
    assert client.threads.get_plan(thread["id"])["plan"]["steps"][-1] == "rest"
    assert client.threads.plan_versions(thread["id"])["count"] == 2
    client.threads.put_snapshot(thread["id"], "run-1", {"agents": ["planner"]})
    assert client.threads.get_snapshot(thread["id"], "run-1")["snapshot"] == {"agents": ["planner"]}
    client.threads.add_iteration(thread["id"], task="fetch", outcome="failure", error="timeout")
    assert [i["outcome"] for i in client.threads.iterations(thread["id"], task="fetch")["results"]] == [
        "failure"
    ]
    client.threads.append_message(thread["id"], role="assistant", content="Searching.", node_id="researcher")
    # The window's other options reach the server: the sub-agent's own history.
    window = client.threads.history(
        thread["id"], content_format="parts", memory_mode="node", node="researcher", tool_format="text"
    )
    assert window["memory_mode"] == "node" and window["node"] == "researcher"
    assert [m["content"] for m in window["messages"]] == ["Searching."]
    window = client.threads.history(thread["id"], memory_mode="conversation", node="researcher")
    assert window["memory_mode"] == "conversation" and window["node"] is None
    assert client.threads.compact(thread["id"])["node"] is None
    assert client.threads.compact(thread["id"], node="researcher")["node"] == "researcher"
    with pytest.raises(ValidationError):
        client.threads.compact(thread["id"], node="nobody")
    assert client.threads.update(thread["id"], title="Week")["title"] == "Week"
    assert any(t["id"] == thread["id"] for t in client.paginate(client.threads.list))
    client.threads.delete(thread["id"])
    with pytest.raises(NotFoundError):
        client.threads.get(thread["id"])


def test_global_memory_resources(client):
    identified = client.memory_users.identify(channel="telegram", external_id="99", profile={"name": "Grace"})
    user = identified["memory_user"]
    assert identified["created"] is True
    stored = client.facts.remember(
        key="favourite_tea", value="oolong", memory_user=user["id"], fact_type="user_preference"
    )
    assert stored["outcome"] == "created"
    again = client.facts.remember(key="favourite_tea", value="sencha", memory_user=user["id"])
    assert again["outcome"] == "superseded"
    assert client.facts.lookup("favourite_tea", memory_user=user["id"])["value"] == "sencha"
    history = client.facts.history(again["fact"]["id"])
    assert [v["value"] for v in history["results"]] == ["sencha", "oolong"]
    recalled = client.memory.recall(key="favourite tea", memory_user=user["id"])
    assert recalled["facts"][0]["value"] == "sencha"
    assert {t["function"]["name"] for t in client.memory.tools()} >= {"recall", "remember"}
    assert {t["name"] for t in client.memory.tools(schema="anthropic")} >= {"recall", "forget"}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "remember",
            "arguments": json.dumps(
                {"key": "city", "value": "Porto", "scope": "user", "memory_user": user["id"]}
            ),
        },
    }
    result = client.memory.call_tool(call)
    assert (result["role"], result["tool_call_id"]) == ("tool", "call_1")
    assert client.facts.lookup("city", memory_user=user["id"])["value"] == "Porto"

    procedure = client.procedures.create(
        name="Refunds",
        procedure_type="prompt_template",
        content="Check the date.",
        trigger_conditions={"goal_contains": ["refund"]},
    )
    matched = client.procedures.match(goal="I need a refund")
    assert matched["results"][0]["procedure"]["id"] == procedure["id"]
    client.procedures.record_run(procedure["id"], success=True, duration_ms=1200)
    assert client.procedures.get(procedure["id"])["times_used"] == 1

    episode = client.episodes.create(agent="assistant", memory_user=user["id"], trigger_type="chat")
    client.episodes.close(episode["id"], outcome="success", final_output="done")
    assert client.episodes.feedback(episode["id"], rating=5, comment="great")["rating"] == 5

    other = client.memory_users.identify(channel="email", external_id="grace@example.com")["memory_user"]
    merged = client.memory_users.merge(other["id"], target=user["id"])
    assert merged["target"]["id"] == user["id"]
    with pytest.raises((ValidationError, ConflictError)):
        client.memory_users.merge(user["id"], target=user["id"])

    facts = list(client.paginate(client.facts.list, page_size=1))
    deleted = client.facts.batch_delete([f["id"] for f in facts])
    assert deleted
    assert client.facts.list()["count"] == 0


def test_episodic_and_context_resources(client):
    user = client.memory_users.identify(channel="web", external_id="u-1")["memory_user"]
    extracted = client.episodic_entries.extract(
        agent="assistant",
        memory_user=user["id"],
        transcript=[{"role": "user", "content": "I ran the Berlin marathon in 2023."}],
        candidates=[
            {
                "content": "Ran the Berlin marathon in 2023.",
                "source": "user_assertion",
                "evidence": "I ran the Berlin marathon in 2023.",
            }
        ],
        use_llm=False,
        sync=True,
    )
    assert [e["content"] for e in extracted["stored"]] == ["Ran the Berlin marathon in 2023."]
    found = client.episodic_entries.search(agent="assistant", memory_user=user["id"], query="marathon")
    assert found["results"][0]["entry"]["content"] == "Ran the Berlin marathon in 2023."

    def searched(**filters):
        found = client.episodic_entries.search(
            agent="assistant", memory_user=user["id"], query="marathon", **filters
        )
        return [hit["entry"]["content"] for hit in found["results"]]

    assert searched(source=["user_assertion"], created_after=None) == ["Ran the Berlin marathon in 2023."]
    assert searched(created_after="2100-01-01T00:00:00Z") == []
    assert searched(metadata={"origin": "elsewhere"}) == []

    context = client.context.assemble(
        agent="assistant",
        memory_user=user["id"],
        message="Any marathon tips?",
        append=True,
        token_budget=1500,
    )
    assert "Ran the Berlin marathon in 2023." in context["memory"]["text"]
    assert context["appended_message"] is not None
    assert context["tokens"] <= 1500
    entry_id = found["results"][0]["entry"]["id"]
    client.episodic_entries.delete(entry_id)
    with pytest.raises(NotFoundError):
        client.episodic_entries.get(entry_id)


def test_retention_rules_and_legal_holds(client):
    rule = client.retention.set_rule(tier="episodes", max_age_days=30)
    assert (rule["tier"], rule["agent"], rule["max_age_days"]) == ("episodes", None, 30)
    assert client.retention.set_rule(tier="episodes", keep_latest=5)["id"] == rule["id"]
    overview = client.retention.get()
    assert [r["tier"] for r in overview["rules"]] == ["episodes"]
    assert overview["preview"]["deletes"]["episodes"] == 0
    assert client.retention.run() == {"status": "queued"}
    client.retention.delete_rule(rule["id"])
    assert client.retention.get()["rules"] == []
    with pytest.raises(ValidationError):
        client.retention.set_rule(tier="episodes")

    person = client.memory_users.identify(channel="telegram", external_id="77")["memory_user"]
    held = client.memory_users.place_legal_hold(person["id"], reason="Case 114")
    assert held["legal_hold"]["reason"] == "Case 114"
    with pytest.raises(ConflictError):
        client.memory_users.delete(person["id"])
    assert client.memory_users.release_legal_hold(person["id"])["legal_hold"] is None
    client.memory_users.delete(person["id"])


def test_evidence_and_purge_by_source(client):
    user = client.memory_users.identify(channel="web", external_id="ev-1")["memory_user"]
    thread = client.threads.create(agent="assistant", title="Card", memory_user=user["id"])
    appended = client.threads.append_message(thread["id"], role="user", content="My card is declined again.")
    message_id = appended["messages"][0]["id"]
    entry = client.episodic_entries.create(
        agent="assistant",
        memory_user=user["id"],
        thread=thread["id"],
        content="Ada's card keeps getting declined.",
        source="user_assertion",
        evidence="My card is declined again.",
        source_message=message_id,
    )
    evidence = client.evidence.get("entry", entry["id"])
    assert evidence["evidence"] == "My card is declined again."
    assert [m["id"] for m in evidence["messages"]] == [message_id]
    assert client.threads.derived(thread["id"], message=message_id)["entries"]["count"] == 1
    assert client.threads.purge_derived(thread["id"], message=message_id)["entries"] == 1
    with pytest.raises(NotFoundError):
        client.evidence.get("entry", entry["id"])


def test_history_recalls_the_persons_older_messages(client):
    """`semantic_recall` with a `recall_query` in the person's own words: their older turn is
    recalled into the window, and a value the server refuses is a ValidationError."""
    person = client.memory_users.identify(channel="telegram", external_id="recall-1")["memory_user"]
    old = client.threads.create(agent="assistant", memory_user=person["id"], channel_chat_id="old")
    client.threads.append_messages(
        old["id"],
        [
            {"role": "user", "content": "My sister Bea lives in Porto."},
            {"role": "assistant", "content": "Noted: Porto."},
        ],
    )
    new = client.threads.create(agent="assistant", memory_user=person["id"], channel_chat_id="new")
    client.threads.append_message(new["id"], role="user", content="Hello again")
    window = client.threads.history(
        new["id"],
        semantic_recall=True,
        recall_query="Where does my sister live?",
        recall_query_by_person=True,
    )
    assert "My sister Bea lives in Porto." in [hit["content"] for hit in window["recalled"]]
    assert window["messages"][-1]["content"] == "Hello again"
    with pytest.raises(ValidationError) as refused:
        client.threads.history(new["id"], recall_query="x", tool_format="yaml")
    assert "tool_format" in str(refused.value)


def test_webhook_resources(client):
    created = client.webhooks.create(
        url="http://127.0.0.1:9/hook", events=["fact.created"], description="crm"
    )
    hook = created["id"]
    assert created["secret"] and created["events"] == ["fact.created"]
    assert client.webhooks.get(hook)["description"] == "crm"
    assert [h["id"] for h in client.webhooks.list()["results"]] == [hook]
    assert client.webhooks.update(hook, is_active=False)["is_active"] is False
    assert client.webhooks.rotate_secret(hook)["secret"] not in ("", created["secret"])
    client.webhooks.update(hook, is_active=True)
    client.webhooks.ping(hook)
    deliveries = client.webhooks.deliveries(hook, event_type="ping")
    assert [d["event_type"] for d in deliveries["results"]] == ["ping"]
    with pytest.raises(ValidationError):
        client.webhooks.create(url="not a url")
    client.webhooks.delete(hook)
    with pytest.raises(NotFoundError):
        client.webhooks.get(hook)


def test_review_resources(client):
    client.agents.update("assistant", memory_settings={"review": "all"})
    person = client.memory_users.identify(channel="web", external_id="rev-1")["memory_user"]["id"]
    tea = client.facts.remember(key="tea", value="sencha", memory_user=person, agent="assistant")["fact"]
    city = client.facts.remember(key="city", value="Lyon", memory_user=person, agent="assistant")["fact"]
    held = client.review.list(state="held", tier="fact")
    assert {(item["tier"], item["id"]) for item in held["results"]} == {
        ("fact", tea["id"]),
        ("fact", city["id"]),
    }
    assert client.review.get("fact", tea["id"])["state"] == "held"
    assert client.review.edit("fact", tea["id"], value="gyokuro")["state"] == "approved"
    (rejected,) = client.review.reject([("fact", city["id"])], reason="not said")["results"]
    assert rejected["outcome"] == "rejected"
    (again,) = client.review.approve([{"tier": "fact", "id": city["id"]}])["results"]
    assert again["outcome"] == "not_held"
    assert client.facts.lookup("tea", memory_user=person, agent="assistant")["value"] == "gyokuro"
    with pytest.raises(ValidationError):
        client.review.merge([("fact", tea["id"])])


def test_reflection_and_procedure_learning(client):
    started = client.reflection.run(agent="assistant")
    assert client.reflection.get_run(started["id"])["agent"] == "assistant"
    assert started["id"] in [run["id"] for run in client.reflection.runs(agent="assistant")["results"]]
    assert client.reflection.profiles(agent="assistant")["results"] == []
    learned = client.procedures.learn(agent="assistant")
    assert learned["proposed"] == [] and learned["episodes_scanned"] == 0


def test_thread_transfers_and_single_messages(client):
    client.agents.create("billing")
    thread = client.threads.create(agent="assistant", title="handover")
    appended = client.threads.append_message(thread["id"], role="user", content="My invoice is wrong")
    message = appended["messages"][0]
    assert client.threads.message(thread["id"], message["id"])["content"] == "My invoice is wrong"
    moved = client.threads.transfer(
        thread["id"], from_agent="assistant", to_agent="billing", reason="invoice question"
    )
    assert (moved["from_agent"], moved["to_agent"]) == ("assistant", "billing")
    assert [t["to_agent"] for t in client.threads.transfers(thread["id"])["results"]] == ["billing"]
    with pytest.raises(ValidationError):
        client.threads.transfer(thread["id"], from_agent="assistant", to_agent="not a slug")


def test_episode_search_and_fact_extraction(client):
    person = client.memory_users.identify(channel="web", external_id="ep-1")["memory_user"]["id"]
    episode = client.episodes.create(
        agent="assistant",
        memory_user=person,
        input={"goal": "Book a train to Lyon"},
        messages=[{"role": "user", "content": "I live in Lisbon and need a train to Lyon"}],
    )
    found = client.episodes.search(query="train to Lyon", agent="assistant")
    assert [hit["episode"]["id"] for hit in found["results"]] == [episode["id"]]
    extracted = client.episodes.extract_facts(
        episode["id"], candidates=[{"key": "city", "value": "Lisbon", "evidence": "I live in Lisbon"}]
    )
    assert [(f["key"], f["outcome"]) for f in extracted["stored"]] == [("city", "created")]


def test_store_resources(client):
    stored = client.store.put(("prefs", "ui"), "theme", {"mode": "dark"}, agent="assistant")
    assert client.store.get(("prefs", "ui"), "theme", agent="assistant")["value"] == {"mode": "dark"}
    listed = client.store.list(namespace_prefix=("prefs",), agent="assistant")
    assert [item["key"] for item in listed["results"]] == ["theme"]
    found = client.store.search(("prefs",), agent="assistant")
    assert [item["key"] for item in found["items"]] == ["theme"]
    spaces = client.store.namespaces(agent="assistant")
    assert ["prefs", "ui"] in spaces["namespaces"]
    batch = client.store.batch(
        [{"op": "get", "namespace": ["prefs", "ui"], "key": "theme"}], agent="assistant"
    )
    assert batch["results"][0]["value"] == {"mode": "dark"}
    client.store.delete(("prefs", "ui"), "theme", agent="assistant")
    with pytest.raises(NotFoundError):
        client.store.get(("prefs", "ui"), "theme", agent="assistant")
    client.store.put(("prefs", "ui"), "font", {"size": 14}, agent="assistant")
    (font,) = client.store.list(agent="assistant")["results"]
    assert client.store.batch_delete([font["id"]])["deleted"] == 1
    assert stored["key"] == "theme"
    assert client.store.list(agent="assistant")["results"] == []


def test_export_and_import(client):
    person = client.memory_users.identify(channel="web", external_id="exp-1")["memory_user"]["id"]
    client.facts.remember(key="tea", value="sencha", memory_user=person, agent="assistant")
    exported = client.portability.export(memory_user=person)
    records = [json.loads(line) for line in exported.splitlines()]
    assert records[0]["format"] == "memory-export" and records[-1]["type"] == "end"
    assert any(r["type"] == "fact" and r["key"] == "tea" for r in records[1:])
    job = client.portability.import_(exported, dry_run=True, file_name="person.jsonl")
    assert job["status"] in ("queued", "running", "done")
    for _ in range(100):
        job = client.portability.import_job(job["id"])
        if job["status"] in ("done", "failed"):
            break
        time.sleep(0.1)
    assert job["status"] == "done", job
    with pytest.raises(ValidationError):
        client.portability.import_("not an export\n")
