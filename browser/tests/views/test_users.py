from browser.tests.base import BrowserTestCase
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_identify


class UsersTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_identify(
            workspace=cls.workspace, channel="telegram", external_id="1001", profile={"name": "Ada"}
        ).memory_user
        cls.ada_mail = memory_user_identify(
            workspace=cls.workspace, channel="email", external_id="ada@example.com"
        ).memory_user
        cls.bob = memory_user_identify(
            workspace=cls.workspace, channel="slack", external_id="U42"
        ).memory_user
        cls.foreign = memory_user_identify(
            workspace=cls.other_workspace, channel="telegram", external_id="1001"
        ).memory_user
        fact_remember(
            workspace=cls.workspace,
            key="favourite_colour",
            value="green",
            scope="user",
            memory_user=cls.ada,
            fact_type="user_preference",
        )

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:users")
        self.open_as(self.viewer, url)
        # session, user, memberships, count, page of ids, rows (with statistics), identities,
        # the Review tab's count.
        with self.assertNumQueries(8):
            response = self.client.get(url)
        assert b'data-total="3"' in response.content
        for n in range(10):
            memory_user_identify(workspace=self.workspace, channel="web", external_id=f"w{n}")
        with self.assertNumQueries(7):
            fragment = self.htmx("get", url, target="results")
        assert b"<html" not in fragment.content and b'data-total="13"' in fragment.content

    def test_search_and_channel_filter(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:users") + "?q=ada@")
        assert b'data-total="1"' in response.content
        response = self.client.get(self.url("memories:users") + "?channel=slack")
        assert b'data-total="1"' in response.content

    def test_detail_shows_identities_facts_and_merge(self):
        self.login(self.teammate)
        response = self.client.get(self.url("memories:user", pk=self.ada.pk))
        content = response.content.decode()
        assert "Channel identities" in content and "1001" in content
        assert "favourite_colour" in content
        assert "Merge into another user" in content
        # The operator's own name still shows in the header: the row never shadows `user`.
        assert "teammate" in content

    def test_editor_renames_inline(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:user-edit", pk=self.bob.pk),
            {"display_name": "Bob B.", "canonical_id": self.bob.canonical_id},
            target=f"row-{self.bob.pk}",
        )
        assert "Saved user" in response["HX-Trigger"]
        assert b"Bob B." in response.content
        assert MemoryUser.objects.get(pk=self.bob.pk).display_name == "Bob B."

    def test_taken_canonical_id_is_a_field_error(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:user-edit", pk=self.bob.pk),
            {"display_name": "", "canonical_id": self.ada.canonical_id},
            target=f"row-{self.bob.pk}",
        )
        assert b'class="editing"' in response.content
        assert b'class="error"' in response.content

    def test_merge_moves_the_user_and_opens_the_target(self):
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:user-merge", pk=self.ada_mail.pk), {"target": self.ada.canonical_id}
        )
        assert response["HX-Redirect"] == self.url("memories:user", pk=self.ada.pk)
        assert MemoryUser.objects.get(pk=self.ada_mail.pk).merged_into_id == self.ada.pk
        page = self.client.get(self.url("memories:user", pk=self.ada.pk))
        assert b"ada@example.com" in page.content
        assert b"Merged users" in page.content and self.ada_mail.canonical_id.encode() in page.content

    def test_merge_into_a_user_of_another_workspace_is_refused(self):
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:user-merge", pk=self.bob.pk), {"target": str(self.foreign.pk)}
        )
        assert '"level": "error"' in response["HX-Trigger"]
        assert MemoryUser.objects.get(pk=self.bob.pk).merged_into_id is None

    def test_viewer_cannot_edit_merge_or_erase(self):
        self.login(self.viewer)
        page = self.client.get(self.url("memories:user", pk=self.ada.pk))
        assert b"Merge into another user" not in page.content
        assert (
            self.client.post(
                self.url("memories:user-merge", pk=self.ada_mail.pk), {"target": str(self.ada.pk)}
            ).status_code
            == 403
        )
        assert self.client.post(self.url("memories:users-delete"), {"ids": [self.bob.pk]}).status_code == 403
        assert MemoryUser.objects.filter(pk=self.bob.pk, merged_into__isnull=True).exists()

    def test_batch_erase_is_for_admins_as_the_person_pages_erase_is(self):
        """Erasing people is the right to erasure: an editor may edit them but not erase them,
        from the list any more than from the person page."""
        self.login(self.teammate)
        page = self.client.get(self.url("memories:users"))
        assert b'name="ids"' not in page.content
        assert self.client.post(self.url("memories:users-delete"), {"ids": [self.ada.pk]}).status_code == 403
        assert MemoryUser.objects.filter(pk=self.ada.pk).exists()

    def test_batch_erase(self):
        self.login(self.owner)
        response = self.htmx(
            "post", self.url("memories:users-delete"), {"ids": [self.ada.pk]}, target="results"
        )
        assert "Deleted 1 user." in response["HX-Trigger"]
        assert not MemoryUser.objects.filter(pk=self.ada.pk).exists()

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:users")).status_code == 404
        own = self.url("memories:user", pk=self.ada.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
        merge = self.url("memories:user-merge", pk=self.ada.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.post(merge, {"target": str(self.foreign.pk)}).status_code == 404
