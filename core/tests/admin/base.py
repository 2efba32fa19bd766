"""Personas and rows for the admin scoping tests: the owner (an admin of Acme, staff) must
never see a trace of Globex, whose rows carry the word "globex" in every tier."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from core.lib.admin import WorkspaceScopedAdmin, workspace_id_of
from core.testing import MemoryTestCase
from core.tests.admin.seed import seed_workspace

OTHER_TAG = b"globex"


def scoped_admins():
    """Every registered workspace-data admin, so a model registered later is covered."""
    return [
        (model, model_admin)
        for model, model_admin in admin.site._registry.items()
        if isinstance(model_admin, WorkspaceScopedAdmin)
    ]


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def rows_in(model_admin, workspace):
    lookup = model_admin.get_workspace_lookup()
    return model_admin.model._default_manager.filter(**{lookup: workspace.pk})


class ScopedAdminTestCase(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.mine = seed_workspace(workspace=cls.workspace, agent=cls.agent, tag="acme")
        cls.theirs = seed_workspace(workspace=cls.other_workspace, agent=cls.outsider_agent, tag="globex")
        for user in (cls.owner, cls.teammate, cls.viewer, cls.outsider):
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        cls.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")

    def workspaces_of(self, model_admin, objects) -> set:
        return {workspace_id_of(obj, model_admin.get_workspace_lookup()) for obj in objects}
