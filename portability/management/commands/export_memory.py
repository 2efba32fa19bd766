"""manage.py export_memory: write a workspace's memory (or an agent's, or a person's) as JSON lines."""

import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from core.models import Agent, Workspace
from identities.models import MemoryUser
from portability.registry import Scope
from portability.services import export_stream


def workspace_find(value: str) -> Workspace:
    workspace = Workspace.objects.filter(name=value).first()
    if workspace is None:
        try:
            workspace = Workspace.objects.filter(pk=value).first()
        except Exception:  # not a uuid
            workspace = None
    if workspace is None:
        raise CommandError(f"No workspace named or with id '{value}'.")
    return workspace


class Command(BaseCommand):
    help = "Export memory as JSON lines (docs/export.md): a workspace, one agent or one person."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True, help="Workspace name or id.")
        parser.add_argument("--agent", help="Only this agent's rows (its slug).")
        parser.add_argument("--person", help="Only this person's rows (memory user id or canonical id).")
        parser.add_argument("--history", action="store_true", help="Closed versions and the audit trail too.")
        parser.add_argument("--vectors", action="store_true", help="Vectors of the workspace's model too.")
        parser.add_argument("--output", "-o", default="-", help="File to write (default: standard output).")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar on standard error.")

    def handle(self, *args, **options):
        workspace = workspace_find(options["workspace"])
        agent = person = None
        if options["agent"]:
            agent = Agent.objects.filter(workspace=workspace, slug=options["agent"]).first()
            if agent is None:
                raise CommandError(f"No agent '{options['agent']}' in {workspace}.")
        if options["person"]:
            people = MemoryUser.objects.filter(workspace=workspace)
            person = people.filter(canonical_id=options["person"]).first()
            if person is None:
                try:
                    person = people.filter(pk=options["person"]).first()
                except Exception:
                    person = None
            if person is None:
                raise CommandError(f"No person '{options['person']}' in {workspace}.")
        scope = Scope(
            workspace=workspace,
            agent=agent,
            memory_user=person,
            history=options["history"],
            vectors=options["vectors"],
        )
        out = sys.stdout.buffer if options["output"] == "-" else open(options["output"], "wb")  # noqa: SIM115
        bar = tqdm(
            unit=" records",
            file=sys.stderr,
            disable=options["no_progress"],
            mininterval=0.5,
            dynamic_ncols=True,
        )
        try:
            for line in export_stream(scope=scope):
                out.write(line)
                bar.update(1)
        finally:
            bar.close()
            if out is not sys.stdout.buffer:
                out.close()
