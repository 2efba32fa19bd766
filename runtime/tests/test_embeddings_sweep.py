"""The periodic sweep repairs every tier's missing vectors (issue 11, finding 5)."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from facts.models import FactEmbedding
from facts.tests.factories import FactFactory
from procedures.models import Procedure, ProcedureEmbedding
from runtime.tasks import embeddings_sweep_task
from threads.models import MessageEmbedding
from threads.services import thread_append_messages, thread_create


class EmbeddingsSweepTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.agent.memory_settings = {"semantic_recall": True}
        cls.agent.save()
        person = memory_user_factory(cls.workspace)
        for n in range(2):
            FactFactory(workspace=cls.workspace, key=f"colour_{n}", value="green")
            Procedure.objects.create(
                workspace=cls.workspace,
                name=f"Refunds {n}",
                procedure_type=Procedure.ProcedureType.PROMPT_TEMPLATE,
                content="Do the thing.",
            )
            entry_factory(agent=cls.agent, memory_user=person, content=f"Ada moved house {n}.", embed=False)
        # Appended without their tasks running (on-commit callbacks never fire here): a lost task.
        thread = thread_create(workspace=cls.workspace, agent=cls.agent, memory_user=person)
        messages = [{"role": "user", "content": "Tea."}, {"role": "assistant", "content": "Sure."}]
        thread_append_messages(thread=thread, messages=messages)

    def sweep(self, **kwargs):
        return embeddings_sweep_task.apply(kwargs={"grace_seconds": 0, **kwargs}).get()

    def counts(self):
        return (
            FactEmbedding.objects.count(),
            ProcedureEmbedding.objects.count(),
            EntryEmbedding.objects.count(),
            MessageEmbedding.objects.count(),
        )

    def test_one_run_embeds_what_every_tier_is_missing_and_a_second_run_nothing(self):
        """Facts, procedures, entries and messages without a vector get one; the sweep is idempotent."""
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            assert self.sweep() == {"facts": 2, "procedures": 2, "entries": 2, "messages": 2}
            assert self.counts() == (2, 2, 2, 2)
            calls = len(server.requests)
            assert self.sweep() == {}
            assert len(server.requests) == calls

    def test_a_run_is_bounded_per_tier(self):
        """`limit` rows per tier and run, oldest first; the next runs take the rest."""
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            assert self.sweep(limit=1) == {"facts": 1, "procedures": 1, "entries": 1, "messages": 1}
            assert self.counts() == (1, 1, 1, 1)
            self.sweep(limit=1)
            assert self.counts() == (2, 2, 2, 2)

    def test_rows_younger_than_the_grace_period_are_left_to_their_own_task(self):
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            assert self.sweep(grace_seconds=3600) == {}
            assert self.counts() == (0, 0, 0, 0)

    def test_a_workspace_whose_endpoint_keeps_failing_does_not_starve_the_others(self):
        """Its older rows take their turn and fail; the other workspace's rows still get vectors."""
        from core.services import provider_credential_set

        FactEmbedding.objects.all().delete()
        broken = self.other_workspace
        for n in range(3):
            FactFactory(workspace=broken, key=f"old_{n}", created_at=timezone.now() - timedelta(days=1))
        # Nothing listens on port 9 (discard): every request fails at once.
        provider_credential_set(
            workspace=broken, purpose="embedding", base_url="http://127.0.0.1:9/v1", model="m", api_key="k"
        )
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            with self.assertLogs("runtime.tasks", level="WARNING") as logs:
                written = self.sweep(limit=2)
        assert written["facts"] == 1
        assert FactEmbedding.objects.filter(fact__workspace=self.workspace).count() == 1
        assert f"of workspace {broken.pk} failed" in logs.output[0]

    def test_a_failing_endpoint_is_logged_and_retried_by_the_next_run(self):
        """A tier whose endpoint fails writes nothing; the run does not fail and the next one repairs it."""
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            server.fail_next = 1
            with self.assertLogs("runtime.tasks", level="WARNING"):
                written = self.sweep()
            assert "facts" not in written and written["procedures"] == 2
            assert self.sweep() == {"facts": 2}
            assert self.counts() == (2, 2, 2, 2)
