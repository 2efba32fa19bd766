"""Deciding or deleting a person's preference beside that person's erasure or merge.

The decision or delete locked the fact, then rebuilt the person's preferences (an UPDATE of the
person's row); an erasure or a merge locks the person, then the person's facts: each waited for
the other, and PostgreSQL aborted the erasure or the merge. The person is now held first
(facts.services.memory_users.facts_people_hold), as fact_remember holds the person it writes for.
"""

from unittest import mock

from django.test import TransactionTestCase

from core.access import Principal
from core.services import agent_register, workspace_create
from episodic.tests.factories import memory_user_factory
from facts.models import Fact
from facts.services import deletion as deletion_module
from facts.services import fact_batch_delete, fact_remember
from facts.services import review as review_module
from facts.services.deletion import fact_delete
from facts.services.review import fact_review_approve
from identities.models import MemoryUser
from identities.services import memory_user_erase, memory_user_merge
from retention.tests.test_engine_append_race import Elsewhere, finished_cleanly


class PreferenceWritesBesidePersonLocksTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_register(
            workspace=self.workspace, slug="support", memory_settings={"review": "all"}
        )
        self.person = memory_user_factory(self.workspace)
        self.other = memory_user_factory(self.workspace, canonical_id="telegram:2")
        preference = {
            "workspace": self.workspace,
            "agent": self.agent,
            "key": "lang",
            "scope": "user",
            "memory_user": self.person,
            "fact_type": "user_preference",
        }
        self.current = fact_remember(value="fr", source="operator", **preference).fact
        self.held = fact_remember(value="pt", **preference).fact

    def run_beside(self, module, name, write, other):
        """`write()`, with `other` started on another connection once the write has its fact
        locked: right after `module.name` returns (`_held_lock`), or as it is called (the
        preferences rebuild after a delete); both end without an error."""
        real, started = getattr(module, name), []

        def locked(*args, **kwargs):
            result = real(*args, **kwargs) if name == "_held_lock" else None
            started.append(Elsewhere(other))
            started[-1].start()
            return result if name == "_held_lock" else real(*args, **kwargs)

        with mock.patch.object(module, name, side_effect=locked):
            write()
        finished_cleanly(*started)

    def test_an_approval_beside_a_merge(self):
        self.run_beside(
            review_module,
            "_held_lock",
            lambda: fact_review_approve(fact=self.held, actor="operator:o"),
            lambda: memory_user_merge(source=self.person, target=self.other, actor="t"),
        )
        assert Fact.objects.get(pk=self.held.pk).memory_user_id == self.other.pk
        assert MemoryUser.objects.get(pk=self.other.pk).preferences == {"lang": "pt"}

    def test_an_approval_beside_an_erasure(self):
        self.run_beside(
            review_module,
            "_held_lock",
            lambda: fact_review_approve(fact=self.held, actor="operator:o"),
            lambda: memory_user_erase(memory_user=self.person, actor="t"),
        )
        assert not Fact.objects.exists()

    def test_a_delete_beside_an_erasure(self):
        self.run_beside(
            deletion_module,
            "memory_user_preferences_sync",
            lambda: fact_delete(fact=self.current, actor="t"),
            lambda: memory_user_erase(memory_user=self.person, actor="t"),
        )
        assert not Fact.objects.exists()

    def test_a_batch_delete_beside_an_erasure(self):
        principal = Principal(workspace=self.workspace, role="editor")
        self.run_beside(
            deletion_module,
            "memory_user_preferences_sync",
            lambda: fact_batch_delete(principal=principal, ids=[self.current.pk]),
            lambda: memory_user_erase(memory_user=self.person, actor="t"),
        )
        assert not Fact.objects.exists()
