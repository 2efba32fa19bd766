from core.errors import UNKNOWN_FIELD
from core.models import Agent
from core.services import AGENT_EXISTS
from core.testing import MemoryTestCase

AGENTS_URL = "/api/v1/agents/"


class AgentListApiTests(MemoryTestCase):
    def test_lists_the_workspace_agents_with_a_total(self):
        response = self.api().get(AGENTS_URL)
        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 2
        assert [agent["slug"] for agent in body["results"]] == ["assistant", "researcher"]
        assert body["results"][0]["effective_memory_settings"]["recent_messages"] == 20

    def test_outsider_does_not_see_the_workspace_agents(self):
        body = self.api(self.outsider_key).get(AGENTS_URL).json()
        assert [agent["id"] for agent in body["results"]] == [str(self.outsider_agent.id)]

    def test_agent_bound_key_sees_only_its_agent(self):
        body = self.api(self.agent_key).get(AGENTS_URL).json()
        assert [agent["slug"] for agent in body["results"]] == ["assistant"]

    def test_list_query_count_is_bounded(self):
        for index in range(5):
            Agent.objects.create(workspace=self.workspace, slug=f"bulk-{index}")
        client = self.api()
        # Key lookup, last_used_at refresh is throttled, page (short: its own total, no count).
        with self.assertNumQueries(3):
            client.get(AGENTS_URL)

    def test_registers_an_agent(self):
        response = self.api().post(
            AGENTS_URL,
            {"slug": "planner", "name": "Planner", "memory_settings": {"recent_messages": 40}},
            format="json",
        )
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["slug"] == "planner"
        assert body["effective_memory_settings"]["recent_messages"] == 40
        assert Agent.objects.filter(workspace=self.workspace, slug="planner").exists()

    def test_duplicate_slug_is_409(self):
        response = self.api().post(AGENTS_URL, {"slug": "assistant"}, format="json")
        assert response.status_code == 409
        assert response.json()["error"]["fields"] == {"slug": [AGENT_EXISTS]}

    def test_unknown_field_is_400(self):
        response = self.api().post(AGENTS_URL, {"slug": "x", "colour": "red"}, format="json")
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"colour": [UNKNOWN_FIELD]}

    def test_wrong_type_is_400_with_fields(self):
        response = self.api().post(AGENTS_URL, {"slug": ["x"]}, format="json")
        assert response.status_code == 400
        assert "slug" in response.json()["error"]["fields"]

    def test_malformed_json_is_400(self):
        response = self.api().post(AGENTS_URL, "{not json", content_type="application/json")
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "malformed_request"

    def test_invalid_memory_settings_are_400_and_nothing_is_written(self):
        response = self.api().post(
            AGENTS_URL,
            {"slug": "bad", "memory_settings": {"recent_messages": 0, "nonsense": 1, "auto_inject": "yes"}},
            format="json",
        )
        assert response.status_code == 400
        fields = response.json()["error"]["fields"]
        assert set(fields) == {"recent_messages", "nonsense", "auto_inject"}
        assert not Agent.objects.filter(slug="bad").exists()

    def test_agent_bound_key_cannot_register(self):
        response = self.api(self.agent_key).post(AGENTS_URL, {"slug": "sneaky"}, format="json")
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "workspace_key_required"
        assert not Agent.objects.filter(slug="sneaky").exists()


class AgentDetailApiTests(MemoryTestCase):
    def test_patch_overrides_and_resets_settings(self):
        url = f"{AGENTS_URL}assistant/"
        response = self.api().patch(url, {"memory_settings": {"token_limit": 4000}}, format="json")
        assert response.status_code == 200
        assert response.json()["memory_settings"] == {"token_limit": 4000}
        response = self.api().patch(url, {"memory_settings": {"token_limit": None}}, format="json")
        assert response.json()["memory_settings"] == {}
        assert response.json()["effective_memory_settings"]["token_limit"] == 2000

    def test_outsider_gets_404(self):
        assert self.api(self.outsider_key).get(f"{AGENTS_URL}researcher/").status_code == 404

    def test_agent_bound_key_gets_404_for_another_agent(self):
        assert self.api(self.agent_key).get(f"{AGENTS_URL}researcher/").status_code == 404
