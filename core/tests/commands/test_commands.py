from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from core.models import ApiKey, Membership, Workspace
from core.selectors import api_key_authenticate
from core.testing import MemoryTestCase


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


class CommandTests(MemoryTestCase):
    def test_create_workspace_prints_its_id(self):
        output = run("create_workspace", "Initech")
        assert output == str(Workspace.objects.get(name="Initech").id)

    def test_create_workspace_twice_fails_clearly(self):
        with pytest.raises(CommandError, match="already exists"):
            run("create_workspace", "Acme")

    def test_create_api_key_prints_only_the_secret(self):
        output = run(
            "create_api_key", "--workspace", "Acme", "--agent", "helper", "--read-only", "--expires-days", "7"
        )
        assert "\n" not in output
        api_key = api_key_authenticate(secret=output)
        assert api_key.workspace == self.workspace
        assert api_key.agent.slug == "helper"
        assert api_key.read_only is True
        assert api_key.expires_at is not None

    def test_create_api_key_for_unknown_workspace_fails(self):
        with pytest.raises(CommandError, match="No workspace"):
            run("create_api_key", "--workspace", "Nope")
        assert not ApiKey.objects.filter(workspace__name="Nope").exists()

    def test_create_operator(self):
        run(
            "create_operator",
            "dana",
            "--workspace",
            "Acme",
            "--role",
            "editor",
            "--password",
            "a-long-pass-phrase",
        )
        membership = Membership.objects.get(user__username="dana")
        assert membership.workspace == self.workspace
        assert membership.role == "editor"
        assert membership.user.check_password("a-long-pass-phrase")

    def test_create_operator_rejects_weak_password(self):
        with pytest.raises(CommandError):
            run("create_operator", "eve", "--workspace", "Acme", "--role", "viewer", "--password", "123")
