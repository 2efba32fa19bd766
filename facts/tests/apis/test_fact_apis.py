from core.models import AuditEvent
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory, ThreadFactory

LIST = "/api/v1/facts/"
REMEMBER = "/api/v1/facts/remember/"
LOOKUP = "/api/v1/facts/lookup/"
BATCH = "/api/v1/facts/batch-delete/"


class FactApiTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.thread = ThreadFactory(agent=cls.agent, memory_user=cls.person)
        cls.other_thread = ThreadFactory(agent=cls.other_agent, memory_user=cls.person)

    def remember(self, **kwargs):
        kwargs.setdefault("workspace", self.workspace)
        kwargs.setdefault("scope", "global")
        return fact_remember(**kwargs).fact

    def test_remember_creates_then_confirms_then_supersedes(self):
        body = {"key": "user_timezone", "value": "UTC", "scope": "user", "memory_user": str(self.person.pk)}
        created = self.api().post(REMEMBER, body, format="json")
        assert created.status_code == 201, created.json()
        assert created.json()["outcome"] == "created"
        confirmed = self.api().post(REMEMBER, body, format="json")
        assert confirmed.status_code == 200
        assert confirmed.json()["fact"]["times_confirmed"] == 1
        changed = self.api().post(REMEMBER, {**body, "value": "CET"}, format="json")
        assert changed.json()["outcome"] == "superseded"
        assert changed.json()["previous"] == created.json()["fact"]["id"]
        skipped = self.api().post(REMEMBER, {**body, "value": "PST", "overwrite": False}, format="json")
        assert skipped.status_code == 200
        assert skipped.json()["outcome"] == "skipped"
        assert skipped.json()["fact"]["value"] == "CET"
        event = AuditEvent.objects.filter(entity_type="fact").first()
        assert event.actor == f"api_key:{self.owner_api_key.prefix}"

    def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(self):
        cases = [
            ({"key": "k", "value": 1, "scope": "session"}, "thread"),
            ({"key": "k", "value": 1, "scope": "user"}, "memory_user"),
            ({"key": "k", "value": 1, "scope": "global", "confidence": 2}, "confidence"),
            ({"key": "k", "value": 1, "scope": "galaxy"}, "scope"),
            ({"key": "k", "value": 1, "scope": "global", "fact_type": "gossip"}, "fact_type"),
            ({"key": "k", "value": 1, "scope": "global", "colour": "red"}, "colour"),
            ({"key": "k", "value": "x" * 20000, "scope": "global"}, "value"),
        ]
        for body, field in cases:
            response = self.api().post(REMEMBER, body, format="json")
            assert response.status_code == 400, (body, response.json())
            assert field in response.json()["error"]["fields"], (body, response.json())
        assert not Fact.objects.exists()

    def test_lookup_resolves_the_most_specific_scope(self):
        self.remember(key="greeting", value="hello")
        self.remember(key="greeting", value="hi agent", scope="agent", agent=self.agent)
        self.remember(key="greeting", value="hi you", scope="user", memory_user=self.person)
        self.remember(key="greeting", value="hi here", scope="session", thread=self.thread)
        params = {"key": "greeting", "agent": "assistant"}
        assert self.api().get(LOOKUP, params).json()["value"] == "hi agent"
        params["memory_user"] = str(self.person.pk)
        assert self.api().get(LOOKUP, params).json()["value"] == "hi you"
        params["thread"] = str(self.thread.pk)
        response = self.api().get(LOOKUP, params)
        assert response.json()["value"] == "hi here"
        assert response.json()["access_count"] == 1
        assert self.api().get(LOOKUP, {"key": "greeting"}).json()["value"] == "hello"
        assert self.api().get(LOOKUP, {"key": "nothing"}).status_code == 404

    def test_list_shows_current_versions_with_filters_and_totals(self):
        for n in range(3):
            self.remember(key=f"k{n}", value=n)
        self.remember(key="k0", value="changed")
        self.remember(
            key="pref", value="x", scope="user", memory_user=self.person, fact_type="user_preference"
        )
        self.api().get(LIST)  # the key's last_used_at is refreshed once, not per request
        with self.assertNumQueries(2):  # key, page (short: its own total, no count)
            response = self.api().get(LIST)
        assert response.json()["count"] == 4
        assert self.api().get(LIST, {"current": "all"}).json()["count"] == 5
        assert self.api().get(LIST, {"current": "false"}).json()["results"][0]["value"] == 0
        assert self.api().get(LIST, {"fact_type": "user_preference"}).json()["count"] == 1
        assert (
            self.api().get(LIST, {"scope": "user", "memory_user": str(self.person.pk)}).json()["count"] == 1
        )
        assert self.api().get(LIST, {"q": "changed"}).json()["count"] == 1
        assert self.api().get(LIST, {"ordering": "key"}).json()["results"][0]["key"] == "k0"
        assert self.api().get(LIST, {"min_confidence": "abc"}).status_code == 400

    def test_detail_patch_supersedes_value_and_history_lists_versions(self):
        fact = self.remember(key="city", value="Paris")
        response = self.api().patch(f"{LIST}{fact.pk}/", {"value": "Lyon"}, format="json")
        assert response.status_code == 200
        new_id = response.json()["id"]
        assert new_id != str(fact.pk)
        history = self.api().get(f"{LIST}{new_id}/history/").json()
        assert [v["value"] for v in history["results"]] == ["Lyon", "Paris"]
        stale = self.api().patch(f"{LIST}{fact.pk}/", {"value": "Nice"}, format="json")
        assert stale.status_code == 409
        meta = self.api().patch(f"{LIST}{new_id}/", {"confidence": 0.3}, format="json")
        assert meta.json()["confidence"] == 0.3
        assert meta.json()["id"] == new_id

    def test_delete_and_batch_delete(self):
        facts = [self.remember(key=f"k{n}", value=n) for n in range(3)]
        assert self.api().delete(f"{LIST}{facts[0].pk}/").json() == {"facts": 1}
        response = self.api().post(BATCH, {"ids": [str(f.pk) for f in facts[1:]]}, format="json")
        assert response.json() == {"facts": 2}
        assert not Fact.objects.exists()
        assert AuditEvent.objects.filter(entity_type="fact", action="delete").count() == 3

    def test_batch_delete_with_an_id_of_another_workspace_deletes_nothing(self):
        mine = self.remember(key="mine", value=1)
        theirs = fact_remember(workspace=self.other_workspace, key="theirs", value=1, scope="global").fact
        response = self.api().post(BATCH, {"ids": [str(mine.pk), str(theirs.pk)]}, format="json")
        assert response.status_code == 404
        assert Fact.objects.count() == 2

    def test_outsider_cannot_read_edit_or_delete(self):
        fact = self.remember(key="secret", value="s")
        outsider = self.api(self.outsider_key)
        assert outsider.get(f"{LIST}{fact.pk}/").status_code == 404
        assert outsider.patch(f"{LIST}{fact.pk}/", {"value": "x"}, format="json").status_code == 404
        assert outsider.delete(f"{LIST}{fact.pk}/").status_code == 404
        assert outsider.get(LIST).json()["count"] == 0
        assert outsider.get(LOOKUP, {"key": "secret"}).status_code == 404
        assert outsider.post(BATCH, {"ids": [str(fact.pk)]}, format="json").status_code == 404
        assert Fact.objects.get(pk=fact.pk).value == "s"

    def test_an_agent_bound_key_sees_only_its_agent_facts_and_shared_ones(self):
        self.remember(key="shared", value=1)
        mine = self.remember(key="mine", value=1, scope="agent", agent=self.agent)
        theirs = self.remember(key="theirs", value=1, scope="agent", agent=self.other_agent)
        other_session = self.remember(key="s", value=1, scope="session", thread=self.other_thread)
        client = self.api(self.agent_key)
        keys = {f["key"] for f in client.get(LIST).json()["results"]}
        assert keys == {"shared", "mine"}
        assert client.get(f"{LIST}{theirs.pk}/").status_code == 404
        assert client.get(f"{LIST}{other_session.pk}/").status_code == 404
        assert client.get(f"{LIST}{mine.pk}/").status_code == 200
        body = {"key": "k", "value": 1, "scope": "agent", "agent": "researcher"}
        assert client.post(REMEMBER, body, format="json").status_code == 404
        assert client.get(LOOKUP, {"key": "s", "thread": str(self.other_thread.pk)}).status_code == 404

    def test_a_read_only_key_reads_but_cannot_remember(self):
        self.remember(key="k", value=1)
        client = self.api(self.read_only_key)
        assert client.get(LIST).status_code == 200
        assert (
            client.post(REMEMBER, {"key": "k", "value": 2, "scope": "global"}, format="json").status_code
            == 403
        )
