"""One row of every model registered in the admin, for one workspace.

A model registered later needs a line here: `test_every_scoped_model_is_seeded` says which.
"""

from django.apps import apps

from checkpoints.services import checkpoint_writes_put
from checkpoints.tests.factories import make_checkpoint
from core.services import audit_record, provider_credential_set
from episodes.tests.factories import EpisodeFactory
from episodic.tests.factories import entry_factory
from facts.tests.factories import FactFactory
from identities.services import memory_user_create
from identities.tests.factories import ChannelIdentityFactory
from procedures.services import procedure_create
from store.models import StoreItemEmbedding
from store.services import store_item_put
from threads.models import IterationLog, MessageEmbedding, RunSnapshot, ThreadPlan
from threads.tests.factories import append, make_thread


def seed_workspace(*, workspace, agent, tag: str) -> dict:
    """Rows of every tier in `workspace`, named after `tag` so a page shows whose they are."""
    person = memory_user_create(
        workspace=workspace, canonical_id=f"telegram:{tag}", display_name=f"Person {tag}"
    )
    ChannelIdentityFactory(memory_user=person, external_id=f"id-{tag}")
    thread = make_thread(workspace=workspace, agent=agent, memory_user=person, title=f"Thread {tag}")
    [message] = append(thread, ("user", f"Hello from {tag}"))
    MessageEmbedding.objects.create(
        message=message,
        thread=thread,
        workspace=workspace,
        agent=agent,
        memory_user=person,
        model="test",
        dimensions=3,
        embedding=[1.0, 0.0, 0.0],
    )
    ThreadPlan.objects.create(workspace=workspace, thread=thread, version=1, plan={"step": tag}, actor=tag)
    RunSnapshot.objects.create(workspace=workspace, thread=thread, run_id=f"run-{tag}")
    IterationLog.objects.create(
        workspace=workspace, thread=thread, task_key=f"task-{tag}", attempt=1, outcome="success"
    )
    fact = FactFactory(workspace=workspace, key=f"key_{tag}", value=f"value {tag}")
    EpisodeFactory(agent=agent, memory_user=person, thread=thread)
    entry_factory(agent=agent, memory_user=person, content=f"{tag} moved to Lisbon in May.")
    procedure = procedure_create(
        workspace=workspace, agent=agent, name=f"procedure {tag}", procedure_type="code_snippet", content="x"
    )
    checkpoint = make_checkpoint(thread, f"cp-{tag}")
    checkpoint_writes_put(
        checkpoint=checkpoint,
        task_id=f"t-{tag}",
        writes=[{"idx": 0, "channel": "c", "type": "json", "data": b"1"}],
    )
    item, _ = store_item_put(
        workspace=workspace, agent=agent, namespace=("memories", tag), key=f"k-{tag}", value={"text": tag}
    )
    StoreItemEmbedding.objects.create(
        item=item, workspace=workspace, agent=agent, model="test", dimensions=3, embedding=[1.0, 0.0, 0.0]
    )
    provider_credential_set(
        workspace=workspace,
        purpose="chat",
        base_url="http://127.0.0.1:9/v1",
        model=f"model-{tag}",
        api_key="k",
    )
    audit_record(
        workspace=workspace, actor=f"operator:{tag}", action="update", entity_type="fact", entity_id=fact.pk
    )
    if apps.is_installed("webhooks"):
        _seed_webhooks(workspace=workspace, tag=tag)
    _seed_llm(workspace=workspace, tag=tag)
    _seed_retention(workspace=workspace, agent=agent)
    _seed_reflection(workspace=workspace, agent=agent, person=person, tag=tag)
    return {"person": person, "thread": thread, "message": message, "fact": fact, "procedure": procedure}


def _seed_webhooks(*, workspace, tag):
    from webhooks.models import WebhookDelivery, WebhookSubscription

    subscription = WebhookSubscription.objects.create(
        workspace=workspace, url=f"https://example.com/{tag}", secret_encrypted="x"
    )
    WebhookDelivery.objects.create(
        subscription=subscription, event_id=f"event-{tag}", event_type="fact.updated", payload={}
    )


def _seed_llm(*, workspace, tag):
    import datetime

    from core.models import LLMBudget, LLMJob, LLMUsage

    LLMBudget.objects.create(workspace=workspace, daily_tokens=1000, policy="fallback")
    LLMUsage.objects.create(workspace=workspace, day=datetime.date(2026, 11, 23), purpose=f"extraction-{tag}")
    LLMJob.objects.create(workspace=workspace, task=f"task-{tag}")


def _seed_retention(*, workspace, agent):
    from retention.models import RetentionRule, RetentionRun

    RetentionRule.objects.create(workspace=workspace, agent=agent, tier="episodes", max_age_days=365)
    RetentionRun.objects.create(workspace=workspace, state="done")


def _seed_reflection(*, workspace, agent, person, tag):
    from reflection.models import ReflectionProfile, ReflectionRun

    run = ReflectionRun.objects.create(workspace=workspace, agent=agent, state="done")
    ReflectionProfile.objects.create(
        workspace=workspace,
        agent=agent,
        memory_user=person,
        text=f"- name: Person {tag}",
        method="offline",
        run=run,
    )
