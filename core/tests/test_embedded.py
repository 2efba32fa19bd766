import shutil
import tempfile
import time
from pathlib import Path

import pytest

from core.lib.embedded import EmbeddedValkey


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


@pytest.mark.slow
def test_a_killed_valkey_is_started_again_by_its_owner_only():
    """serve's watch: kill -9 of the Valkey it started gives a new server on the same socket."""
    import os
    import signal

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
