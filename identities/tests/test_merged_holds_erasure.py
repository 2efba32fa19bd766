"""A person merged into another: their legal hold is listed and released on the survivor, and
erasing the emptied merged record is refused with the survivor's id instead of reporting an
erasure that left every row of the person in place."""

from datetime import timedelta

from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from core.errors import ConflictError, NotFoundError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from identities import selectors, services
from identities.models import MemoryUser
from identities.services import (
    MEMORY_USERS_NOT_FOUND,
    UNDER_LEGAL_HOLD,
    memory_user_erase,
    memory_user_hold_place,
    memory_user_hold_release,
    memory_user_merge,
)
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, Tier
from retention.services import retention_run
from threads.models import Thread
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)
LIST = "/api/v1/memory-users/"


def holds_url(memory_user_id) -> str:
    return f"{LIST}{memory_user_id}/legal-hold/"


class MergedHoldOnTheSurvivorTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)

    def old_entry(self, person, content):
        entry = entry_factory(agent=self.agent, memory_user=person, content=content, embed=False)
        EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=OLD)
        return entry

    def both_held_and_merged(self):
        kept = self.old_entry(self.bo, "Signed the contract on the 3rd.")
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:teammate")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        return kept

    def test_the_survivor_lists_the_hold_of_the_record_merged_into_it(self):
        """Before: the survivor showed only its own hold; the one still covering the moved
        rows could be seen only on the merged record's id."""
        self.both_held_and_merged()

        response = self.api().get(holds_url(self.ada.pk))

        assert response.status_code == 200, response.content
        holds = response.json()["legal_holds"]
        assert [(h["placed_on"], h["merged"], h["reason"], h["by"]) for h in holds] == [
            (str(self.ada.pk), False, "Case 1", "operator:owner"),
            (str(self.bo.pk), True, "Case 2", "operator:teammate"),
        ]
        assert all(h["at"] for h in holds)

    def test_the_merged_records_hold_is_released_on_the_survivor(self):
        """Before: `placed_on` was ignored and the survivor's own hold (Case 1) was released in
        its place, while Case 2 stayed in force where the survivor's page did not show it."""
        kept = self.both_held_and_merged()

        response = self.api().delete(holds_url(self.ada.pk), QUERY_STRING=f"placed_on={self.bo.pk}")

        assert response.status_code == 200, response.content
        assert response.json()["legal_hold"]["reason"] == "Case 1"
        assert [h.pk for h in selectors.memory_user_legal_holds(memory_user=self.ada)] == [self.ada.pk]
        self.bo.refresh_from_db()
        assert self.bo.legal_hold_at is None
        release = AuditEvent.objects.filter(entity_id=str(self.bo.pk), changes__legal_hold__after=None).get()
        assert release.changes["released_on"] == str(self.ada.pk)
        # Still held by the survivor's own hold until that one goes too.
        retention_run(workspace=self.workspace, trigger="test")
        assert EpisodicEntry.objects.filter(pk=kept.pk).exists()
        self.api().delete(holds_url(self.ada.pk))
        retention_run(workspace=self.workspace, trigger="test")
        assert not EpisodicEntry.objects.filter(pk=kept.pk).exists()

    def test_a_carried_hold_protects_until_every_listed_hold_is_released_on_the_survivor(self):
        kept = self.old_entry(self.bo, "Signed the contract on the 3rd.")
        memory_user_hold_place(memory_user=self.bo, reason="Case 7", actor="operator:owner")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        listed = self.api().get(holds_url(self.ada.pk)).json()["legal_holds"]
        assert [(h["placed_on"], h["reason"]) for h in listed] == [
            (str(self.ada.pk), "Case 7"),
            (str(self.bo.pk), "Case 7"),
        ]

        assert self.api().delete(holds_url(self.ada.pk)).status_code == 200
        retention_run(workspace=self.workspace, trigger="test")
        assert EpisodicEntry.objects.filter(pk=kept.pk).exists()
        erase = self.api().delete(f"{LIST}{self.ada.pk}/")
        assert erase.status_code == 409 and erase.json()["error"]["code"] == "legal_hold"
        assert erase.json()["error"]["fields"]["ids"] == [str(self.bo.pk)]
        # What still blocks the erasure is listed on the survivor, and released there.
        listed = self.api().get(holds_url(self.ada.pk)).json()["legal_holds"]
        assert [h["placed_on"] for h in listed] == [str(self.bo.pk)]

        released = self.api().delete(holds_url(self.ada.pk), QUERY_STRING=f"placed_on={self.bo.pk}")

        assert released.status_code == 200
        assert self.api().get(holds_url(self.ada.pk)).json()["legal_holds"] == []
        retention_run(workspace=self.workspace, trigger="test")
        assert not EpisodicEntry.objects.filter(pk=kept.pk).exists()
        assert self.api().delete(f"{LIST}{self.ada.pk}/").status_code == 200

    def test_release_names_only_the_person_or_a_record_merged_into_them(self):
        self.both_held_and_merged()
        stranger = MemoryUserFactory(workspace=self.workspace)
        memory_user_hold_place(memory_user=stranger, reason="Case 3", actor="operator:owner")

        with self.assertRaisesMessage(NotFoundError, services.LEGAL_HOLD_NOT_FOUND):
            memory_user_hold_release(memory_user=self.ada, placed_on=stranger, actor="operator:owner")
        # The merged record does not reach back to the survivor's hold.
        self.bo.refresh_from_db()
        with self.assertRaisesMessage(NotFoundError, services.LEGAL_HOLD_NOT_FOUND):
            memory_user_hold_release(memory_user=self.bo, placed_on=self.ada, actor="operator:owner")

        held = MemoryUser.objects.filter(legal_hold_at__isnull=False).values_list("pk", flat=True)
        assert set(held) == {self.ada.pk, self.bo.pk, stranger.pk}


class MergedRecordErasureTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.bo)
        append(self.thread, ("user", "Keep this."))

    def test_erasing_a_merged_record_is_a_409_naming_the_survivor(self):
        """Before: the erasure deleted the empty merged record, answered 200 with
        `memory_users: 1`, and every row of the person stayed on the survivor."""
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

        response = self.api().delete(f"{LIST}{self.bo.pk}/")

        assert response.status_code == 409, response.content
        error = response.json()["error"]
        assert error["code"] == "merged" and error["message"] == services.MERGED_RECORD_ERASE
        assert error["fields"] == {"ids": [str(self.bo.pk)], "merged_into": [str(self.ada.pk)]}
        batch = self.api().post(f"{LIST}batch-delete/", {"ids": [str(self.bo.pk)]}, format="json")
        assert batch.status_code == 409 and batch.json()["error"]["code"] == "merged"
        assert batch.json()["error"]["fields"]["merged_into"] == [str(self.ada.pk)]
        assert MemoryUser.objects.get(pk=self.bo.pk).merged_into_id == self.ada.pk
        assert Thread.objects.get(pk=self.thread.pk).memory_user_id == self.ada.pk
        assert not AuditEvent.objects.filter(action="erase").exists()

    def test_the_service_refuses_the_same_way(self):
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        self.bo.refresh_from_db()

        with self.assertRaisesMessage(ConflictError, services.MERGED_RECORD_ERASE) as refused:
            memory_user_erase(memory_user=self.bo, actor="operator:owner")

        assert refused.exception.code == "merged"
        assert refused.exception.fields["merged_into"] == [str(self.ada.pk)]
        assert MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).count() == 2

    def test_erasing_the_survivor_erases_the_merged_record_with_it(self):
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

        alone = self.api().delete(f"{LIST}{self.ada.pk}/")

        assert alone.status_code == 200 and alone.json()["memory_users"] == 2
        assert not MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).exists()
        assert not Thread.objects.filter(pk=self.thread.pk).exists()

    def test_a_batch_naming_the_survivor_too_erases_both(self):
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

        batch = self.api().post(
            f"{LIST}batch-delete/", {"ids": [str(self.bo.pk), str(self.ada.pk)]}, format="json"
        )

        assert batch.status_code == 200, batch.content
        assert not MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).exists()

    def test_erase_then_merge_erases_the_person_and_the_merge_is_a_404(self):
        erased = self.api().delete(f"{LIST}{self.bo.pk}/")
        assert erased.status_code == 200 and erased.json()["threads"] == 1

        merge = self.api().post(f"{LIST}{self.bo.pk}/merge/", {"target": str(self.ada.pk)}, format="json")

        assert merge.status_code == 404 and merge.json()["error"]["code"] == "not_found"
        with self.assertRaisesMessage(NotFoundError, MEMORY_USERS_NOT_FOUND):
            memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        assert MemoryUser.objects.get(pk=self.ada.pk).merged_into_id is None

    def test_a_merged_and_held_record_is_refused_as_merged(self):
        memory_user_hold_place(memory_user=self.bo, reason="Case 7", actor="operator:owner")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

        response = self.api().delete(f"{LIST}{self.bo.pk}/")
        assert response.json()["error"]["code"] == "merged"
        # The survivor is held through the carried hold and the merged record's own.
        survivor = self.api().delete(f"{LIST}{self.ada.pk}/")
        assert survivor.status_code == 409 and survivor.json()["error"]["message"] == UNDER_LEGAL_HOLD


class MergedRecordErasureScreensTests(MemoryTestCase):
    """The browser and the admin show the refusal as a message, never a server error."""

    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

    def messages_of(self, response):
        return [str(m) for m in get_messages(response.wsgi_request)]

    def test_the_person_page_erase_shows_the_refusal(self):
        self.login(self.owner)
        url = reverse("memories:user-erase", kwargs={"workspace_id": self.workspace.pk, "pk": self.bo.pk})

        response = self.client.post(url)

        # The erase page again with the reason, at the refusal's status (409).
        assert response.status_code == 409
        assert services.MERGED_RECORD_ERASE in response.content.decode()
        assert services.MERGED_RECORD_ERASE in self.messages_of(response)
        assert MemoryUser.objects.filter(pk=self.bo.pk).exists()

    def test_the_users_tab_batch_delete_shows_the_refusal(self):
        self.login(self.owner)
        url = reverse("memories:users-delete", kwargs={"workspace_id": self.workspace.pk})

        response = self.client.post(url, {"ids": [str(self.bo.pk)], "confirmed": "1"})

        assert response.status_code == 409
        assert services.MERGED_RECORD_ERASE in response.content.decode()
        assert services.MERGED_RECORD_ERASE in self.messages_of(response)
        assert MemoryUser.objects.filter(pk=self.bo.pk).exists()

    def test_the_admin_delete_page_and_action_show_the_refusal(self):
        """Before: the refusal escaped the admin's delete paths as a 500."""
        root = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(root)

        page = self.client.post(f"/admin/identities/memoryuser/{self.bo.pk}/delete/", {"post": "yes"})
        action = self.client.post(
            "/admin/identities/memoryuser/",
            {"action": "delete_selected", "_selected_action": [str(self.bo.pk)], "post": "yes"},
        )

        for response in (page, action):
            assert response.status_code == 302
            assert f"Nothing was erased: {services.MERGED_RECORD_ERASE}" in self.messages_of(response)
        assert MemoryUser.objects.filter(pk=self.bo.pk).exists()
        assert not AuditEvent.objects.filter(action="erase").exists()
        assert not LogEntry.objects.filter(action_flag=DELETION).exists()

        # A legal hold is refused the same way (it was a 500 too).
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        held = self.client.post(f"/admin/identities/memoryuser/{self.ada.pk}/delete/", {"post": "yes"})
        assert held.status_code == 302
        assert f"Nothing was erased: {UNDER_LEGAL_HOLD}" in self.messages_of(held)
        assert MemoryUser.objects.filter(pk=self.ada.pk).exists()
