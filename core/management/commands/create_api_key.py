from django.core.management.base import BaseCommand, CommandError

from core.models import Workspace
from core.services import API_KEY_MAX_EXPIRES_DAYS, agent_get_or_create, api_key_create


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
        days = options["expires_days"]
        # Checked before --agent registers anything.
        if days is not None and not 0 < days <= API_KEY_MAX_EXPIRES_DAYS:
            raise CommandError(f"--expires-days must be between 1 and {API_KEY_MAX_EXPIRES_DAYS}.")
        agent = None
        if options["agent"]:
            agent = agent_get_or_create(workspace=workspace, slug=options["agent"])
        _, secret = api_key_create(
            workspace=workspace,
            agent=agent,
            name=options["name"],
            read_only=options["read_only"],
            expires_in_days=days,
        )
        self.stdout.write(secret)
