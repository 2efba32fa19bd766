"""Episode vectors: embedded on record, re-embedded when the rendered text changes, repaired by the sweep."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from core.testing_embeddings import RacingEmbeddingProvider
from core.testing_openai import OpenAITestServer
from episodes.models import Episode, EpisodeEmbedding
from episodes.services import (
    episode_close,
    episode_create,
    episode_embed_batch,
    episode_embedding_text,
    episode_feedback,
    episode_update,
    episodes_reembed,
)
from episodic.tests.factories import TEST_EMBEDDING_MODEL, use_test_embeddings
from runtime.tasks import embeddings_sweep_task


class EpisodeEmbeddingTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)

    def record(self, **kwargs):
        kwargs.setdefault("trigger_type", "chat")
        kwargs.setdefault("input", {"goal": "refund order 4411"})
        with self.captureOnCommitCallbacks(execute=True):
            return episode_create(workspace=self.workspace, agent=self.agent, **kwargs)

    def embedded_texts(self):
        return [
            text
            for path, body in self.server.requests
            if path.endswith("/embeddings")
            for text in body["input"]
        ]

    def test_a_recorded_episode_gets_one_vector_of_its_rendered_text(self):
        """Trigger, input, outcome, output and feedback are embedded; messages and actions are not."""
        episode = self.record(
            trigger_payload={"chat_id": "c1"},
            messages=[{"role": "user", "content": "secret-message-text"}],
            outcome="failure",
            final_output={"text": "refund refused"},
            error="card expired",
        )
        (vector,) = EpisodeEmbedding.objects.filter(episode=episode)
        assert vector.model == TEST_EMBEDDING_MODEL
        assert vector.workspace_id == self.workspace.pk
        text = self.embedded_texts()[-1]
        assert text == episode_embedding_text(episode)
        assert text.splitlines() == [
            "chat (chat_id: c1)",
            "goal: refund order 4411",
            "outcome: failure",
            "output: text: refund refused",
            "error: card expired",
        ]
        assert "secret-message-text" not in text

    def test_changes_to_the_rendered_text_re_embed_and_others_do_not(self):
        """Closing and a feedback comment re-embed; a rating alone or new messages keep the vector."""
        episode = self.record()
        first = EpisodeEmbedding.objects.get(episode=episode).pk
        with self.captureOnCommitCallbacks(execute=True):
            episode = episode_update(episode=episode, actor="t", messages=[{"role": "user", "content": "hi"}])
            episode = episode_feedback(episode=episode, rating=4, comment="")
        assert EpisodeEmbedding.objects.get(episode=episode).pk == first
        with self.captureOnCommitCallbacks(execute=True):
            episode = episode_close(episode=episode, outcome="success", final_output="Refunded")
        second = EpisodeEmbedding.objects.get(episode=episode)
        assert second.pk != first
        assert "output: Refunded" in self.embedded_texts()[-1]
        with self.captureOnCommitCallbacks(execute=True):
            episode_feedback(episode=episode, rating=2, comment="too slow")
        assert EpisodeEmbedding.objects.get(episode=episode).pk != second.pk
        assert self.embedded_texts()[-1].endswith("feedback: too slow")

    def test_an_episode_edited_while_embedding_keeps_no_stale_vector(self):
        """The vector of the old text is not stored; the edit queued its own."""
        episode = Episode.objects.create(workspace=self.workspace, agent=self.agent, input={"goal": "old"})

        def edit():
            Episode.objects.filter(pk=episode.pk).update(input={"goal": "new"})

        provider = RacingEmbeddingProvider(during=edit)
        assert episode_embed_batch(episode_ids=[episode.pk], provider=provider) == 0
        assert not EpisodeEmbedding.objects.filter(episode=episode).exists()
        assert episode_embed_batch(episode_ids=[episode.pk], provider=RacingEmbeddingProvider()) == 1
        assert episode_embed_batch(episode_ids=[episode.pk], provider=RacingEmbeddingProvider()) == 0

    def test_the_sweep_embeds_episodes_recorded_without_a_vector(self):
        """Episodes of before this tier had vectors, or whose task was lost, get one from the sweep."""
        old = timezone.now() - timedelta(hours=1)
        Episode.objects.bulk_create(
            Episode(
                workspace=self.workspace,
                agent=self.agent,
                trigger_type="cron",
                input={"n": i},
                created_at=old,
            )
            for i in range(3)
        )
        young = Episode.objects.create(workspace=self.workspace, agent=self.agent, trigger_type="cron")
        written = embeddings_sweep_task()
        assert written.get("episodes") == 3
        assert not EpisodeEmbedding.objects.filter(episode=young).exists()
        assert EpisodeEmbedding.objects.count() == 3

    def test_reembed_enqueues_episodes_lacking_the_current_model(self):
        episode = Episode.objects.create(workspace=self.workspace, agent=self.agent, trigger_type="cron")
        with self.captureOnCommitCallbacks(execute=True):
            assert episodes_reembed(workspace=self.workspace) == 1
        assert EpisodeEmbedding.objects.filter(episode=episode, model=TEST_EMBEDDING_MODEL).exists()
