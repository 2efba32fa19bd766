"""Fair queueing of LLM-bound work per workspace (issue 14, Budgets): one workspace's backlog
does not starve another's. Measured with two workspaces: Acme queues a run for each of its
many agents, then Globex queues one; the order in which the runs finish is recorded."""

from django.test import override_settings

from core.models import LLMJob
from core.services import agent_get_or_create
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from reflection.models import ReflectionRun
from reflection.services import reflection_start

BACKLOG = 12


class FairQueueTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.busy_agents = []
        for workspace in (self.workspace, self.other_workspace):
            use_test_embeddings(self.server, workspace)
        person = memory_user_factory(self.workspace)
        for n in range(BACKLOG):
            agent = agent_get_or_create(workspace=self.workspace, slug=f"worker-{n}")
            entry_factory(agent=agent, memory_user=person, content=f"Ada asked about invoice {n}.")
            self.busy_agents.append(agent)
        self.small_person = memory_user_factory(self.other_workspace, canonical_id="mail:1")
        entry_factory(agent=self.outsider_agent, memory_user=self.small_person, content="Bo likes jazz.")

    def finish_order(self) -> list[str]:
        runs = ReflectionRun.objects.filter(state="done").select_related("workspace").order_by("finished_at")
        return [run.workspace.name for run in runs]

    @override_settings(LLM_JOBS_PER_WORKSPACE=1)
    def test_the_small_workspaces_run_is_done_early_not_behind_the_backlog(self):
        with self.captureOnCommitCallbacks(execute=True):
            for agent in self.busy_agents:
                reflection_start(agent=agent, trigger="api", actor="test")
            reflection_start(agent=self.outsider_agent, trigger="api", actor="test")
        order = self.finish_order()
        assert len(order) == BACKLOG + 1
        # First in, first out would finish Globex's run last (position 13 of 13).
        queued = list(LLMJob.objects.order_by("created_at", "id").values_list("workspace__name", flat=True))
        assert queued.index("Globex") == BACKLOG
        position = order.index("Globex") + 1
        print(f"fair queue: Globex's run finished {position} of {len(order)} (FIFO: {BACKLOG + 1})")
        assert position <= 2, order
        assert set(LLMJob.objects.values_list("state", flat=True)) == {"done"}

    @override_settings(LLM_JOBS_PER_WORKSPACE=1)
    def test_a_workspace_never_has_more_than_its_cap_in_the_broker(self):
        # Nothing runs: the jobs are claimed and sent, but the tasks are not executed.
        from unittest import mock

        with mock.patch("core.lib.fair_queue._send"), self.captureOnCommitCallbacks(execute=True):
            for agent in self.busy_agents:
                reflection_start(agent=agent, trigger="api", actor="test")
            reflection_start(agent=self.outsider_agent, trigger="api", actor="test")
        sent = LLMJob.objects.filter(state="sent")
        assert sorted(sent.values_list("workspace__name", flat=True)) == ["Acme", "Globex"]
        assert LLMJob.objects.filter(state="queued", workspace=self.workspace).count() == BACKLOG - 1
