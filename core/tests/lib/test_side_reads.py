"""The pool that reads beside a request (core.lib.side_reads)."""

import os
import signal
import threading

from django.test import SimpleTestCase, override_settings

from core.lib import side_reads


@override_settings(SIDE_READ_THREADS=2)
class SideReadsTests(SimpleTestCase):
    def tearDown(self):
        side_reads.side_reads_close()

    def test_a_read_runs_on_a_pool_thread(self):
        started = side_reads.side_read_started(lambda *, x: (x, threading.current_thread().name), x=7)
        (value, thread), milliseconds = started.result(timeout=10)
        assert value == 7 and thread.startswith(side_reads.THREAD_PREFIX)
        assert milliseconds >= 0

    def test_nothing_queues_behind_busy_threads(self):
        release = threading.Event()
        held = [side_reads.side_read_started(release.wait, timeout=10) for _ in range(2)]
        try:
            assert all(future is not None for future in held)
            assert side_reads.side_read_started(lambda: 1) is None
        finally:
            release.set()
        for future in held:
            future.result(timeout=10)
        assert side_reads.side_read_started(lambda: 1).result(timeout=10)[0] == 1

    def test_a_failing_read_raises_in_the_caller_and_frees_its_thread(self):
        def failing():
            raise ValueError("no")

        for _ in range(3):  # More than the pool's two threads: each failure gave its slot back.
            with self.assertRaises(ValueError):
                side_reads.side_read_started(failing).result(timeout=10)

    def test_a_forked_process_gets_threads_of_its_own(self):
        """A pool made before a fork has no threads in the child: the child must not hang."""
        assert side_reads.side_read_started(lambda: 1).result(timeout=10)[0] == 1
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            signal.alarm(30)
            started = side_reads.side_read_started(lambda: 2)
            os._exit(0 if started is not None and started.result(timeout=20)[0] == 2 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

    def test_no_threads_no_reads_beside(self):
        with override_settings(SIDE_READ_THREADS=0):
            assert side_reads.side_reads_enabled() is False
