import tempfile
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
