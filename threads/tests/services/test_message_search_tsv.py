"""threads_message.search_tsv: the stored tsvector lexical search over messages ranks."""

from django.conf import settings
from django.db import connection

from core.testing import MemoryTestCase
from threads.tests.factories import append, make_thread


def stored_tsv(message_id):
    with connection.cursor() as cursor:
        cursor.execute("SELECT search_tsv::text FROM threads_message WHERE id = %s", [message_id])
        return cursor.fetchone()[0]


class MessageSearchVectorTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)

    def test_user_and_assistant_text_is_analysed_on_insert(self):
        """PostgreSQL fills it for every insert path (the service appends with COPY), with the
        speaker's name or role in front, as the search expects."""
        user, reply = append(self.thread, ("user", "Booking flights to Lisbon"), ("assistant", "Done."))
        assert stored_tsv(user.pk) == "'book':2 'flight':3 'lisbon':5 'user':1"
        assert "'assist':1" in stored_tsv(reply.pk)

    def test_other_messages_are_not_analysed(self):
        """System and tool messages, and empty content, are never ranked: nothing is stored."""
        system, call = append(
            self.thread,
            ("system", "You are helpful."),
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": ""}]},
        )
        (result,) = append(self.thread, {"role": "tool", "tool_call_id": "c1", "content": "Lisbon"})
        assert stored_tsv(system.pk) is None
        assert stored_tsv(call.pk) is None
        assert stored_tsv(result.pk) is None

    def test_the_largest_accepted_message_is_stored(self):
        """A message at the content limit of distinct words stays far below the tsvector limit."""
        words = " ".join(f"w{i}x" for i in range(settings.THREADS_MAX_CONTENT_CHARS // 8))
        content = words[: settings.THREADS_MAX_CONTENT_CHARS]
        (message,) = append(self.thread, ("user", content))
        assert "'user':1" in stored_tsv(message.pk)
