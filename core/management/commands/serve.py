"""Run everything the service needs in the foreground; Ctrl-C stops what it started.

The worker, beat, MCP server and gunicorn run under a `core.lib.supervisor.Supervisor`: one
that dies is logged and restarted with backoff while the others keep serving. The embedded
Valkey and PostgreSQL, when they are used, are started again if they die (checked every 2 s;
the web answers 503 meanwhile and reconnects by itself). Only SIGINT or SIGTERM to this process
stops them (web first, the worker last), then Valkey, then the embedded PostgreSQL (when
this was the last process using it).
"""

import fcntl
import logging
import os
import secrets
import signal
import sys
import threading
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core.lib.embedded import EmbeddedValkey, postgres_start_again
from core.lib.supervisor import ChildSpec, Supervisor
from core.models import Membership, Workspace
from core.services import api_key_create, operator_create, operator_staff_grant, workspace_create

logger = logging.getLogger(__name__)

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
        parser.add_argument(
            "--keep-alive",
            type=int,
            default=30,
            help="Seconds gunicorn keeps an idle client connection open (default 30).",
        )
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
        embedded_postgres = None
        if str(settings.EMBEDDED_POSTGRES_DIR) in env["DATABASE_URL"]:
            embedded_postgres = settings.EMBEDDED_POSTGRES_DIR / "data"
            self.stdout.write(f"Embedded PostgreSQL at {embedded_postgres}")

        supervisor = None
        try:
            call_command("migrate", interactive=False, verbosity=0)
            if not options["no_demo"]:
                self._demo(options)
            supervisor = Supervisor(self._children(options, env))
            supervisor.start()
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
            stopping = threading.Event()
            signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
            signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
            supervisor.run(stopping, on_poll=EmbeddedServersWatch(valkey=valkey, postgres=embedded_postgres))
            self.stdout.write("Stopping…")
        finally:
            if supervisor is not None:
                supervisor.stop()
            if valkey is not None:
                valkey.stop()
            lock.close()

    def _children(self, options, env) -> list[ChildSpec]:
        """The supervised processes, in start order; they stop in the reverse order."""
        python = sys.executable
        # Workers embed in batches, where a second torch thread measured 5.2x the
        # one-at-a-time rate against 3.7x with one (docs/episodic.md); web processes
        # embed single queries, where one thread is faster under contention.
        worker_env = {**env, "EMBEDDING_TORCH_THREADS": env.get("EMBEDDING_WORKER_TORCH_THREADS", "2")}
        children = [
            # A warm shutdown waits for running tasks; one cut short comes back from the
            # broker after the visibility timeout (late acknowledgement).
            ChildSpec(
                "worker",
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
                env=worker_env,
                stop_timeout=30,
            ),
            ChildSpec(
                "beat",
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
                env=env,
                stop_timeout=10,
            ),
        ]
        if options["mcp_port"]:
            children.append(
                ChildSpec(
                    "mcp",
                    [
                        python,
                        str(settings.BASE_DIR / "manage.py"),
                        "mcp_server",
                        f"--host={options['host']}",
                        f"--port={options['mcp_port']}",
                    ],
                    env=env,
                    stop_timeout=10,
                )
            )
        children.append(
            ChildSpec(
                "web",
                [
                    python,
                    "-m",
                    "gunicorn",
                    "memory_project.wsgi:application",
                    f"--bind={options['host']}:{options['port']}",
                    f"--workers={options['web_workers']}",
                    "--threads=4",
                    # Agents' HTTP clients keep idle connections for seconds (httpx: 5 s). With
                    # gunicorn's 2 s default, a request sent on a connection the server was
                    # closing came back as a reset; under a saturated CPU the close was late
                    # enough to race even 1 s idles (bench.load_agents: 11 resets in 300 s).
                    f"--keep-alive={options['keep_alive']}",
                    "--access-logfile=-",
                    "--graceful-timeout=10",
                    # Its default control socket is one path per user: two serves on one
                    # machine would share it. serve supervises gunicorn by signals instead.
                    "--no-control-socket",
                ],
                env=env,
                stop_timeout=15,
            )
        )
        return children

    def _demo(self, options):
        credentials = settings.VAR_DIR / "demo-credentials.txt"
        site = f"http://{options['host']}:{options['port']}"
        admin_line = f"Admin:  {site}/admin/  (same login, staff; shows only the demo workspace)\n"
        workspace = Workspace.objects.filter(name=DEMO_WORKSPACE).first()
        if workspace is not None:
            self.stdout.write(
                f"Demo workspace '{DEMO_WORKSPACE}' exists; its login and API key were printed at the first "
                f"start and saved in {credentials}. The login opens {site}/memories/ and {site}/admin/."
            )
            # Releases before issue 18 made the demo operator without staff, so /admin/ refused
            # the printed login; the password stays as it was (and is not printed again).
            if operator_staff_grant(workspace=workspace, username=DEMO_OPERATOR):
                self.stdout.write(f"The demo operator '{DEMO_OPERATOR}' may now log into {site}/admin/ too.")
                if credentials.exists():
                    with credentials.open("a") as file:
                        file.write(admin_line)
            return
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            workspace = workspace_create(name=DEMO_WORKSPACE)
            operator_create(
                workspace=workspace,
                username=DEMO_OPERATOR,
                password=password,
                role=Membership.Role.ADMIN,
                staff=True,
            )
            _, secret = api_key_create(workspace=workspace, name="demo")
        text = (
            f"Demo workspace: {DEMO_WORKSPACE}\n"
            f"Operator login: {DEMO_OPERATOR} / {password}\n"
            f"Browser: {site}/memories/\n"
            f"{admin_line}"
            f"API key (shown once): {secret}\n"
        )
        credentials.write_text(text)
        credentials.chmod(0o600)
        self.stdout.write(self.style.WARNING(text))


class EmbeddedServersWatch:
    """Start the embedded Valkey and PostgreSQL again when they die, at most every few seconds.

    A PostgreSQL killed with -9 leaves backends that exit only once they notice; until then
    a new postmaster refuses to start, so a failed attempt is simply tried again later.
    """

    INTERVAL = 2.0

    def __init__(self, *, valkey, postgres, clock=time.monotonic):
        self.valkey = valkey
        self.postgres = postgres
        self.clock = clock
        self.next_check = 0.0

    def __call__(self) -> None:
        now = self.clock()
        if now < self.next_check:
            return
        self.next_check = now + self.INTERVAL
        if self.valkey is not None:
            try:
                self.valkey.start_again()
            except (OSError, RuntimeError) as exc:
                logger.warning("Embedded Valkey could not be started again yet: %s", exc)
        if self.postgres is not None:
            try:
                postgres_start_again(self.postgres)
            except Exception as exc:  # pg_ctl's errors vary (timeout, exit status, assertion)
                logger.warning("Embedded PostgreSQL could not be started again yet: %s", exc)
