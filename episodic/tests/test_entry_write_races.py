"""Writes of one person's entries racing each other (real commits, two connections)."""

from django.db import connection, transaction
from django.test import TransactionTestCase
from django.urls import reverse

from core.testing import thread_started, workspace_api_client
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services.storing import _person_lock
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings

BATCH = reverse("api:episodic_entries:batch")


class PersonWritesRaceTests(TransactionTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.workspace, self.agent, self.client_api = workspace_api_client()
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def racing(self, *targets):
        """Run `targets` on threads of their own while the person's lock is held here, so each
        has passed the checks before the lock and waits on it; then let them through."""
        errors, threads = [], []
        with transaction.atomic():
            _person_lock(agent=self.agent, memory_user=self.person)
            for target in targets:
                waiting = _waiters()
                threads.append(thread_started(target, errors))
                _until_waiters(waiting + 1)
        for thread in threads:
            thread.join(30)
        assert not errors, errors

    def test_two_batches_of_the_same_note_store_it_once(self):
        answers = []

        def batch():
            body = {
                "agent": "assistant",
                "memory_user": str(self.person.pk),
                "items": [{"content": "Ada adopted a cat named Miso."}, {"content": "Ada lives in Lisbon."}],
            }
            answers.append(self.client_api.post(BATCH, body, format="json"))

        self.racing(batch, batch)

        assert sorted(a.status_code for a in answers) == [200, 201]
        rows = EpisodicEntry.objects.filter(memory_user=self.person)
        assert sorted(rows.values_list("content", flat=True)) == [
            "Ada adopted a cat named Miso.",
            "Ada lives in Lisbon.",
        ]
        late = next(a.json() for a in answers if a.status_code == 200)
        assert {r["status"] for r in late["results"]} == {"duplicate"}

    def test_an_edit_and_a_create_of_the_same_note_leave_one_current_copy(self):
        cat = entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a dog.")
        answers = []

        def create():
            body = {"agent": "assistant", "memory_user": str(self.person.pk), "content": "Ada adopted a cat."}
            answers.append(self.client_api.post(reverse("api:episodic_entries:list"), body, format="json"))

        def edit():
            url = reverse("api:episodic_entries:detail", args=[cat.pk])
            answers.append(self.client_api.patch(url, {"content": "Ada adopted a cat."}, format="json"))

        self.racing(create, edit)

        assert sorted(a.status_code for a in answers) in ([201, 409], [200, 200])
        active = EpisodicEntry.objects.filter(memory_user=self.person, status=EpisodicEntry.Status.ACTIVE)
        assert list(active.filter(content="Ada adopted a cat.").values_list("content", flat=True)) == [
            "Ada adopted a cat."
        ]


def _waiters() -> int:
    """Backends of the test database waiting on a lock; read inside the transaction that
    holds the lock, whose statistics snapshot would otherwise stay as first read."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _until_waiters(count: int, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while _waiters() < count and time.monotonic() < deadline:
        time.sleep(0.02)
