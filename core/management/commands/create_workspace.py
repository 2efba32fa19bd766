from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.services import workspace_create


class Command(BaseCommand):
    help = "Create a workspace and print its id."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        try:
            workspace = workspace_create(name=name)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(str(workspace.id))
