"""Run everything the service needs in the foreground; Ctrl-C stops what it started.

Everything an instance listens on is its own, so a second checkout (or another
MEMORY_VAR_DIR) serves beside the first: the embedded PostgreSQL and Valkey listen on unix
sockets in the var dir, gunicorn's control socket is off, the web port is checked before
anything starts (`--port 0` picks a free one) and the MCP port follows the web port. Every
port and socket is printed at start and saved in `<var dir>/serve.json`.

The worker, beat, MCP server and gunicorn run under a `core.lib.supervisor.Supervisor`: one
that dies is logged and restarted with backoff while the others keep serving. The embedded
Valkey and PostgreSQL, when they are used, are started again if they die (checked every 2 s;
the web answers 503 meanwhile and reconnects by itself). Only SIGINT or SIGTERM to this process
stops them (web first, the worker last), then Valkey, then the embedded PostgreSQL (when
this was the last process using it).
"""

import contextlib
import fcntl
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

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
# The MCP port is the web port plus this (8000 -> 8765, its long-standing default).
MCP_PORT_OFFSET = 765
# How long serve waits for /readyz before saying the start is slow (printed, not fatal).
READY_WAIT_SECONDS = 300


class Command(BaseCommand):
    help = "Start the embedded servers (unless configured), a Celery worker and beat, and the web server."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=int, default=8000, help="Web port (0: a free port, printed at start)."
        )
        parser.add_argument(
            "--mcp-port",
            type=int,
            default=None,
            help=f"MCP server port (default: the web port + {MCP_PORT_OFFSET}, or a free port when "
            "that one is taken; 0: do not start it).",
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
        options["port"], options["mcp_port"] = ports_choose(
            options["host"], web=options["port"], mcp=options["mcp_port"]
        )

        env = os.environ.copy()
        valkey = None
        if not os.environ.get("CELERY_BROKER_URL"):
            valkey = EmbeddedValkey(settings.EMBEDDED_VALKEY_DIR, settings.EMBEDDED_VALKEY_SOCKET)
            valkey.start()
            env["CELERY_BROKER_URL"] = valkey.url
        embedded_postgres = None
        if str(settings.EMBEDDED_POSTGRES_DIR) in env["DATABASE_URL"]:
            embedded_postgres = settings.EMBEDDED_POSTGRES_DIR / "data"

        listening = self._listening(options, env, valkey=valkey, embedded_postgres=embedded_postgres)
        for line in _listening_lines(listening):
            self.stdout.write(line)
        state_path = settings.VAR_DIR / "serve.json"
        supervisor = None
        try:
            self._migrate()
            if not options["no_demo"]:
                self._demo(options)
            supervisor = Supervisor(self._children(options, env))
            supervisor.start()
            state_path.write_text(json.dumps(listening, indent=2) + "\n")
            self.stdout.write(
                self.style.SUCCESS(
                    f"Serving on http://{_client_host(options['host'])}:{options['port']}/  (admin: /admin/, "
                    f"browser: /memories/, API docs: /api/docs/"
                    + (
                        f", MCP: http://{_client_host(options['host'])}:{options['mcp_port']}/mcp"
                        if options["mcp_port"]
                        else ""
                    )
                    + "). Ctrl-C stops everything."
                )
            )
            stopping = threading.Event()
            signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
            signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
            threading.Thread(
                target=self._announce_ready,
                args=(listening["web_url"], stopping),
                kwargs={
                    "mcp": (_client_host(options["host"]), options["mcp_port"])
                    if options["mcp_port"]
                    else None
                },
                daemon=True,
            ).start()
            supervisor.run(stopping, on_poll=EmbeddedServersWatch(valkey=valkey, postgres=embedded_postgres))
            self.stdout.write("Stopping…")
        finally:
            if supervisor is not None:
                supervisor.stop()
            if valkey is not None:
                valkey.stop()
            with contextlib.suppress(FileNotFoundError):
                state_path.unlink()
            lock.close()

    def _migrate(self) -> None:
        """Apply pending migrations, after the system checks with the database's: a warning
        (an index an interrupted build left invalid, core.W001) is printed where the person
        starting the service reads, and an error stops it before anything starts."""
        output = {"stdout": self.stdout, "stderr": self.stderr}
        call_command("migrate", interactive=False, verbosity=0, skip_checks=False, **output)

    def _listening(self, options, env, *, valkey, embedded_postgres) -> dict:
        """Every port and socket this instance uses, as printed at start and saved in serve.json."""
        host = options["host"]
        client_host = _client_host(host)
        database = urlsplit(env["DATABASE_URL"])
        database_socket = parse_qs(database.query).get("host", [None])[0]
        return {
            "pid": os.getpid(),
            "var_dir": str(settings.VAR_DIR),
            "host": host,
            "web_port": options["port"],
            "web_url": f"http://{client_host}:{options['port']}/",
            "mcp_port": options["mcp_port"] or None,
            "mcp_url": f"http://{client_host}:{options['mcp_port']}/mcp" if options["mcp_port"] else None,
            "valkey_socket": str(valkey.socket_path) if valkey is not None else None,
            "broker": "embedded" if valkey is not None else "configured (CELERY_BROKER_URL)",
            # Where the embedded server's socket is (its data directory, unless that path is too
            # long for a unix socket).
            "postgres_socket_dir": (database_socket or str(embedded_postgres)) if embedded_postgres else None,
            "database": (
                "embedded"
                if embedded_postgres is not None
                else f"configured ({database_socket or database.hostname}:{database.port or 5432})"
            ),
            # Its default is one path per user, which a second instance would share.
            "gunicorn_control_socket": None,
        }

    def _announce_ready(
        self,
        web_url: str,
        stopping: threading.Event,
        *,
        mcp: tuple[str, int] | None = None,
        poll: float = 1.0,
    ) -> None:
        """Print once /readyz answers 200 (every web process checked has loaded its models) and
        the MCP server, when there is one, accepts connections: what the printed addresses
        promise. The MCP process binds on its own schedule, often after gunicorn's first answer."""
        started = time.monotonic()
        last_reasons = None
        web_ready = False
        while not stopping.wait(poll):
            if not web_ready:
                try:
                    with urllib.request.urlopen(web_url + "readyz", timeout=5) as response:
                        web_ready = response.status == 200
                except urllib.error.HTTPError as exc:
                    with contextlib.suppress(ValueError, OSError):
                        last_reasons = json.loads(exc.read()).get("reasons")
                except OSError:
                    pass
            if web_ready:
                if mcp is None or _accepts(mcp):
                    elapsed = f"{time.monotonic() - started:.1f}"
                    self.stdout.write(self.style.SUCCESS(f"Ready after {elapsed} s ({web_url}readyz)."))
                    return
                last_reasons = [f"the MCP server at port {mcp[1]} does not accept connections yet"]
            if time.monotonic() - started > READY_WAIT_SECONDS:
                self.stderr.write(f"Not ready after {READY_WAIT_SECONDS} s: {last_reasons or 'no answer'}.")
                return

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
                    # Its post_worker_init warms each worker (models, database, token counter).
                    f"--config={settings.BASE_DIR / 'memory_project' / 'gunicorn.conf.py'}",
                    f"--bind={_bind_address(options['host'], options['port'])}",
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


def ports_choose(host: str, *, web: int, mcp: int | None) -> tuple[int, int]:
    """The web and MCP ports to listen on, checked free now; CommandError names a taken one.

    Web: `web`, or a free port when 0. MCP: `mcp` when given (0: none), else the web port
    plus MCP_PORT_OFFSET, or a free port when that one is taken or out of range.
    """
    if web == 0:
        web = _free_port(host)
    elif not _port_free(host, web):
        raise CommandError(
            f"Port {web} on {host} is in use (another serve, or another program). "
            "Stop it, or pass --port N, or --port 0 for a free port."
        )
    if mcp is None:
        derived = web + MCP_PORT_OFFSET
        mcp = derived if derived <= 65535 and _port_free(host, derived) else _free_port(host, exclude={web})
    elif mcp and not _port_free(host, mcp):
        raise CommandError(
            f"MCP port {mcp} on {host} is in use. Pass another --mcp-port, or omit it for one "
            f"derived from the web port, or --mcp-port 0 to run without the MCP server."
        )
    return web, mcp


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise CommandError(f"Cannot listen on host {host!r}: {exc}") from exc


def _port_free(host: str, port: int) -> bool:
    """Whether a listening socket could bind host:port now (as gunicorn does, with SO_REUSEADDR)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str, exclude: set[int] = frozenset()) -> int:
    """A port the system hands out as free now; another program could still take it first."""
    while True:
        with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in exclude:
            return port


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _accepts(address: tuple[str, int]) -> bool:
    """Whether a TCP connection to (host as _client_host gives it, port) is accepted."""
    host, port = address
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=2):
            return True
    except OSError:
        return False


def _client_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _listening_lines(listening: dict) -> list[str]:
    lines = [
        f"Var dir:    {listening['var_dir']}  (ports and sockets saved in serve.json)",
        f"Web:        {listening['web_url']}",
        f"MCP:        {listening['mcp_url'] or 'off (--mcp-port 0)'}",
    ]
    if listening["valkey_socket"]:
        lines.append(f"Valkey:     unix socket {listening['valkey_socket']}")
    else:
        lines.append(f"Broker:     {listening['broker']}")
    if listening["postgres_socket_dir"]:
        lines.append(f"PostgreSQL: unix socket in {listening['postgres_socket_dir']} (no TCP port)")
    else:
        lines.append(f"PostgreSQL: {listening['database']}")
    return lines


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
