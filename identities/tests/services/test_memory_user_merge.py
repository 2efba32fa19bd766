from datetime import timedelta

from django.utils import timezone

from core.errors import ApplicationError, NotFoundError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from facts.models import Fact
from facts.services import fact_remember
from identities import services
from identities.models import MemoryUser
from identities.services import memory_user_identify, memory_user_merge
from identities.tests.factories import ChannelIdentityFactory, MemoryUserFactory, ThreadFactory


class MemoryUserMergeTests(MemoryTestCase):
    def setUp(self):
        self.source = MemoryUserFactory(workspace=self.workspace)
        self.target = MemoryUserFactory(workspace=self.workspace)
        ChannelIdentityFactory(memory_user=self.source, channel="email", external_id="ann@example.com")
        ChannelIdentityFactory(memory_user=self.target, channel="telegram", external_id="42")

    def user_fact(self, user, key, value, **kwargs):
        return fact_remember(
            workspace=self.workspace, key=key, value=value, scope="user", memory_user=user, **kwargs
        ).fact

    def test_everything_of_the_source_moves_to_the_target(self):
        thread = ThreadFactory(agent=self.agent, memory_user=self.source)
        episode = EpisodeFactory(agent=self.agent, memory_user=self.source)
        entry = EpisodicEntry.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.source,
            content="Likes tea",
            content_hash="h",
            source="user_assertion",
            evidence="said so",
        )
        session = fact_remember(
            workspace=self.workspace, key="s", value=1, scope="session", thread=thread
        ).fact
        only_source = self.user_fact(self.source, "pet", "cat", fact_type="user_preference")

        result = memory_user_merge(source=self.source, target=self.target, actor="operator:owner")

        assert result.counts["identities"] == 1
        assert result.counts["threads"] == 1
        assert result.counts["episodes"] == 1
        assert result.counts["episodic_entries"] == 1
        for obj in (thread, episode, entry, session, only_source):
            obj.refresh_from_db()
            assert obj.memory_user_id == self.target.pk, obj
        assert self.target.identities.count() == 2
        self.source.refresh_from_db()
        assert self.source.merged_into_id == self.target.pk
        self.target.refresh_from_db()
        assert self.target.preferences == {"pet": "cat"}
        assert AuditEvent.objects.filter(action="merge", entity_id=str(self.source.pk)).exists()

    def test_on_a_key_conflict_the_newer_version_wins_and_the_older_becomes_history(self):
        older = self.user_fact(self.target, "timezone", "UTC")
        newer = self.user_fact(self.source, "timezone", "CET")
        result = memory_user_merge(source=self.source, target=self.target, actor="system")
        assert result.counts["fact_conflicts"] == 1
        current = Fact.objects.get(memory_user=self.target, key="timezone", valid_to__isnull=True)
        assert current.pk == newer.pk
        older.refresh_from_db()
        assert older.valid_to is not None
        assert older.superseded_by_id == newer.pk
        assert older.memory_user_id == self.target.pk

    def test_moved_facts_keep_their_age_and_a_closed_conflict_ages_from_the_merge(self):
        """Retention ages facts by updated_at: a merge moves them to another person but changes
        none of them, so it must not make old facts look new; a fact the merge closes became
        history then, as a close by remember does."""
        long_ago = timezone.now() - timedelta(days=400)
        only_source = self.user_fact(self.source, "pet", "cat")
        older = self.user_fact(self.target, "timezone", "UTC")
        newer = self.user_fact(self.source, "timezone", "CET")
        Fact.objects.filter(pk__in=[only_source.pk, older.pk, newer.pk]).update(updated_at=long_ago)

        memory_user_merge(source=self.source, target=self.target, actor="system")

        for fact in (only_source, newer, older):
            fact.refresh_from_db()
            assert fact.memory_user_id == self.target.pk
        assert only_source.updated_at == long_ago
        assert newer.updated_at == long_ago
        assert older.valid_to is not None
        assert older.updated_at == older.valid_to

    def test_merging_again_is_a_no_op(self):
        memory_user_merge(source=self.source, target=self.target, actor="system")
        again = memory_user_merge(source=self.source, target=self.target, actor="system")
        assert again.already_merged
        assert again.counts == {}
        assert AuditEvent.objects.filter(action="merge").count() == 1

    def test_identifying_with_a_merged_identity_returns_the_target(self):
        memory_user_merge(source=self.source, target=self.target, actor="system")
        result = memory_user_identify(
            workspace=self.workspace, channel="email", external_id="ann@example.com"
        )
        assert result.memory_user.pk == self.target.pk
        assert not result.created

    def test_users_merged_into_the_source_follow_it(self):
        earlier = MemoryUserFactory(workspace=self.workspace, merged_into=self.source)
        memory_user_merge(source=self.source, target=self.target, actor="system")
        earlier.refresh_from_db()
        assert earlier.merged_into_id == self.target.pk

    def test_invalid_merges_are_refused_and_change_nothing(self):
        with self.assertRaisesMessage(ApplicationError, services.MERGE_INTO_SELF):
            memory_user_merge(source=self.source, target=self.source, actor="system")
        merged = MemoryUserFactory(workspace=self.workspace, merged_into=self.target)
        with self.assertRaisesMessage(ApplicationError, services.MERGE_INTO_MERGED):
            memory_user_merge(source=self.source, target=merged, actor="system")
        stranger = MemoryUser.objects.create(workspace=self.other_workspace, canonical_id="x:1")
        with self.assertRaises(NotFoundError):
            memory_user_merge(source=self.source, target=stranger, actor="system")
        self.source.refresh_from_db()
        assert self.source.merged_into_id is None
        assert self.source.identities.count() == 1
