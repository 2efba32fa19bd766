"""Expired items: never listed, and the sweep deletes only items that are still expired."""

import re
import time
from datetime import timedelta

from django.db import connection
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import workspace_create
from core.testing import MemoryTestCase, thread_started
from store.models import StoreItem
from store.services import store_item_put, store_items_sweep_expired
from store.tests.factories import make_item

LIST = "/api/v1/store/items/"


def expire(*keys):
    StoreItem.objects.filter(key__in=keys).update(expires_at=timezone.now() - timedelta(minutes=5))


class ExpiredItemsListTests(MemoryTestCase):
    def test_the_item_list_leaves_out_expired_items(self):
        """Before: GET /store/items/ listed and counted items whose TTL had run out until the
        sweep deleted them, while get, search and namespaces already hid them."""
        make_item(workspace=self.workspace, key="live")
        make_item(workspace=self.workspace, key="gone", ttl=1)
        make_item(workspace=self.workspace, agent=self.agent, key="agent-live", ttl=60)
        make_item(workspace=self.workspace, agent=self.agent, key="agent-gone", ttl=1)
        expire("gone", "agent-gone")

        listed = self.api().get(LIST).json()
        assert listed["count"] == 2
        assert sorted(item["key"] for item in listed["results"]) == ["agent-live", "live"]
        by_key = self.api().get(LIST, {"key": "gone"}).json()
        assert by_key["count"] == 0 and by_key["results"] == []
        own = self.api(self.agent_key).get(LIST).json()
        assert [item["key"] for item in own["results"]] == ["agent-live"]
        # Still stored until the sweep: hidden, not lost.
        assert StoreItem.objects.count() == 4


class SweepRaceTests(TransactionTestCase):
    """Before: the sweep chose the expired ids, then deleted them by id alone. A put that
    revived one of them in between (a new value, no TTL) was deleted with the old item; with
    the item's vector deleted first, the put and the sweep each waited for the other, and
    PostgreSQL failed one of them (a deadlock: the put's 503, or a failed sweep)."""

    def race(self, *, index):
        workspace = workspace_create(name="Acme")
        make_item(workspace=workspace, key="home", value={"text": "Old flat."}, ttl=1, index=index)
        make_item(workspace=workspace, key="stale", ttl=1, index=index)
        expire("home", "stale")
        errors: list[BaseException] = []
        started = []

        def put_again():
            store_item_put(
                workspace=workspace,
                agent=None,
                namespace=("memories", "ada"),
                key="home",
                value={"text": "New flat."},
                index=index,
            )

        def racing_put(execute, sql, params, many, context):
            # The put runs just before the sweep deletes the items' rows, on its own connection.
            if not started and re.match(r'DELETE FROM "store_storeitem" WHERE', sql):
                started.append(thread_started(put_again, errors))
                until_done_or_waiting(started[0])
            return execute(sql, params, many, context)

        with connection.execute_wrapper(racing_put):
            store_items_sweep_expired()
        assert started, "the sweep deleted nothing"
        started[0].join(30)

        assert errors == []
        assert dict(StoreItem.objects.values_list("key", "value")) == {"home": {"text": "New flat."}}
        assert StoreItem.objects.get(key="home").expires_at is None

    def test_an_item_put_again_while_the_sweep_runs_is_kept(self):
        self.race(index=False)

    def test_an_indexed_item_put_again_while_the_sweep_runs_is_kept(self):
        self.race(index=None)


def until_done_or_waiting(thread, timeout: float = 30) -> None:
    """Return once `thread` has ended or a backend of the test database waits on a lock."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)


class ExpiredItemPutTests(MemoryTestCase):
    def test_a_put_over_an_expired_item_creates_it_anew(self):
        """Before: a put at the place of an expired item not swept yet answered 200 (replaced)
        though a get answered 404 for it, and the new item stayed the old item's person's,
        so that person's erasure would delete it."""
        from identities.tests.factories import MemoryUserFactory

        ada = MemoryUserFactory(workspace=self.workspace)
        make_item(workspace=self.workspace, key="home", ttl=1, memory_user=ada)
        expire("home")
        body = {"namespace": ["memories", "ada"], "key": "home", "value": {"text": "Someone else's flat."}}
        created = self.api().put("/api/v1/store/item/", body, format="json")
        assert created.status_code == 201, created.content
        item = StoreItem.objects.get(key="home")
        assert item.memory_user_id is None and item.expires_at is None
        # A live item is replaced, and keeps its person when the put names none.
        make_item(workspace=self.workspace, key="pet", memory_user=ada)
        replaced = self.api().put("/api/v1/store/item/", {**body, "key": "pet"}, format="json")
        assert replaced.status_code == 200
        assert StoreItem.objects.get(key="pet").memory_user_id == ada.pk
