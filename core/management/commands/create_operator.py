import getpass

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.models import Membership, Workspace
from core.services import operator_create


class Command(BaseCommand):
    help = (
        "Create an operator (a login for /memories/) who is a member of a workspace. An admin "
        "is also made staff, so the same login opens /admin/, showing only the workspaces they "
        "administer; viewers and editors use /memories/ only. A superuser, who sees every "
        "workspace in /admin/, is made with `manage.py createsuperuser`."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--workspace", required=True, help="Workspace name.")
        parser.add_argument(
            "--role",
            required=True,
            choices=Membership.Role.values,
            help="viewer or editor: /memories/ only; admin: /memories/ and /admin/ (staff).",
        )
        parser.add_argument("--password", help="Prompted for when omitted.")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, **options):
        workspace = Workspace.objects.filter(name=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"No workspace named {options['workspace']!r}.")
        password = options["password"]
        if password is None:
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("The passwords do not match.")
        try:
            validate_password(password)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        admin = options["role"] == Membership.Role.ADMIN
        operator_create(
            workspace=workspace,
            username=username,
            password=password,
            role=options["role"],
            email=options["email"],
            staff=admin,
        )
        self.stdout.write(f"Operator {username} is {options['role']} of {workspace.name}.")
        if admin:
            self.stdout.write("They log into /admin/ too, which shows only the workspaces they administer.")
