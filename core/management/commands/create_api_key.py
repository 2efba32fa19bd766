from django.core.management.base import BaseCommand, CommandError

from core.models import Workspace
from core.services import agent_get_or_create, api_key_create


class Command(BaseCommand):
    help = "Create an API key and print only its secret (shown once, stored hashed)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True, help="Workspace name.")
        parser.add_argument("--agent", help="Restrict the key to this agent slug (registered if new).")
        parser.add_argument("--read-only", action="store_true")
        parser.add_argument("--expires-days", type=int)
        parser.add_argument("--name", default="", help="A label for the key.")

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(name=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"No workspace named {options['workspace']!r}.")
        if options["expires_days"] is not None and options["expires_days"] <= 0:
            raise CommandError("--expires-days must be positive.")
        agent = None
        if options["agent"]:
            agent = agent_get_or_create(workspace=workspace, slug=options["agent"])
        _, secret = api_key_create(
            workspace=workspace,
            agent=agent,
            name=options["name"],
            read_only=options["read_only"],
            expires_in_days=options["expires_days"],
        )
        self.stdout.write(secret)
