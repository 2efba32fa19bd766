from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_merge
from identities.tests.factories import MemoryUserFactory, MessageFactory, ThreadFactory

LIST = "/api/v1/memory-users/"
IDENTIFY = "/api/v1/memory-users/identify/"


class MemoryUserApiTests(MemoryTestCase):
    def test_identify_creates_then_returns_the_user_context(self):
        body = {"channel": "telegram", "external_id": "12345", "profile": {"name": "Ann"}}
        created = self.api(self.agent_key).post(IDENTIFY, body, format="json")
        assert created.status_code == 201, created.json()
        user = created.json()["memory_user"]
        assert (user["canonical_id"], user["display_name"]) == ("telegram:12345", "Ann")
        person = MemoryUser.objects.get(pk=user["id"])
        fact_remember(
            workspace=self.workspace,
            key="language",
            value="fr",
            scope="user",
            memory_user=person,
            fact_type="user_preference",
        )
        EpisodeFactory(agent=self.agent, memory_user=person)
        EpisodeFactory(agent=self.other_agent, memory_user=person)
        again = self.api(self.agent_key).post(
            IDENTIFY, {"channel": "telegram", "external_id": "12345"}, format="json"
        )
        assert again.status_code == 200
        data = again.json()
        assert data["created"] is False
        assert data["preferences"] == {"language": "fr"}
        assert [f["key"] for f in data["facts"]] == ["language"]
        assert len(data["episodes"]) == 1  # the agent-bound key sees its own agent's episodes
        assert self.api(self.read_only_key).post(IDENTIFY, body, format="json").status_code == 403
        bad = self.api().post(IDENTIFY, {"channel": "bad channel!", "external_id": "1"}, format="json")
        assert bad.status_code == 400 and "channel" in bad.json()["error"]["fields"]

    def test_create_list_with_statistics_and_patch(self):
        created = self.api().post(
            LIST,
            {
                "canonical_id": "crm:7",
                "display_name": "Bob",
                "identities": [{"channel": "email", "external_id": "b@x"}],
            },
            format="json",
        )
        assert created.status_code == 201, created.json()
        person = MemoryUser.objects.get(pk=created.json()["id"])
        thread = ThreadFactory(agent=self.agent, memory_user=person)
        MessageFactory(thread=thread)
        MessageFactory(thread=thread)
        MemoryUserFactory(workspace=self.workspace)
        self.api().get(LIST)  # the key's last_used_at is refreshed once, not per request
        with self.assertNumQueries(3):  # key, page (short: no count), identities prefetch
            listed = self.api().get(LIST, {"ordering": "canonical_id"})
        row = listed.json()["results"][0]
        assert (row["thread_count"], row["message_count"]) == (1, 2)
        assert row["identities"] == [{"channel": "email", "external_id": "b@x", "profile": {}}]
        assert self.api().get(LIST, {"q": "b@x"}).json()["count"] == 1
        assert self.api().get(LIST, {"channel": "email"}).json()["count"] == 1
        duplicate = self.api().post(LIST, {"canonical_id": "crm:7"}, format="json")
        assert duplicate.status_code == 409
        patched = self.api().patch(f"{LIST}{person.pk}/", {"display_name": "Robert"}, format="json")
        assert patched.json()["display_name"] == "Robert"
        assert AuditEvent.objects.filter(entity_type="memory_user", action="update").exists()

    def test_merge_endpoint_and_merged_users_leave_the_list(self):
        source = MemoryUserFactory(workspace=self.workspace)
        target = MemoryUserFactory(workspace=self.workspace)
        url = f"{LIST}{source.pk}/merge/"
        response = self.api().post(url, {"target": str(target.pk)}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["target"]["id"] == str(target.pk)
        assert (
            self.api().post(url, {"target": str(target.pk)}, format="json").json()["already_merged"] is True
        )
        ids = [u["id"] for u in self.api().get(LIST).json()["results"]]
        assert str(source.pk) not in ids
        assert str(source.pk) in [u["id"] for u in self.api().get(LIST, {"merged": "true"}).json()["results"]]
        self_merge = self.api().post(f"{LIST}{target.pk}/merge/", {"target": str(target.pk)}, format="json")
        assert self_merge.status_code == 400

    def test_delete_erases_and_batch_delete_is_all_or_nothing(self):
        person = MemoryUserFactory(workspace=self.workspace)
        ThreadFactory(agent=self.agent, memory_user=person)
        counts = self.api().delete(f"{LIST}{person.pk}/").json()
        assert (counts["memory_users"], counts["threads"]) == (1, 1)
        a = MemoryUserFactory(workspace=self.workspace)
        foreign = MemoryUserFactory(workspace=self.other_workspace)
        refused = self.api().post(
            f"{LIST}batch-delete/", {"ids": [str(a.pk), str(foreign.pk)]}, format="json"
        )
        assert refused.status_code == 404
        assert MemoryUser.objects.filter(pk=a.pk).exists()
        done = self.api().post(f"{LIST}batch-delete/", {"ids": [str(a.pk)]}, format="json")
        assert done.json()["memory_users"] == 1

    def test_outsider_cannot_read_edit_merge_or_delete(self):
        person = MemoryUserFactory(workspace=self.workspace)
        foreign = MemoryUserFactory(workspace=self.other_workspace)
        outsider = self.api(self.outsider_key)
        assert outsider.get(f"{LIST}{person.pk}/").status_code == 404
        assert outsider.patch(f"{LIST}{person.pk}/", {"display_name": "x"}, format="json").status_code == 404
        assert outsider.delete(f"{LIST}{person.pk}/").status_code == 404
        cross = outsider.post(f"{LIST}{foreign.pk}/merge/", {"target": str(person.pk)}, format="json")
        assert cross.status_code == 404
        assert outsider.get(LIST).json()["count"] == 1
        foreign.refresh_from_db()
        assert foreign.merged_into_id is None

    def test_outsider_cannot_erase_a_merged_record_or_learn_its_survivor(self):
        survivor = MemoryUserFactory(workspace=self.workspace)
        merged = MemoryUserFactory(workspace=self.workspace)
        memory_user_merge(source=merged, target=survivor, actor="operator:owner")
        outsider = self.api(self.outsider_key)
        for response in (
            outsider.delete(f"{LIST}{merged.pk}/"),
            outsider.post(f"{LIST}batch-delete/", {"ids": [str(merged.pk)]}, format="json"),
        ):
            assert response.status_code == 404, response.content
            assert str(survivor.pk) not in response.content.decode()
        # Inside the workspace the refusal names the survivor; an agent-bound key is refused first.
        assert self.api(self.agent_key).delete(f"{LIST}{merged.pk}/").status_code == 403
        assert self.api().delete(f"{LIST}{merged.pk}/").json()["error"]["fields"]["merged_into"] == [
            str(survivor.pk)
        ]
        assert MemoryUser.objects.filter(pk__in=[merged.pk, survivor.pk]).count() == 2
