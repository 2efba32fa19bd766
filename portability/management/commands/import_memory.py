"""manage.py import_memory: read an export into a workspace, all of it or nothing."""

import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from portability.management.commands.export_memory import workspace_find
from portability.services import ImportFailed, import_run, lines_read


class Command(BaseCommand):
    help = "Import an export (docs/export.md) into a workspace; --dry-run reports without storing."

    def add_arguments(self, parser):
        parser.add_argument("file", help="The export (JSON lines).")
        parser.add_argument("--workspace", required=True, help="Target workspace name or id.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would be created; store nothing."
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar on standard error.")

    def handle(self, *args, **options):
        workspace = workspace_find(options["workspace"])
        path = options["file"]
        try:
            size = os.path.getsize(path)
            stream = open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(str(exc)) from None
        bar = tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            file=sys.stderr,
            disable=options["no_progress"],
            mininterval=0.5,
            dynamic_ncols=True,
        )
        seen = [0]

        def progress(done: int, lines: int) -> None:
            bar.update(done - seen[0])
            seen[0] = done
            bar.set_postfix(lines=lines, refresh=False)

        try:
            with stream:
                report = import_run(
                    workspace=workspace,
                    lines=lines_read(stream),
                    actor="system",
                    dry_run=options["dry_run"],
                    progress=progress,
                )
        except ImportFailed as exc:
            raise CommandError(f"{exc.message} ({exc.code}); nothing was imported.") from None
        finally:
            bar.update(size - seen[0])
            bar.close()
        self.stdout.write(json.dumps(report, indent=2, ensure_ascii=False))
