from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from facts.models import Fact
from facts.services import fact_remember
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_erase
from identities.tests.factories import (
    ChannelIdentityFactory,
    MemoryUserFactory,
    MessageFactory,
    ThreadFactory,
)
from threads.models import Message, Thread


class MemoryUserEraseTests(MemoryTestCase):
    def test_erasure_deletes_everything_of_the_person_and_audits_the_counts(self):
        person = MemoryUserFactory(workspace=self.workspace)
        bystander = MemoryUserFactory(workspace=self.workspace)
        ChannelIdentityFactory(memory_user=person)
        thread = ThreadFactory(agent=self.agent, memory_user=person)
        MessageFactory(thread=thread)
        MessageFactory(thread=thread)
        EpisodeFactory(agent=self.agent, memory_user=person)
        EpisodicEntry.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=person,
            content="x",
            content_hash="h",
            source="user_assertion",
            evidence="e",
        )
        fact_remember(workspace=self.workspace, key="a", value=1, scope="user", memory_user=person)
        fact_remember(workspace=self.workspace, key="a", value=2, scope="user", memory_user=person)
        fact_remember(workspace=self.workspace, key="s", value=1, scope="session", thread=thread)
        kept = fact_remember(workspace=self.workspace, key="g", value=1, scope="global").fact
        fact_remember(workspace=self.workspace, key="a", value=1, scope="user", memory_user=bystander)
        merged = MemoryUserFactory(workspace=self.workspace, merged_into=person)

        counts = memory_user_erase(memory_user=person, actor="operator:owner")

        assert counts == {
            "memory_users": 2,
            "identities": 1,
            "threads": 1,
            "messages": 2,
            "facts": 3,
            "episodes": 1,
            "episodic_entries": 1,
            "store_items": 0,  # every tier that holds rows about a person answers, with 0 too
        }
        assert not MemoryUser.objects.filter(pk__in=[person.pk, merged.pk]).exists()
        assert not Thread.objects.exists()
        assert not Message.objects.exists()
        assert not Episode.objects.exists()
        assert not EpisodicEntry.objects.exists()
        assert not ChannelIdentity.objects.exists()
        assert set(Fact.objects.values_list("pk", flat=True)) == {
            kept.pk,
            Fact.objects.get(memory_user=bystander).pk,
        }
        event = AuditEvent.objects.get(action="erase", entity_id=str(person.pk))
        assert event.changes["counts"]["messages"] == 2
        assert event.actor == "operator:owner"
