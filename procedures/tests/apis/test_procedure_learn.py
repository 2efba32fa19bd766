from datetime import timedelta

from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase, cache_down
from procedures.models import Procedure, ProcedureLearningState
from procedures.services import procedure_create, procedures_learn_sweep

EPISODES = "/api/v1/episodes/"
PROCEDURES = "/api/v1/procedures/"
LEARN = "/api/v1/procedures/learn/"
MATCH = "/api/v1/procedures/match/"
REFUND_TOOLS = [{"tool": "lookup_order", "result": "found"}, {"tool": "refund_order", "result": "ok"}]


class ProcedureLearnApiTests(MemoryTestCase):
    def setUp(self):
        cache.clear()

    def episode(self, goal="Refund order 4411", outcome="success", agent="assistant", key=None, **extra):
        body = {
            "agent": agent,
            "trigger_type": "chat",
            "input": {"goal": goal},
            "actions": REFUND_TOOLS,
            "outcome": outcome,
            "final_output": "Refunded",
            **extra,
        }
        response = self.api(key).post(EPISODES, body, format="json")
        assert response.status_code == 201, response.json()
        return response.json()["id"]

    def learn(self, key=None, **body):
        response = self.api(key).post(LEARN, body, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def test_three_successes_with_one_trigger_propose_one_inactive_procedure(self):
        ids = [
            self.episode("Refund order 4411"),
            self.episode(
                "refund the order 5522, please",
                actions=[{"tool": "lookup_order"}, {"tool": "apologise"}, {"tool": "refund_order"}],
            ),
            self.episode("Order 9 refund"),
        ]
        self.episode("Book a table for two")  # another trigger, alone
        data = self.learn()
        assert len(data["proposed"]) == 1, data
        proposal = data["proposed"][0]
        assert sorted(proposal["source_episode_ids"]) == sorted(ids)
        assert (proposal["origin"], proposal["is_active"], proposal["agent"]) == (
            "self_learned",
            False,
            "assistant",
        )
        assert proposal["trigger_conditions"] == {"goal_contains_all": ["order", "refund"]}
        assert proposal["procedure_type"] == "tool_sequence"
        assert proposal["content"] == [{"tool": "lookup_order"}, {"tool": "refund_order"}]
        assert proposal["created_by"] == "system:learning"
        assert (proposal["success_count"], proposal["failure_count"], proposal["success_rate"]) == (3, 0, 1.0)
        assert data["runs_counted"] == 3
        assert AuditEvent.objects.filter(
            entity_type="procedure", entity_id=proposal["id"], action="create", actor="system:learning"
        ).exists()
        again = self.learn()
        assert (again["proposed"], again["runs_counted"], again["evidence_added"]) == ([], 0, 0)
        listed = self.api().get(PROCEDURES, {"origin": "self_learned"}).json()
        assert listed["count"] == 1

    def test_a_fourth_success_extends_the_evidence_without_a_second_proposal(self):
        first = [self.episode() for _ in range(3)]
        proposal = self.learn()["proposed"][0]
        fourth = self.episode("Refund my order 77")
        data = self.learn()
        assert (data["proposed"], data["runs_counted"], data["evidence_added"]) == ([], 1, 1)
        procedure = self.api().get(f"{PROCEDURES}{proposal['id']}/").json()
        assert sorted(procedure["source_episode_ids"]) == sorted([*first, fourth])
        assert (procedure["times_used"], procedure["success_count"]) == (4, 4)
        assert Procedure.objects.filter(origin="self_learned").count() == 1

    def test_mixed_outcomes_below_the_ratio_floor_propose_nothing(self):
        for _ in range(3):
            self.episode()
        for _ in range(2):
            self.episode(outcome="failure")
        data = self.learn()  # 3 of 5: 60 %, under the 80 % floor
        assert (data["proposed"], data["episodes_scanned"]) == ([], 5)
        with override_settings(PROCEDURE_LEARN_MIN_SUCCESS_RATIO=0.5):
            assert len(self.learn()["proposed"]) == 1

    def test_too_few_successes_or_too_old_ones_propose_nothing(self):
        self.episode()
        self.episode(started_at=(timezone.now() - timedelta(days=40)).isoformat())
        self.episode(started_at=(timezone.now() - timedelta(days=41)).isoformat())
        assert self.learn()["proposed"] == []

    def test_a_failed_run_lowers_the_success_rate(self):
        for _ in range(3):
            self.episode()
        proposal = self.learn()["proposed"][0]
        self.episode("Refund order 12", outcome="failure")
        data = self.learn()
        assert (data["runs_counted"], data["evidence_added"]) == (1, 0)
        procedure = self.api().get(f"{PROCEDURES}{proposal['id']}/").json()
        assert (procedure["success_count"], procedure["failure_count"]) == (3, 1)
        assert procedure["success_rate"] == 0.75
        assert len(procedure["source_episode_ids"]) == 3

    def test_an_episode_naming_its_procedure_counts_for_it_once_and_feeds_no_proposal(self):
        taught = procedure_create(
            workspace=self.workspace, name="Refunds", procedure_type="prompt_template", content="Refund it."
        )
        for outcome in ("success", "failure", "success", "success"):
            self.episode(outcome=outcome, trigger_payload={"procedure_id": str(taught.pk)})
        data = self.learn()
        assert (data["proposed"], data["runs_counted"]) == ([], 4)
        assert self.learn()["runs_counted"] == 0
        taught.refresh_from_db()
        assert (taught.times_used, taught.success_count, taught.failure_count) == (4, 3, 1)
        outsider_procedure = procedure_create(
            workspace=self.other_workspace, name="Theirs", procedure_type="prompt_template", content="x"
        )
        self.episode(trigger_payload={"procedure_id": str(outsider_procedure.pk)})
        self.learn()
        outsider_procedure.refresh_from_db()
        assert outsider_procedure.times_used == 0

    def test_an_explicit_task_groups_runs_whatever_their_wording(self):
        for goal in ("Money back for 4411", "Customer wants cash back", "Return please"):
            self.episode(goal, trigger_payload={"task": "Refund order"}, actions=[])
        proposal = self.learn()["proposed"][0]
        assert proposal["trigger_conditions"] == {"goal_contains_all": ["refund", "order"]}
        assert proposal["procedure_type"] == "prompt_template"
        assert proposal["content"]["examples"] == ["Refunded"] * 3

    def test_other_agents_and_workspaces_never_feed_a_proposal(self):
        self.episode(agent="assistant")
        self.episode(agent="researcher")
        self.episode(agent="researcher")
        for _ in range(3):
            self.episode(agent="assistant", key=self.outsider_key)
        assert self.learn()["proposed"] == []
        assert not Procedure.objects.filter(workspace=self.workspace).exists()
        theirs = self.learn(key=self.outsider_key)["proposed"]
        assert len(theirs) == 1
        assert len(theirs[0]["source_episode_ids"]) == 3
        assert self.api().get(f"{PROCEDURES}{theirs[0]['id']}/").status_code == 404

    def test_an_agent_bound_key_learns_from_its_agent_only(self):
        for _ in range(3):
            self.episode(agent="researcher")
        data = self.learn(key=self.agent_key)
        assert (data["proposed"], data["episodes_scanned"]) == ([], 0)
        response = self.api(self.agent_key).post(LEARN, {"agent": "researcher"}, format="json")
        assert response.status_code == 404
        assert self.api(self.read_only_key).post(LEARN, {}, format="json").status_code == 403
        assert self.api(self.owner_key).post(LEARN, {"agent": "nobody"}, format="json").status_code == 404
        assert self.api().post(LEARN, {"agent": "researcher", "extra": 1}, format="json").status_code == 400
        assert len(self.learn(agent="researcher")["proposed"]) == 1

    def test_the_proposal_matches_only_once_activated(self):
        for _ in range(3):
            self.episode()
        proposal = self.learn()["proposed"][0]
        goal = {"goal": "Could you refund my order 3141?", "agent": "assistant"}
        assert self.api().post(MATCH, goal, format="json").json()["results"] == []
        patched = self.api().patch(f"{PROCEDURES}{proposal['id']}/", {"is_active": True}, format="json")
        assert patched.status_code == 200, patched.json()
        results = self.api().post(MATCH, goal, format="json").json()["results"]
        assert [r["procedure"]["id"] for r in results] == [proposal["id"]]
        assert results[0]["matched"] == ["goal_contains_all"]

    def test_closing_an_episode_nudges_a_learning_pass(self):
        self.episode()
        self.episode()
        opened = (
            self.api()
            .post(
                EPISODES,
                {"agent": "assistant", "trigger_type": "chat", "input": {"goal": "refund order 1"}},
                format="json",
            )
            .json()
        )
        assert not Procedure.objects.exists()
        with self.captureOnCommitCallbacks(execute=True):
            closed = self.api().post(
                f"{EPISODES}{opened['id']}/close/",
                {"outcome": "success", "actions": REFUND_TOOLS},
                format="json",
            )
        assert closed.status_code == 200
        proposal = Procedure.objects.get(origin="self_learned")
        assert opened["id"] in {str(pk) for pk in proposal.source_episode_ids}
        assert ProcedureLearningState.objects.get(workspace=self.workspace).learned_at is not None
        # A commit with no episode event after the cursor queues nothing (the cursor is moved
        # past the cursor margin, which would re-read the last seconds once).
        learned_at = timezone.now()
        ProcedureLearningState.objects.filter(workspace=self.workspace).update(learned_at=learned_at)
        with self.captureOnCommitCallbacks(execute=True):
            self.api().patch(f"{PROCEDURES}{proposal.pk}/", {"description": "Reviewed"}, format="json")
        state = ProcedureLearningState.objects.get(workspace=self.workspace)
        assert state.learned_at == learned_at

    def test_the_sweep_learns_where_episodes_changed(self):
        for _ in range(3):
            self.episode()
        # Later than the cursor margin, which would otherwise re-read the last seconds once.
        later = timezone.now() + timedelta(minutes=1)
        result = procedures_learn_sweep(limit=10, now=later)
        assert (result["learned"], result["proposed"]) == (1, 1)
        again = procedures_learn_sweep(limit=10, now=later + timedelta(minutes=10))
        assert (again["learned"], again["proposed"]) == (0, 0)
        assert again["checked"] == 2  # both workspaces, the quiet one included

    def test_a_queued_pass_runs_while_the_cache_is_down(self):
        """Before: clearing the nudge raised and the pass never ran."""
        from procedures.tasks import procedures_learn_task

        for _ in range(3):
            self.episode()
        with cache_down(), self.assertLogs("procedures.services.learning", "WARNING"):
            result = procedures_learn_task(str(self.workspace.pk))
        assert result["proposed"] == 1
