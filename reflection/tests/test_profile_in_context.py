"""Issue 13 item 13: the profile reflection caches is what <user-profile> sends, until a user
fact changes after it (then the facts are fresher and the block is built from them)."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember
from identities.services import memory_user_merge
from identities.tests.factories import MemoryUserFactory
from reflection.models import ReflectionProfile

URL = "/api/v1/context/"


class CachedProfileInContextTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        fact_remember(
            workspace=self.workspace, key="city", value="Porto", scope=Fact.Scope.USER, memory_user=self.ada
        )
        Fact.objects.update(valid_from=timezone.now() - timedelta(hours=1))
        self.profile = ReflectionProfile.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.ada,
            text="- name: Ada\n- city: Porto\n- routine: green tea every morning <b>",
            method="offline",
        )

    def block(self, **extra):
        body = {"agent": self.agent.slug, "memory_user": str(self.ada.pk), "message": "Hi", **extra}
        response = self.api().post(URL, body, format="json")
        assert response.status_code == 200, response.json()
        return response.json()["user_profile"]

    def test_the_cached_profile_is_sent_escaped(self):
        block = self.block()
        assert "- routine: green tea every morning &lt;b&gt;" in block["text"]
        assert block["items"][0]["kind"] == "reflection_profile"

    def test_a_fact_newer_than_the_profile_wins(self):
        fact_remember(
            workspace=self.workspace, key="city", value="Lisbon", scope=Fact.Scope.USER, memory_user=self.ada
        )
        block = self.block()
        assert "Lisbon" in block["text"] and "routine" not in block["text"]

    def test_another_agent_has_no_cached_profile_of_her(self):
        block = self.block(agent=self.other_agent.slug)
        assert "routine" not in block["text"] and "Porto" in block["text"]

    def test_a_merge_into_her_sends_what_the_merged_person_said(self):
        """The cached profile was written without the merged person's facts, which keep their
        older times: it stood for her until the next run and hid them."""
        email = MemoryUserFactory(workspace=self.workspace, display_name="Ada (email)")
        fact_remember(
            workspace=self.workspace, key="allergy", value="peanuts", scope=Fact.Scope.USER, memory_user=email
        )
        Fact.objects.filter(key="allergy").update(valid_from=timezone.now() - timedelta(days=3))

        memory_user_merge(source=email, target=self.ada, actor="operator:owner")

        block = self.block()
        assert "peanuts" in block["text"] and "Porto" in block["text"]
        assert not ReflectionProfile.objects.filter(memory_user=self.ada).exists()
