"""Run everything the service needs in the foreground; Ctrl-C stops what it started."""

import fcntl
import os
import secrets
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core.lib.embedded import EmbeddedValkey
from core.models import Membership, Workspace
from core.services import api_key_create, operator_create, workspace_create

DEMO_WORKSPACE = "demo"
DEMO_OPERATOR = "demo"


class Command(BaseCommand):
    help = "Start the embedded servers (unless configured), a Celery worker and beat, and the web server."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--mcp-port", type=int, default=8765, help="MCP server port (0: do not start it)."
        )
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--worker-concurrency", type=int, default=2)
        parser.add_argument("--no-demo", action="store_true", help="Do not create the demo workspace.")

    def handle(self, *args, **options):
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        lock = open(settings.VAR_DIR / "serve.lock", "a+")  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise CommandError(f"serve is already running on {settings.VAR_DIR}.") from exc

        env = os.environ.copy()
        valkey = None
        if not os.environ.get("CELERY_BROKER_URL"):
            valkey = EmbeddedValkey(settings.EMBEDDED_VALKEY_DIR, settings.EMBEDDED_VALKEY_SOCKET)
            valkey.start()
            env["CELERY_BROKER_URL"] = valkey.url
            self.stdout.write(f"Embedded Valkey on {valkey.socket_path}")
        if str(settings.EMBEDDED_POSTGRES_DIR) in env["DATABASE_URL"]:
            self.stdout.write(f"Embedded PostgreSQL at {settings.EMBEDDED_POSTGRES_DIR / 'data'}")

        children: list[subprocess.Popen] = []
        try:
            call_command("migrate", interactive=False, verbosity=0)
            if not options["no_demo"]:
                self._demo(options)
            python = sys.executable
            commands = [
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "memory_project",
                    "worker",
                    "--loglevel=INFO",
                    f"--concurrency={options['worker_concurrency']}",
                    "--hostname=worker@%h",
                ],
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "memory_project",
                    "beat",
                    "--loglevel=INFO",
                    f"--schedule={settings.VAR_DIR / 'celerybeat-schedule'}",
                ],
                [
                    python,
                    "-m",
                    "gunicorn",
                    "memory_project.wsgi:application",
                    f"--bind={options['host']}:{options['port']}",
                    f"--workers={options['web_workers']}",
                    "--threads=4",
                    "--access-logfile=-",
                    "--graceful-timeout=10",
                ],
            ]
            if options["mcp_port"]:
                commands.append(
                    [
                        python,
                        str(settings.BASE_DIR / "manage.py"),
                        "mcp_server",
                        f"--host={options['host']}",
                        f"--port={options['mcp_port']}",
                    ]
                )
            # Workers embed in batches, where a second torch thread measured 5.2x the
            # one-at-a-time rate against 3.7x with one (docs/episodic.md); web processes
            # embed single queries, where one thread is faster under contention.
            worker_env = {**env, "EMBEDDING_TORCH_THREADS": env.get("EMBEDDING_WORKER_TORCH_THREADS", "2")}
            for command in commands:
                # A new session each, so Ctrl-C reaches only this process, which stops
                # the children in order (web, beat, worker) and then the servers.
                child_env = worker_env if "worker" in command else env
                children.append(subprocess.Popen(command, env=child_env, start_new_session=True))
            self.stdout.write(
                self.style.SUCCESS(
                    f"Serving on http://{options['host']}:{options['port']}/  (admin: /admin/, "
                    f"browser: /memories/, API docs: /api/docs/"
                    + (
                        f", MCP: http://{options['host']}:{options['mcp_port']}/mcp"
                        if options["mcp_port"]
                        else ""
                    )
                    + "). Ctrl-C stops everything."
                )
            )
            self._wait(children)
        finally:
            self._stop(reversed(children))
            if valkey is not None:
                valkey.stop()
            lock.close()

    def _wait(self, children):
        stopping = {"flag": False}

        def request_stop(signum, frame):
            stopping["flag"] = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        while not stopping["flag"]:
            for child in children:
                if child.poll() is not None:
                    self.stderr.write(f"{' '.join(child.args[:5])} exited with {child.returncode}; stopping.")
                    return
            time.sleep(0.5)
        self.stdout.write("Stopping…")

    def _stop(self, children):
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def _demo(self, options):
        credentials = settings.VAR_DIR / "demo-credentials.txt"
        if Workspace.objects.filter(name=DEMO_WORKSPACE).exists():
            self.stdout.write(
                f"Demo workspace '{DEMO_WORKSPACE}' exists; its login and API key were printed at the first "
                f"start and saved in {credentials}."
            )
            return
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            workspace = workspace_create(name=DEMO_WORKSPACE)
            operator_create(
                workspace=workspace, username=DEMO_OPERATOR, password=password, role=Membership.Role.ADMIN
            )
            _, secret = api_key_create(workspace=workspace, name="demo")
        text = (
            f"Demo workspace: {DEMO_WORKSPACE}\n"
            f"Operator login: {DEMO_OPERATOR} / {password}  (http://{options['host']}:{options['port']}/memories/)\n"
            f"API key (shown once): {secret}\n"
        )
        credentials.write_text(text)
        credentials.chmod(0o600)
        self.stdout.write(self.style.WARNING(text))
