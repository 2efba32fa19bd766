"""Re-embed after an embedding model change: `python manage.py episodic_reembed [--workspace NAME]`.

Enqueues Celery tasks for every episodic entry (and, with --messages, every thread
message) that has no vector under its workspace's current model. Old vectors stay and
keep serving searches of the old model until the new ones land.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction


class Command(BaseCommand):
    help = "Enqueue re-embedding of entries (and messages) lacking a vector of the current model."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="Workspace name (default: every workspace).")
        parser.add_argument("--messages", action="store_true", help="Also re-embed thread messages.")

    def handle(self, *args, **options):
        from core.models import Workspace
        from episodic.services import entries_reembed
        from threads.services import messages_reembed

        workspaces = Workspace.objects.all()
        if options["workspace"]:
            workspaces = workspaces.filter(name=options["workspace"])
            if not workspaces.exists():
                raise CommandError(f"No workspace named {options['workspace']!r}.")
        for workspace in workspaces:
            with transaction.atomic():
                entries = entries_reembed(workspace=workspace)
                messages = messages_reembed(workspace=workspace) if options["messages"] else 0
            self.stdout.write(f"{workspace.name}: {entries} entries, {messages} messages enqueued")
