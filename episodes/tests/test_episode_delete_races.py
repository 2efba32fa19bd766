"""An episode delete beside the erasure of the episode's person. The delete locks its episodes,
then clears the facts citing them, then deletes them; the erasure cleared the same facts and
then waited for the episode. The erasure now locks the person's threads and episodes before it
deletes anything (core.holdings' locked_first), so one waits for the other."""

from unittest import mock

from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from episodes.models import Episode
from episodes.services import records as records_module
from episodes.services.records import episode_delete
from episodic.tests.factories import memory_user_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_erase
from retention.tests.test_engine_append_race import Elsewhere, finished_cleanly


class EpisodeDeleteBesideErasureTests(TransactionTestCase):
    def test_an_erasure_of_the_person_while_the_episode_is_deleted(self):
        workspace = workspace_create(name="Acme")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_factory(workspace)
        episode = Episode.objects.create(workspace=workspace, agent=agent, memory_user=person)
        learned = fact_remember(
            workspace=workspace, agent=agent, key="city", value="Paris", scope="agent", source_episode=episode
        ).fact
        real, started = records_module.Count, []

        def count(*args, **kwargs):
            # After the delete locked its episodes, before it clears the facts citing them.
            if not started:
                started.append(Elsewhere(lambda: memory_user_erase(memory_user=person, actor="t")))
                started[-1].start()
            return real(*args, **kwargs)

        with mock.patch.object(records_module, "Count", side_effect=count):
            episode_delete(episode=episode, actor="t")
        finished_cleanly(*started)
        assert not Episode.objects.exists() and not MemoryUser.objects.filter(pk=person.pk).exists()
        assert Fact.objects.get(pk=learned.pk).source_episode_id is None
