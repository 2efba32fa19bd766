"""Reads of opted-in views go to a real streaming standby only where that is safe (issue 12)."""

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.test import override_settings

from core.models import Workspace
from core.tests.replica.standby import StandbyTestCase


class ReplicaRoutingTests(StandbyTestCase):
    def test_opted_in_get_reads_the_standby(self):
        """A GET to a view with read_replica = True is answered from the standby."""
        response = self.api(self.key).get("/api/names/")

        assert response.status_code == 200
        assert response.json() == {"names": ["Acme"], "server": "standby"}

    def test_opted_in_head_reads_the_standby(self):
        """HEAD is as safe as GET (its body is dropped, the reads happen)."""
        response = self.api(self.key).head("/api/names/")

        assert response.status_code == 200

    def test_post_writes_and_reads_the_primary(self):
        """The write and the reads after it in the same request use the primary."""
        response = self.api(self.key).post("/api/names/", {"name": "Initech"}, format="json")

        assert response.status_code == 201
        assert response.json() == {"names": ["Acme", "Initech"], "server": "primary"}
        assert Workspace.objects.using(DEFAULT_DB_ALIAS).filter(name="Initech").exists()

    @override_settings(DATABASE_REPLICA_MAX_LAG_SECONDS=3600)
    def test_writer_reads_its_write_while_others_read_the_lagging_standby(self):
        """After a write, the same key reads the primary; another key still reads the standby.

        Replay is paused, so the standby cannot show the write: the writer seeing it proves
        its read went to the primary because it wrote.
        """
        self.replay_pause()
        self.api(self.key).post("/api/names/", {"name": "Initech"}, format="json")

        own = self.api(self.key).get("/api/names/")
        other = self.api(self.other_key).get("/api/names/")

        assert own.json() == {"names": ["Acme", "Initech"], "server": "primary"}
        assert other.json() == {"names": ["Acme"], "server": "standby"}

    def test_read_only_post_search_reads_the_standby_and_does_not_pin(self):
        """A POST to a view declaring read_only_safe is a read: standby, and no pin after."""
        client = self.api(self.key)

        search = client.post("/api/names/search/", {}, format="json")
        after = client.get("/api/names/")

        assert search.json() == {"names": ["Acme"], "server": "standby"}
        assert after.json()["server"] == "standby"

    def test_write_refused_does_not_pin(self):
        """A refused write (400) changed nothing, so the caller keeps reading the standby."""
        self.api(self.key).post("/api/names/", {"name": ""}, format="json")

        response = self.api(self.key).get("/api/names/")

        assert response.json()["server"] == "standby"

    def test_view_not_opted_in_reads_the_primary(self):
        response = self.api(self.key).get("/api/names/primary/")

        assert response.json() == {"names": ["Acme"], "server": "primary"}

    def test_reads_inside_atomic_read_the_primary(self):
        """An opted-in view's reads in transaction.atomic stay on the primary."""
        response = self.api(self.key).get("/api/names/atomic/")

        assert response.json()["server"] == "primary"

    def test_pool_threads_read_the_primary(self):
        """A thread the view starts does not inherit the request's choice (contextvar)."""
        response = self.api(self.key).get("/api/names/pool/")

        assert response.json() == {
            "request_thread": {"names": ["Acme"], "server": "standby"},
            "pool_thread": {"names": ["Acme"], "server": "primary"},
        }

    @override_settings(DATABASE_REPLICA_MAX_LAG_SECONDS=0)
    def test_lagging_standby_is_not_read(self):
        """A standby behind by more than the allowed lag is skipped: the read sees the primary."""
        self.replay_pause()
        self.api(self.other_key).post("/api/names/", {"name": "Initech"}, format="json")
        self.replayed_wait(received_only=True)

        response = self.api(self.key).get("/api/names/")

        assert response.json() == {"names": ["Acme", "Initech"], "server": "primary"}

    def test_session_user_is_pinned_after_a_write(self):
        """Browser views: @read_replica opts in, and the session's user is the principal."""
        user = get_user_model().objects.create_user(username="operator", password="x" * 20)
        self.replayed_wait()
        self.client.force_login(user)

        before = self.client.get("/names/")
        self.client.post("/names/", {"name": "Initech"})
        after = self.client.get("/names/")

        assert before.json()["server"] == "standby"
        assert after.json() == {"names": ["Acme", "Initech"], "server": "primary"}

    def test_unreachable_cache_reads_the_primary(self):
        """Without the pin store, reads take the primary (the caller may have written) and writes succeed.

        Browser views: the API's throttle needs the same cache and fails without it.
        """
        user = get_user_model().objects.create_user(username="operator", password="x" * 20)
        self.client.force_login(user)
        broken = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "unix:///nonexistent/valkey.sock",
            }
        }
        with override_settings(CACHES=broken):
            read = self.client.get("/names/")
            written = self.client.post("/names/", {"name": "Initech"})

        assert read.json() == {"names": ["Acme"], "server": "primary"}
        assert written.status_code == 200
