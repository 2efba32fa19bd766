"""Issue 11, finding 2: ids in a procedure body are resolved through the key's read scope.

`agent_key` is bound to `agent`; rows of `other_agent` must answer like ids that do not exist.
"""

import uuid

from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory

LIST = "/api/v1/procedures/"


class ProcedureReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.own_episode = EpisodeFactory(agent=cls.agent)
        cls.foreign_episode = EpisodeFactory(agent=cls.other_agent)
        cls.foreign_procedure = ProcedureFactory(workspace=cls.workspace, agent=cls.other_agent)

    def create(self, key=None, **fields):
        body = {"name": "greet", "procedure_type": "prompt_template", "content": "Say hello.", **fields}
        return self.api(key or self.agent_key).post(LIST, body, format="json")

    def assert_like_a_random_id(self, field, foreign_value, random_value):
        before = Procedure.objects.count()
        random = self.create(**{field: random_value})
        foreign = self.create(**{field: foreign_value})
        assert random.status_code in (400, 404), random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert Procedure.objects.count() == before

    def test_another_agents_source_episode_answers_like_a_random_id(self):
        """source_episode_ids naming another agent's episode: the answer of an unknown id."""
        self.assert_like_a_random_id(
            "source_episode_ids",
            [str(self.own_episode.pk), str(self.foreign_episode.pk)],
            [str(self.own_episode.pk), str(uuid.uuid4())],
        )

    def test_another_agents_parent_answers_like_a_random_id(self):
        """Evolving another agent's procedure: the answer of an unknown parent."""
        self.assert_like_a_random_id("parent", str(self.foreign_procedure.pk), str(uuid.uuid4()))

    def test_own_episodes_are_accepted(self):
        """The key's own agent's episodes are valid sources, stored in the given order."""
        response = self.create(origin="self_learned", source_episode_ids=[str(self.own_episode.pk)])
        assert response.status_code == 201, response.json()
        assert response.json()["source_episode_ids"] == [str(self.own_episode.pk)]

    def test_a_workspace_key_may_cite_any_agents_episodes(self):
        """A workspace-wide key reads every agent's episodes, so it may cite them."""
        response = self.create(key=self.owner_key, source_episode_ids=[str(self.foreign_episode.pk)])
        assert response.status_code == 201, response.json()
