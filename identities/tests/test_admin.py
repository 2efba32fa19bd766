from django.contrib.auth import get_user_model

from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.models import MemoryUser
from identities.tests.factories import ChannelIdentityFactory, MemoryUserFactory, ThreadFactory
from procedures.models import Procedure
from procedures.services import procedure_create


class GlobalMemoryAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def test_changelists_and_change_pages_render(self):
        person = MemoryUserFactory(workspace=self.workspace)
        ChannelIdentityFactory(memory_user=person)
        ThreadFactory(agent=self.agent, memory_user=person)
        episode = EpisodeFactory(agent=self.agent, memory_user=person)
        procedure = procedure_create(
            workspace=self.workspace, name="p", procedure_type="code_snippet", content="x"
        )
        for url in [
            "/admin/identities/memoryuser/",
            f"/admin/identities/memoryuser/{person.pk}/change/",
            "/admin/episodes/episode/",
            f"/admin/episodes/episode/{episode.pk}/change/",
            "/admin/procedures/procedure/",
            f"/admin/procedures/procedure/{procedure.pk}/change/",
            "/admin/procedures/procedure/add/",
        ]:
            assert self.client.get(url).status_code == 200, url

    def test_memory_user_changelist_has_no_n_plus_one(self):
        MemoryUserFactory(workspace=self.workspace)
        self.client.get("/admin/identities/memoryuser/")
        with self.assertNumQueries(6):
            self.client.get("/admin/identities/memoryuser/")
        for _ in range(5):
            person = MemoryUserFactory(workspace=self.workspace)
            ThreadFactory(agent=self.agent, memory_user=person)
        with self.assertNumQueries(6):
            self.client.get("/admin/identities/memoryuser/")

    def test_deleting_users_erases_through_the_service(self):
        person = MemoryUserFactory(workspace=self.workspace)
        ThreadFactory(agent=self.agent, memory_user=person)
        EpisodeFactory(agent=self.agent, memory_user=person)
        self.client.post(
            "/admin/identities/memoryuser/",
            {"action": "delete_selected", "_selected_action": [str(person.pk)], "post": "yes"},
        )
        assert not MemoryUser.objects.exists()
        assert not Episode.objects.exists()
        assert AuditEvent.objects.get(action="erase").actor == "admin:root"

    def test_merge_action_merges_into_the_user_seen_first(self):
        first = MemoryUserFactory(workspace=self.workspace)
        second = MemoryUserFactory(workspace=self.workspace)
        self.client.post(
            "/admin/identities/memoryuser/",
            {"action": "merge_into_first", "_selected_action": [str(first.pk), str(second.pk)]},
        )
        second.refresh_from_db()
        assert second.merged_into_id == first.pk

    def test_procedure_add_and_episode_feedback_go_through_services(self):
        response = self.client.post(
            "/admin/procedures/procedure/add/",
            {
                "workspace": self.workspace.pk,
                "name": "Greet",
                "description": "",
                "trigger_conditions": '{"goal_contains": "hello"}',
                "procedure_type": "prompt_template",
                "content": '"Hi!"',
                "origin": "human",
                "is_active": "on",
            },
        )
        assert response.status_code == 302, response.context["adminform"].form.errors
        procedure = Procedure.objects.get()
        assert procedure.trigger_conditions == {"goal_contains": ["hello"]}
        assert AuditEvent.objects.filter(entity_type="procedure", actor="admin:root").exists()
        episode = EpisodeFactory(agent=self.agent)
        self.client.post(
            f"/admin/episodes/episode/{episode.pk}/change/", {"rating": "4", "feedback_comment": "ok"}
        )
        episode.refresh_from_db()
        assert (episode.rating, episode.feedback_comment) == (4, "ok")
