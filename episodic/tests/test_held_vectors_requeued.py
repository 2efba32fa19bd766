"""Rows a vector job skipped because another transaction held them (SKIP LOCKED) get their
vector once the holder commits, also where the periodic sweep does not look: an entry that
keeps a vector of the previous model during a re-embed, a message of an agent without
semantic recall. The job queues the skipped ids again after its commit, a bounded number of
times (`EMBED_SKIPPED_ATTEMPTS`)."""

from unittest import mock

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.lib.sweep import EMBED_SKIPPED_ATTEMPTS
from core.services import agent_register, provider_credential_set, workspace_create
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding
from episodic.services import entry_embed_batch
from episodic.tasks import entry_embed_task
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from retention.tests.test_engine_append_race import Elsewhere
from runtime.tasks import embeddings_sweep_task
from threads.models import MessageEmbedding
from threads.services import message_embed_batch
from threads.tasks import message_embed_task
from threads.tests.factories import append, make_thread


class Queued:
    """Records what a task is sent (instead of running it eagerly) to run it later."""

    def __init__(self, task):
        self.task, self.sent = task, []
        self.patch = mock.patch.object(task, "apply_async", self.record)

    def record(self, args=None, kwargs=None, **options):
        self.sent.append((tuple(args or ()), dict(kwargs or {}), options))

    def run(self):
        sent, self.sent = self.sent, []
        for args, kwargs, _ in sent:
            self.task.apply(args=args, kwargs=kwargs)


class HeldRowTestCase(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Held rows")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)
        self.server = OpenAITestServer()
        self.server.__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)

    def held_during(self, sql, pk, job):
        """Run `job` on its own connection while this one holds row `pk` (`sql`)."""
        work = Elsewhere(job)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql, [pk])
            work.start()
            outcome = work.finish()
        assert "error" not in outcome, outcome
        return outcome["value"]


class HeldEntryTests(HeldRowTestCase):
    HOLD = "SELECT id FROM episodes_episodicentry WHERE id = %s FOR NO KEY UPDATE"

    def test_an_entry_held_during_a_re_embed_gets_the_new_models_vector_after_the_holder(self):
        """The entry keeps its old model's vector, so the sweep never looks at it; the job's
        retry, sent after the holder committed, writes the new model's vector."""
        entry = entry_factory(agent=self.agent, memory_user=self.person, content="Ada likes tea.")
        provider_credential_set(
            workspace=self.workspace, purpose="embedding", base_url=self.server.url, model="model-two"
        )
        queued = Queued(entry_embed_task)
        with queued.patch:
            assert self.held_during(self.HOLD, entry.pk, lambda: entry_embed_batch(entry_ids=[entry.pk])) == 0
            embeddings_sweep_task(grace_seconds=0)
            queued.run()
        models = set(EntryEmbedding.objects.filter(entry=entry).values_list("model", flat=True))
        assert "model-two" in models

    def test_retries_of_an_entry_held_throughout_stop_after_the_bound(self):
        """An entry held through every attempt is queued EMBED_SKIPPED_ATTEMPTS times, each
        later than the one before, and then left alone."""
        entry = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada likes tea.", embed=False
        )
        queued = Queued(entry_embed_task)
        countdowns = []
        with queued.patch:
            self.held_during(self.HOLD, entry.pk, lambda: entry_embed_batch(entry_ids=[entry.pk]))
            while queued.sent:
                args, kwargs, options = queued.sent.pop()
                countdowns.append(options["countdown"])
                self.held_during(self.HOLD, entry.pk, lambda a=args, k=kwargs: entry_embed_task.apply(a, k))
        assert len(countdowns) == EMBED_SKIPPED_ATTEMPTS
        assert countdowns == sorted(set(countdowns))
        assert not EntryEmbedding.objects.filter(entry=entry).exists()


class HeldMessageTests(HeldRowTestCase):
    HOLD = "SELECT id FROM threads_message WHERE id = %s FOR NO KEY UPDATE"

    def test_a_message_of_an_agent_without_semantic_recall_held_during_its_job_gets_its_vector(self):
        """The sweep embeds only messages of agents with semantic recall; a re-embed or an
        import queued this one, and the job's retry embeds it after the holder commits."""
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        (message,) = append(thread, ("user", "Tea, please."))
        queued = Queued(message_embed_task)
        with queued.patch:
            assert (
                self.held_during(self.HOLD, message.pk, lambda: message_embed_batch(message_ids=[message.pk]))
                == 0
            )
            embeddings_sweep_task(grace_seconds=0)
            queued.run()
        assert MessageEmbedding.objects.filter(message=message).exists()

    def test_a_message_of_a_thread_without_a_person_held_during_its_job_gets_its_vector(self):
        """The sweep skips threads without a person; the job's retry embeds the message."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        (message,) = append(thread, ("assistant", "Here is your tea."))
        queued = Queued(message_embed_task)
        with queued.patch:
            self.held_during(self.HOLD, message.pk, lambda: message_embed_batch(message_ids=[message.pk]))
            embeddings_sweep_task(grace_seconds=0)
            queued.run()
        assert MessageEmbedding.objects.filter(message=message).exists()
