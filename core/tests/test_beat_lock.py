"""The beat scheduler sends only while it holds the PostgreSQL beat lock (issue 12)."""

import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.db import connection
from django.test import TransactionTestCase

from core.lib.beat import BEAT_LOCK_KEY, STANDBY_RETRY_SECONDS, LockedPersistentScheduler
from memory_project.celery import app

ENTRY = "beat-lock-test-tick"


class RecordingScheduler(LockedPersistentScheduler):
    """Records what it would send instead of sending it: the broker is not under test."""

    def __init__(self, *args, **kwargs):
        self.sent: list[str] = []
        super().__init__(*args, **kwargs)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        self.sent.append(entry.name)


class BeatLockTests(TransactionTestCase):
    def setUp(self):
        # PersistentScheduler takes its entries from the app's configuration.
        previous = app.conf.beat_schedule
        app.conf.beat_schedule = {ENTRY: {"task": "beat.lock.test", "schedule": timedelta(seconds=0.2)}}
        self.addCleanup(setattr, app.conf, "beat_schedule", previous)
        directory = Path(tempfile.mkdtemp(prefix="memory-test-beat-"))
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        self.schedulers = [self._scheduler(directory / f"schedule-{name}") for name in ("a", "b")]
        self.next_tick = {id(s): 0.0 for s in self.schedulers}

    def _scheduler(self, filename: Path) -> RecordingScheduler:
        scheduler = RecordingScheduler(app, schedule_filename=str(filename))
        self.addCleanup(scheduler.close)
        return scheduler

    def _tick_all(self, seconds: float) -> None:
        """Tick each scheduler when it asked to be ticked again, as beat's loop does."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for scheduler in self.schedulers:
                now = time.monotonic()
                if now >= self.next_tick[id(scheduler)]:
                    self.next_tick[id(scheduler)] = now + scheduler.tick()
            time.sleep(0.02)

    def _ticks_of(self, scheduler) -> int:
        return scheduler.sent.count(ENTRY)

    def _lock_holders(self) -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND ((classid::bigint << 32) | objid::bigint) = %s",
                [BEAT_LOCK_KEY],
            )
            return [row[0] for row in cursor.fetchall()]

    def test_only_the_holder_sends(self):
        """Two schedulers on one database: the first takes the lock and sends, the other stands by."""
        holder, standby = self.schedulers
        self._tick_all(1.5)
        assert holder.holds_lock
        assert not standby.holds_lock
        assert self._ticks_of(holder) >= 3
        assert self._ticks_of(standby) == 0
        assert self._lock_holders() == [holder._lock_connection.info.backend_pid]

    def test_standby_takes_over_when_the_holders_connection_closes(self):
        """The lock goes with the holder's session: when its process dies, the standby sends."""
        holder, standby = self.schedulers
        self._tick_all(0.5)
        assert holder.holds_lock
        # What a killed process leaves: a closed session and no more ticks.
        holder._lock_connection.close()
        self.schedulers = [standby]
        started = time.monotonic()
        deadline = started + 10
        while not standby.holds_lock and time.monotonic() < deadline:
            self._tick_all(0.1)
        assert standby.holds_lock
        # Within the standby's retry interval (plus scheduling slack).
        assert time.monotonic() - started < STANDBY_RETRY_SECONDS + 1.0
        self._tick_all(1.0)
        assert self._ticks_of(standby) >= 2

    def test_lock_lost_with_a_terminated_backend_stops_sending(self):
        """A database restart drops the holder's session: it stops sending until it holds the lock again."""
        holder, standby = self.schedulers
        standby.close()
        self.schedulers = [holder]
        self._tick_all(0.5)
        assert holder.holds_lock
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [holder._lock_connection.info.backend_pid])
        # Taken by another session meanwhile (the standby of another host). The terminated
        # backend releases the lock when it has exited, a moment after pg_terminate_backend.
        deadline = time.monotonic() + 10
        taken = False
        with connection.cursor() as cursor:
            while not taken and time.monotonic() < deadline:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [BEAT_LOCK_KEY])
                taken = cursor.fetchone()[0]
                if not taken:
                    time.sleep(0.05)
        assert taken
        try:
            sent_before = self._ticks_of(holder)
            self._tick_all(1.0)
            assert not holder.holds_lock
            assert self._ticks_of(holder) == sent_before
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [BEAT_LOCK_KEY])
        # Once the lock is free it takes it again and resumes.
        deadline = time.monotonic() + 10
        while not holder.holds_lock and time.monotonic() < deadline:
            self._tick_all(0.2)
        assert holder.holds_lock
        self._tick_all(0.6)
        assert self._ticks_of(holder) > sent_before
