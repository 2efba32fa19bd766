"""Every refused /memories form gets its status from one helper, browser.lib.rendering.refused.

These forms re-rendered their errors at 200 for a plain form post too, so a client without
htmx (a script, a browser with JavaScript off, the isolation matrix) could not tell a refused
write from a stored one. A plain post now answers the refusal's own status (400 for the form's
errors, the service's 404 or 409), with the same errors in the page; htmx keeps its 200, which
htmx 2 swaps in place."""

import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from browser.services import ALREADY_MEMBER, MEMBER_ADD_REFUSED
from browser.tests.base import BrowserTestCase
from browser.tests.factories import memory_user_make
from browser.views.users import MERGE_TARGET_UNKNOWN
from checkpoints.services import checkpoint_put
from core.models import ApiKey, Membership
from core.testing_openai import OpenAITestServer
from episodes.models import Episode
from episodes.services import episode_create
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import CANONICAL_ID_TAKEN, MERGE_SOURCE_MERGED_ELSEWHERE, memory_user_merge
from threads.tests.factories import make_thread
from webhooks.models import WebhookSubscription

SCRIPT = settings.BASE_DIR / "static" / "memories" / "memories.js"


def script_constant(name: str) -> str:
    """A string constant of memories.js, as the browser runs it."""
    return re.search(rf'var {name} = "([^"]*)";', SCRIPT.read_text()).group(1)


class RefusedFormCase(BrowserTestCase):
    def both(self, url, data, *, target="main"):
        """The htmx answer and the plain form post's answer to the same refused input."""
        htmx = self.htmx("post", url, data, target=target)
        plain = self.client.post(url, data)
        return htmx, plain

    def assert_refused(self, htmx, plain, text: str, *, status: int = 400):
        assert htmx.status_code == 200, htmx.status_code
        assert text in htmx.content.decode(), text
        assert plain.status_code == status, plain.status_code
        assert text in plain.content.decode(), text
        assert "<html" in plain.content.decode(), "a plain post gets the whole page"


class WorkspaceAdminRefusalTests(RefusedFormCase):
    def setUp(self):
        self.login(self.owner)

    def test_a_member_form_with_an_unknown_role_is_a_400_without_htmx(self):
        htmx, plain = self.both(self.url("memories:member-add"), {"username": "newbie", "role": "emperor"})
        self.assert_refused(htmx, plain, "Select a valid choice.")
        assert not get_user_model().objects.filter(username="newbie").exists()

    def test_a_member_refused_by_the_service_is_a_400_without_htmx(self):
        htmx, plain = self.both(self.url("memories:member-add"), {"username": "ghost", "role": "viewer"})
        self.assert_refused(htmx, plain, MEMBER_ADD_REFUSED)
        htmx, plain = self.both(self.url("memories:member-add"), {"username": "viewer", "role": "admin"})
        self.assert_refused(htmx, plain, ALREADY_MEMBER)
        assert Membership.objects.get(user=self.viewer, workspace=self.workspace).role == "viewer"

    def test_an_api_key_for_an_agent_of_another_workspace_is_a_400_without_htmx(self):
        self.outsider_agent.slug = "only-elsewhere"
        self.outsider_agent.save(update_fields=["slug"])
        htmx, plain = self.both(self.url("memories:api-key-create"), {"name": "x", "agent": "only-elsewhere"})
        self.assert_refused(htmx, plain, "Select a valid choice")
        assert "Cache-Control" not in plain or "no-store" not in plain["Cache-Control"]
        assert not ApiKey.objects.filter(name="x").exists()


class TabRefusalTests(RefusedFormCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace)
        cls.bob = memory_user_make(cls.workspace, canonical_id="slack:U42", display_name="Bob")
        cls.foreign = memory_user_make(cls.other_workspace, canonical_id="telegram:9", display_name="Zed")
        cls.fact = fact_remember(
            workspace=cls.workspace, key="tea", value="green", scope="user", memory_user=cls.ada
        ).fact
        cls.episode = episode_create(workspace=cls.workspace, agent=cls.agent, trigger_type="chat")
        thread = make_thread(workspace=cls.workspace, agent=cls.agent, title="Flow")
        cls.checkpoint = checkpoint_put(
            thread=thread, checkpoint_id="cp-1", type="json", data=b"{}", metadata={"step": 1}
        )[0]

    def setUp(self):
        self.login(self.teammate)

    def test_an_inline_row_edit_with_a_bad_value_is_a_400_without_htmx(self):
        url = self.url("memories:fact-edit", pk=self.fact.pk)
        data = {"value": "green", "fact_type": "user_preference", "confidence": "7", "evidence": ""}
        htmx, plain = self.both(url, data, target=f"row-{self.fact.pk}")
        self.assert_refused(htmx, plain, "less than or equal to 1")
        assert 'class="editing"' in htmx.content.decode()
        assert Fact.objects.get(pk=self.fact.pk).confidence != 7

    def test_an_inline_row_edit_the_service_refuses_keeps_the_services_status(self):
        url = self.url("memories:user-edit", pk=self.bob.pk)
        data = {"display_name": "Bob", "canonical_id": self.ada.canonical_id}
        htmx, plain = self.both(url, data, target=f"row-{self.bob.pk}")
        self.assert_refused(htmx, plain, CANONICAL_ID_TAKEN, status=409)
        assert MemoryUser.objects.get(pk=self.bob.pk).canonical_id == "slack:U42"

    def test_a_card_edit_with_bad_json_is_a_400_without_htmx(self):
        url = self.url("memories:episode-record-edit", pk=self.episode.pk)
        data = {"trigger_type": "chat", "error": "", "input": "{not json", "final_output": ""}
        htmx, plain = self.both(url, data, target="episode-record")
        self.assert_refused(htmx, plain, "JSON")
        assert Episode.objects.get(pk=self.episode.pk).input == self.episode.input

    def test_a_checkpoint_metadata_card_with_a_list_is_a_400_without_htmx(self):
        url = self.url("memories:checkpoint-edit", pk=self.checkpoint.pk)
        htmx, plain = self.both(url, {"metadata": "[1, 2]"}, target="checkpoint-metadata")
        assert (htmx.status_code, plain.status_code) == (200, 400)
        self.checkpoint.refresh_from_db()
        assert self.checkpoint.metadata == {"step": 1}

    def test_a_merge_into_a_person_of_another_workspace_is_a_400_in_the_merge_form(self):
        url = self.url("memories:user-merge", pk=self.bob.pk)
        htmx, plain = self.both(url, {"target": str(self.foreign.pk)})
        self.assert_refused(htmx, plain, MERGE_TARGET_UNKNOWN)
        assert '"level": "error"' in htmx["HX-Trigger"]
        assert f'value="{self.foreign.pk}"' in plain.content.decode()
        assert MemoryUser.objects.get(pk=self.bob.pk).merged_into_id is None

    def test_a_merge_without_a_target_is_a_400_in_the_merge_form(self):
        htmx, plain = self.both(self.url("memories:user-merge", pk=self.bob.pk), {"target": ""})
        self.assert_refused(htmx, plain, "This field is required.")
        assert MemoryUser.objects.get(pk=self.bob.pk).merged_into_id is None


class EmbeddedRefusalTests(RefusedFormCase):
    """Forms whose happy path embeds text: a local server speaks the embeddings protocol."""

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.ada = memory_user_make(self.workspace)
        self.login(self.teammate)

    def test_a_new_entry_with_empty_content_is_a_400_without_htmx(self):
        data = {
            "agent": "assistant",
            "memory_user": str(self.ada.pk),
            "content": "   ",
            "evidence": "",
            "source": "agent_direct",
        }
        htmx, plain = self.both(self.url("memories:entry-create"), data)
        self.assert_refused(htmx, plain, "This field is required")
        assert not EpisodicEntry.objects.exists()

    def test_a_review_edit_emptied_is_a_400_without_htmx(self):
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        held = entry_create(
            agent=self.agent, memory_user=self.ada, content="Ada keeps bees on her roof.", actor="t"
        ).entry
        url = self.url("memories:review-edit", tier="entry", pk=held.pk)
        htmx, plain = self.both(url, {"content": "   "})
        self.assert_refused(htmx, plain, "This field is required")
        assert htmx["HX-Retarget"] == f"#row-entry-{held.pk}"
        assert EpisodicEntry.objects.get(pk=held.pk).review == "held"


class OversizedBodyTests(BrowserTestCase):
    """A body Django refuses before any view runs (over DATA_UPLOAD_MAX_MEMORY_SIZE, or more
    fields than DATA_UPLOAD_MAX_NUMBER_FIELDS) was its bare 400 page with no reason in it, so
    htmx showed only "Something went wrong (400)". It is now a 413 saying so
    (memory_project.urls.handler400), which memories.js names; any other bare 400 (a
    disallowed host) is not mistaken for it."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.fact = fact_remember(workspace=cls.workspace, key="tea", value="green", scope="global").fact

    def setUp(self):
        # CSRF enforced as in a browser: the middleware reads the body first, and refuses it.
        self.client = Client(enforce_csrf_checks=True)
        self.client.force_login(self.owner)
        self.client.get(self.url("memories:webhooks"))
        self.token = self.client.cookies["csrftoken"].value

    def post(self, url, data):
        data = {**data, "csrfmiddlewaretoken": self.token}
        return self.client.post(url, data, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=self.token)

    def test_a_body_over_the_limit_is_a_413_that_says_so(self):
        with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2_000):
            response = self.post(
                self.url("memories:webhook-create"), {"url": "https://x.example/" + "a" * 3_000}
            )
        assert response.status_code == 413
        assert "too large" in response.content.decode() and "2000 bytes" in response.content.decode()
        assert "too large" in script_constant("TOO_LARGE")
        assert not WebhookSubscription.objects.exists()

    def test_too_many_fields_is_the_same_413(self):
        ids = [str(self.fact.pk)] * 20
        with override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=10):
            response = self.post(self.url("memories:facts-delete"), {"ids": ids})
        assert response.status_code == 413
        assert "10 fields" in response.content.decode()
        assert Fact.objects.filter(pk=self.fact.pk).exists()

    def test_a_refused_form_within_the_limits_never_looks_like_one(self):
        """A view's own refusal answers htmx 200, so the script never mistakes it."""
        response = self.post(self.url("memories:webhook-create"), {"url": "ftp://x.example/h"})
        assert response.status_code == 200

    def test_a_disallowed_host_keeps_the_bare_400(self):
        """Another refusal Django makes itself is not called too large."""
        response = self.client.get(self.url("memories:webhooks"), HTTP_HOST="evil.example")
        assert response.status_code == 400
        assert "too large" not in response.content.decode()


class MergeRefusalReasonTests(BrowserTestCase):
    def test_a_plain_post_merging_a_record_merged_meanwhile_shows_the_reason(self):
        """The merge form is hidden on a merged record's page; a refusal shows it with the
        reason anyway, or a plain post got a 400 with the reason nowhere."""
        ada = memory_user_make(self.workspace)
        bob = memory_user_make(self.workspace, canonical_id="slack:U42", display_name="Bob")
        cy = memory_user_make(self.workspace, canonical_id="slack:U43", display_name="Cy")
        memory_user_merge(source=bob, target=ada, actor="t")  # another operator, meanwhile
        self.login(self.teammate)
        plain = self.client.post(self.url("memories:user-merge", pk=bob.pk), {"target": str(cy.pk)})
        assert plain.status_code in (400, 409), plain.status_code
        assert MERGE_SOURCE_MERGED_ELSEWHERE in plain.content.decode()
