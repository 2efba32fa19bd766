from core.errors import ApplicationError
from core.testing import MemoryTestCase
from identities import services
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_identify


class MemoryUserIdentifyTests(MemoryTestCase):
    def test_an_unknown_identity_creates_a_user_with_a_canonical_id(self):
        result = memory_user_identify(
            workspace=self.workspace, channel="Telegram", external_id=12345, profile={"name": "Ann"}
        )
        assert result.created
        assert result.memory_user.canonical_id == "telegram:12345"
        assert result.memory_user.display_name == "Ann"
        assert result.identity.profile == {"name": "Ann"}

    def test_a_known_identity_returns_the_same_user_and_merges_the_profile(self):
        first = memory_user_identify(
            workspace=self.workspace, channel="web", external_id="abc", profile={"a": 1}
        )
        again = memory_user_identify(
            workspace=self.workspace, channel="web", external_id="abc", profile={"b": 2}
        )
        assert not again.created
        assert again.memory_user.pk == first.memory_user.pk
        assert ChannelIdentity.objects.get().profile == {"a": 1, "b": 2}
        assert again.memory_user.last_seen_at >= first.memory_user.last_seen_at

    def test_identities_are_isolated_per_workspace(self):
        mine = memory_user_identify(workspace=self.workspace, channel="web", external_id="abc")
        theirs = memory_user_identify(workspace=self.other_workspace, channel="web", external_id="abc")
        assert mine.memory_user.pk != theirs.memory_user.pk

    def test_bad_channel_or_external_id_is_refused(self):
        with self.assertRaisesMessage(ApplicationError, services.CHANNEL_INVALID):
            memory_user_identify(workspace=self.workspace, channel="tele gram", external_id="1")
        with self.assertRaisesMessage(ApplicationError, services.EXTERNAL_ID_REQUIRED):
            memory_user_identify(workspace=self.workspace, channel="web", external_id="  ")
        assert not MemoryUser.objects.exists()
