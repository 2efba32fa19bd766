"""A staff operator who is an admin of one workspace curates that workspace in /admin/ and
sees nothing of any other (issue 18)."""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from core.lib.admin import (
    SuperuserOnlyAdmin,
    WorkspaceScopedAdmin,
    WorkspaceScopedInline,
    batch_delete_by_workspace,
    related_lookup,
)
from core.models import Agent, ApiKey, Membership, ProviderCredential, WorkerHeartbeat, Workspace
from core.tests.admin.base import OTHER_TAG, ScopedAdminTestCase, admin_url, rows_in, scoped_admins
from facts.models import Fact
from facts.services import fact_batch_delete
from threads.models import Message, Thread


class RegistryTests(ScopedAdminTestCase):
    def test_every_registered_admin_is_scoped_or_superuser_only(self):
        """A model registered without scoping fails here before it leaks."""
        for model, model_admin in admin.site._registry.items():
            assert isinstance(model_admin, WorkspaceScopedAdmin | SuperuserOnlyAdmin), model._meta.label
            if isinstance(model_admin, WorkspaceScopedAdmin):
                assert model_admin.get_workspace_lookup(), model._meta.label
                assert not model_admin.check(), model._meta.label
                for inline in model_admin.inlines:
                    assert issubclass(inline, WorkspaceScopedInline), (model._meta.label, inline)

    def test_every_scoped_model_is_seeded_in_both_workspaces(self):
        for model, model_admin in scoped_admins():
            for workspace in (self.workspace, self.other_workspace):
                assert rows_in(model_admin, workspace).exists(), (
                    f"core/tests/admin/seed.py makes no {model._meta.label} in {workspace}"
                )

    def test_a_model_the_admin_cannot_place_in_a_workspace_fails_the_system_check(self):
        errors = WorkspaceScopedAdmin(WorkerHeartbeat, admin.site).check()
        assert [e.id for e in errors] == ["core.E101"]


class ChangelistTests(ScopedAdminTestCase):
    def test_changelists_show_only_the_operators_workspace(self):
        self.login(self.owner)
        for model, model_admin in scoped_admins():
            response = self.client.get(admin_url(model, "changelist"))
            assert response.status_code == 200, model._meta.label
            changelist = response.context["cl"]
            assert self.workspaces_of(model_admin, changelist.result_list) == {self.workspace.pk}, model
            assert changelist.result_count == rows_in(model_admin, self.workspace).count(), model
            assert OTHER_TAG not in response.content.lower(), model._meta.label

    def test_superuser_sees_every_workspace(self):
        self.login(self.superuser)
        for model, model_admin in scoped_admins():
            response = self.client.get(admin_url(model, "changelist"))
            assert response.status_code == 200, model._meta.label
            expected = {self.workspace.pk, self.other_workspace.pk}
            assert self.workspaces_of(model_admin, response.context["cl"].result_list) >= expected, model

    def test_workspace_filter_offers_only_the_operators_workspaces(self):
        # With one choice the filter is hidden; a second workspace of the owner shows it.
        initech = Workspace.objects.create(name="Initech")
        Membership.objects.create(workspace=initech, user=self.owner, role=Membership.Role.ADMIN)
        self.login(self.owner)
        response = self.client.get(admin_url(Agent, "changelist"))
        [workspace_filter] = [f for f in response.context["cl"].filter_specs if f.field_path == "workspace"]
        assert workspace_filter.lookup_choices == [(self.workspace.pk, "Acme"), (initech.pk, "Initech")]
        assert OTHER_TAG not in response.content.lower()
        other = self.client.get(
            admin_url(Agent, "changelist"), {"workspace__id__exact": self.other_workspace.pk}
        )
        assert list(other.context["cl"].result_list) == []

    def test_search_finds_nothing_of_another_workspace(self):
        self.login(self.owner)
        for query in ["globex", str(self.theirs["thread"].pk)]:
            response = self.client.get(admin_url(Thread, "changelist"), {"q": query})
            assert list(response.context["cl"].result_list) == [], query

    def test_autocomplete_answers_only_the_operators_workspaces(self):
        self.login(self.owner)
        params = {"app_label": "core", "model_name": "membership", "field_name": "workspace", "term": ""}
        response = self.client.get("/admin/autocomplete/", params)
        assert [r["text"] for r in response.json()["results"]] == ["Acme"]
        # Operators span workspaces: their list is a superuser's.
        response = self.client.get("/admin/autocomplete/", {**params, "field_name": "user"})
        assert response.status_code == 403


class ObjectPageTests(ScopedAdminTestCase):
    def test_pages_of_another_workspaces_rows_are_not_found(self):
        self.login(self.owner)
        for model, model_admin in scoped_admins():
            row = rows_in(model_admin, self.other_workspace).first()
            for view in ("change", "delete", "history"):
                response = self.client.get(admin_url(model, view, row.pk))
                assert response.status_code in (403, 404), (model._meta.label, view, response.status_code)
                assert OTHER_TAG not in response.content.lower(), (model._meta.label, view)
            response = self.client.post(admin_url(model, "change", row.pk), {})
            assert response.status_code in (403, 404), (model._meta.label, "post")
            response = self.client.post(admin_url(model, "delete", row.pk), {"post": "yes"})
            assert response.status_code in (403, 404), (model._meta.label, "delete post")
            assert model._default_manager.filter(pk=row.pk).exists(), model._meta.label

    def test_pages_of_own_rows_render_with_choices_of_own_workspace_only(self):
        """Every foreign-key choice on add and change pages (inlines too) is a row of Acme."""
        self.login(self.owner)
        members = set(Membership.objects.filter(workspace=self.workspace).values_list("user_id", flat=True))
        for model, model_admin in scoped_admins():
            row = rows_in(model_admin, self.workspace).first()
            for url in (admin_url(model, "add"), admin_url(model, "change", row.pk)):
                response = self.client.get(url)
                if response.status_code == 403:
                    continue
                assert response.status_code == 200, (url, response.status_code)
                assert OTHER_TAG not in response.content.lower(), url
                form_list = [response.context["adminform"].form]
                for formset in response.context["inline_admin_formsets"]:
                    form_list.extend(formset.formset.forms)
                for form in form_list:
                    for name, field in form.fields.items():
                        # A formset's hidden primary key is checked against its own scoped rows.
                        if not isinstance(field, forms.ModelChoiceField) or field.widget.is_hidden:
                            continue
                        choices = field.queryset
                        if choices.model is get_user_model():
                            assert set(choices.values_list("pk", flat=True)) <= members, (url, name)
                            continue
                        lookup = related_lookup(admin.site, choices.model)
                        assert not choices.exclude(**{f"{lookup}__in": [self.workspace.pk]}).exists(), (
                            url,
                            name,
                        )

    def test_moving_a_row_into_another_workspace_is_refused(self):
        self.login(self.owner)
        response = self.client.post(
            admin_url(Agent, "change", self.agent.pk),
            {"workspace": self.other_workspace.pk, "slug": "moved", "name": "x", "memory_settings": "{}"},
        )
        assert response.status_code == 200
        assert "workspace" in response.context["adminform"].form.errors
        self.agent.refresh_from_db()
        assert (self.agent.workspace_id, self.agent.slug) == (self.workspace.pk, "assistant")

        before = ApiKey.objects.count()
        response = self.client.post(
            admin_url(ApiKey, "add"), {"workspace": self.other_workspace.pk, "name": "sneaky"}
        )
        assert "workspace" in response.context["adminform"].form.errors
        response = self.client.post(
            admin_url(ApiKey, "add"),
            {"workspace": self.workspace.pk, "agent": self.outsider_agent.pk, "name": "sneaky"},
        )
        assert "agent" in response.context["adminform"].form.errors
        assert ApiKey.objects.count() == before

        credential = ProviderCredential.objects.get(workspace=self.workspace)
        response = self.client.post(
            admin_url(ProviderCredential, "change", credential.pk),
            {
                "workspace": self.other_workspace.pk,
                "purpose": "embedding",
                "base_url": "http://x/v1",
                "model": "m",
            },
        )
        assert "workspace" in response.context["adminform"].form.errors
        credential.refresh_from_db()
        assert credential.workspace_id == self.workspace.pk

    def test_a_row_reaching_save_outside_the_workspaces_is_refused(self):
        """The last guard, behind the form's choices: save_form refuses the row."""
        request = RequestFactory().post("/")
        request.user = self.owner
        model_admin = admin.site._registry[Agent]
        form = model_admin.get_form(request, self.agent)(
            {"workspace": self.workspace.pk, "slug": "assistant", "name": "x", "memory_settings": "{}"},
            instance=self.agent,
        )
        assert form.is_valid(), form.errors
        form.instance.workspace = self.other_workspace
        with self.assertRaises(PermissionDenied):
            model_admin.save_form(request, form, change=True)

    def test_raw_id_field_does_not_name_another_workspaces_row(self):
        self.login(self.owner)
        thread = self.mine["thread"]
        response = self.client.post(
            admin_url(Thread, "change", thread.pk),
            {"memory_user": self.theirs["person"].pk, "channel": "", "channel_chat_id": "", "title": "t"},
        )
        assert response.status_code == 200
        assert "memory_user" in response.context["adminform"].form.errors
        assert OTHER_TAG not in response.content.lower()
        thread.refresh_from_db()
        assert thread.memory_user_id == self.mine["person"].pk


class ActionTests(ScopedAdminTestCase):
    def test_batch_delete_action_ignores_rows_of_another_workspace(self):
        self.login(self.owner)
        mine, theirs = self.mine["fact"], self.theirs["fact"]
        self.client.post(
            admin_url(Fact, "changelist"),
            {"action": "delete_selected", "_selected_action": [str(mine.pk), str(theirs.pk)], "post": "yes"},
        )
        assert not Fact.objects.filter(pk=mine.pk).exists()
        assert Fact.objects.filter(pk=theirs.pk).exists()

    def test_batch_delete_helper_refuses_a_workspace_the_user_does_not_administer(self):
        request = RequestFactory().post("/")
        request.user = self.owner
        with self.assertRaises(PermissionDenied):
            batch_delete_by_workspace(
                request, Fact.objects.filter(pk=self.theirs["fact"].pk), fact_batch_delete
            )
        assert Fact.objects.filter(pk=self.theirs["fact"].pk).exists()


class PersonaTests(ScopedAdminTestCase):
    def test_viewers_and_editors_who_are_staff_see_an_empty_admin(self):
        """Only an admin membership opens workspace data in /admin/; /memories is the others' tool."""
        for user in (self.viewer, self.teammate):
            self.login(user)
            assert self.client.get("/admin/").context["app_list"] == [], user
            for model, _ in scoped_admins():
                assert self.client.get(admin_url(model, "changelist")).status_code == 403, (user, model)

    def test_an_admin_member_who_is_not_staff_is_sent_to_the_login_page(self):
        get_user_model().objects.filter(pk=self.owner.pk).update(is_staff=False)
        self.login(self.owner)
        response = self.client.get(admin_url(Fact, "changelist"))
        assert response.status_code == 302
        assert response.url.startswith("/admin/login/")

    def test_operators_groups_and_workers_are_for_superusers(self):
        self.login(self.owner)
        for url in ["/admin/auth/user/", "/admin/auth/group/", admin_url(WorkerHeartbeat, "changelist")]:
            assert self.client.get(url).status_code == 403, url
        self.login(self.superuser)
        for url in ["/admin/auth/user/", "/admin/auth/group/", admin_url(WorkerHeartbeat, "changelist")]:
            assert self.client.get(url).status_code == 200, url

    def test_a_workspace_admin_renames_theirs_but_neither_adds_nor_deletes_workspaces(self):
        self.login(self.owner)
        response = self.client.post(
            admin_url(Workspace, "change", self.workspace.pk),
            {
                "name": "Acme Corp",
                "created_at_0": "2026-01-02",
                "created_at_1": "03:04:05",
                "memberships-TOTAL_FORMS": "0",
                "memberships-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302, response.context and response.context["adminform"].form.errors
        self.workspace.refresh_from_db()
        assert self.workspace.name == "Acme Corp"
        assert self.client.get(admin_url(Workspace, "add")).status_code == 403
        assert self.client.get(admin_url(Workspace, "delete", self.workspace.pk)).status_code == 403

    def test_memberships_are_shown_read_only_to_a_workspace_admin(self):
        """Members change in /memories, which keeps the last admin and audits the change."""
        self.login(self.owner)
        membership = Membership.objects.get(user=self.viewer)
        response = self.client.get(admin_url(Membership, "change", membership.pk))
        assert response.status_code == 200
        assert "adminform" in response.context and not response.context["has_change_permission"]
        response = self.client.post(
            admin_url(Membership, "change", membership.pk),
            {"user": self.viewer.pk, "workspace": self.workspace.pk, "role": "admin"},
        )
        assert response.status_code == 403
        membership.refresh_from_db()
        assert membership.role == "viewer"


class RelationLookupTests(ScopedAdminTestCase):
    def test_a_model_reached_through_a_relation_is_scoped_by_it(self):
        class MessageByThreadAdmin(WorkspaceScopedAdmin):
            workspace_field = "thread__workspace"

        model_admin = MessageByThreadAdmin(Message, admin.site)
        request = RequestFactory().get("/")
        request.user = self.owner
        assert set(model_admin.get_queryset(request)) == set(Message.objects.filter(workspace=self.workspace))
        assert model_admin.has_change_permission(request, self.mine["message"])
        assert not model_admin.has_change_permission(request, self.theirs["message"])
