"""The demo login printed by `serve` and admins made by `create_operator` reach /admin/ (issue 18)."""

import re
import tempfile
from io import StringIO
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import TestCase, override_settings

from core.management.commands.create_operator import Command as CreateOperator
from core.management.commands.serve import DEMO_OPERATOR, DEMO_WORKSPACE
from core.management.commands.serve import Command as Serve
from core.models import Membership, Workspace
from core.services import operator_create, workspace_create

OLD_PASSWORD = "an-old-demo-password"


class DemoOperatorTests(TestCase):
    def setUp(self):
        self.var_dir = Path(self.enterContext(tempfile.TemporaryDirectory()))
        self.enterContext(override_settings(VAR_DIR=self.var_dir))
        self.credentials = self.var_dir / "demo-credentials.txt"

    def demo(self) -> str:
        out = StringIO()
        Serve(stdout=out)._demo({"host": "127.0.0.1", "port": 8000})
        return out.getvalue()

    def test_the_printed_login_opens_memories_and_the_demo_workspace_in_admin(self):
        workspace_create(name="Somebody else's")
        output = self.demo()
        password = re.search(rf"Operator login: {DEMO_OPERATOR} / (\S+)", output).group(1)
        assert "http://127.0.0.1:8000/memories/" in output
        assert "http://127.0.0.1:8000/admin/" in output
        assert self.credentials.read_text() in output
        assert self.credentials.stat().st_mode & 0o777 == 0o600

        assert self.client.login(username=DEMO_OPERATOR, password=password)
        assert self.client.get("/memories/", follow=True).status_code == 200
        index = self.client.get("/admin/")
        assert index.status_code == 200
        assert index.context["app_list"]
        workspaces = self.client.get("/admin/core/workspace/")
        assert [w.name for w in workspaces.context["cl"].result_list] == [DEMO_WORKSPACE]

    def test_an_earlier_demo_operator_is_made_staff_without_a_new_password(self):
        workspace = workspace_create(name=DEMO_WORKSPACE)
        operator_create(
            workspace=workspace, username=DEMO_OPERATOR, password=OLD_PASSWORD, role=Membership.Role.ADMIN
        )
        # As an earlier release left it: an admin member who is not staff.
        get_user_model().objects.filter(username=DEMO_OPERATOR).update(is_staff=False)
        self.credentials.write_text(f"Operator login: {DEMO_OPERATOR} / {OLD_PASSWORD}\n")

        output = self.demo()
        user = get_user_model().objects.get(username=DEMO_OPERATOR)
        assert user.is_staff and not user.is_superuser
        assert user.check_password(OLD_PASSWORD)
        assert OLD_PASSWORD not in output
        assert "/admin/" in output
        assert "/admin/" in self.credentials.read_text()
        assert Workspace.objects.filter(name=DEMO_WORKSPACE).count() == 1

        again = self.demo()
        assert "may now log into" not in again
        assert self.credentials.read_text().count("/admin/") == 1

    def test_a_demo_operator_demoted_from_admin_is_left_alone(self):
        workspace = workspace_create(name=DEMO_WORKSPACE)
        operator_create(
            workspace=workspace, username=DEMO_OPERATOR, password=OLD_PASSWORD, role=Membership.Role.VIEWER
        )
        self.demo()
        assert not get_user_model().objects.get(username=DEMO_OPERATOR).is_staff


class CreateOperatorTests(TestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")

    def create(self, username, role) -> str:
        out = StringIO()
        call_command(
            "create_operator",
            username,
            "--workspace",
            "Acme",
            "--role",
            role,
            "--password",
            "a-long-pass-phrase",
            stdout=out,
        )
        return out.getvalue()

    def test_an_admin_is_made_staff_and_told_so(self):
        output = self.create("dana", "admin")
        assert "/admin/" in output
        user = get_user_model().objects.get(username="dana")
        assert user.is_staff and not user.is_superuser
        assert self.client.login(username="dana", password="a-long-pass-phrase")
        assert self.client.get("/admin/core/workspace/").status_code == 200

    def test_viewers_and_editors_are_not_staff(self):
        for username, role in [("vic", "viewer"), ("eddie", "editor")]:
            assert "/admin/" not in self.create(username, role)
            assert not get_user_model().objects.get(username=username).is_staff

    def test_help_says_who_reaches_the_admin(self):
        help_text = CreateOperator().create_parser("manage.py", "create_operator").format_help()
        assert "/admin/" in help_text
        assert "createsuperuser" in help_text


class MembersPageAdminTests(TestCase):
    """However someone becomes a workspace admin, the admin opens for them (one rule, in
    core.services.membership_set)."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        operator_create(
            workspace=self.workspace, username="root", password="a-long-pass-phrase", role="admin"
        )

    def test_an_admin_added_or_promoted_on_the_members_page_is_staff(self):
        from browser.services import member_add, member_role_change

        added = member_add(
            workspace=self.workspace,
            actor="test",
            username="ann",
            role="admin",
            password="a-long-pass-phrase",
        )
        assert added.user.is_staff
        viewer = member_add(
            workspace=self.workspace,
            actor="test",
            username="vic",
            role="viewer",
            password="a-long-pass-phrase",
        )
        assert not get_user_model().objects.get(username="vic").is_staff
        member_role_change(membership=viewer, actor="test", role="admin")
        assert get_user_model().objects.get(username="vic").is_staff
        assert self.client.login(username="vic", password="a-long-pass-phrase")
        assert self.client.get("/admin/core/workspace/").status_code == 200
