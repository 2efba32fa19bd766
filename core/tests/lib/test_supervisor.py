"""serve's supervision: a child that dies is restarted with capped backoff (issue 11, finding 5)."""

import subprocess

from django.test import SimpleTestCase

from core.lib.supervisor import ChildSpec, Supervisor


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class SupervisorBackoffTests(SimpleTestCase):
    def crashing_supervisor(self, clock, **kwargs):
        supervisor = Supervisor(
            [ChildSpec("crashing", ["/bin/sh", "-c", "exit 3"])],
            clock=clock,
            popen_kwargs={"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL},
            **kwargs,
        )
        self.addCleanup(supervisor.stop)
        return supervisor

    def die(self, child):
        child.process.wait(timeout=10)

    def test_a_child_crashing_in_a_loop_is_restarted_after_doubling_delays_up_to_the_cap(self):
        clock = FakeClock()
        supervisor = self.crashing_supervisor(clock, backoff_initial=1, backoff_max=8, stable_after=30)
        supervisor.start()
        child = supervisor.child("crashing")
        delays = []
        with self.assertLogs("core.lib.supervisor", level="WARNING") as logs:
            for _ in range(6):
                self.die(child)
                supervisor.poll()  # notices the death, schedules the restart
                assert child.process is None
                delays.append(child.restart_at - clock.now)
                clock.now = child.restart_at - 0.01
                supervisor.poll()
                assert child.process is None  # not before its time
                clock.now = child.restart_at
                supervisor.poll()
                assert child.process is not None
        assert delays == [1, 2, 4, 8, 8, 8]
        assert child.restarts == 6
        assert "crashing (pid" in logs.output[0] and "exited with status 3" in logs.output[0]

    def test_a_child_that_ran_a_while_restarts_after_the_first_delay_again(self):
        clock = FakeClock()
        supervisor = self.crashing_supervisor(clock, backoff_initial=1, backoff_max=60, stable_after=30)
        supervisor.start()
        child = supervisor.child("crashing")
        with self.assertLogs("core.lib.supervisor", level="WARNING"):
            for _ in range(3):
                self.die(child)
                supervisor.poll()
                clock.now = child.restart_at
                supervisor.poll()
            self.die(child)
            clock.now += 31  # it had been up longer than stable_after
            supervisor.poll()
        assert child.restart_at - clock.now == 1

    def test_stop_stops_every_child_last_started_first_and_none_restarts(self):
        sleeper = ["/bin/sh", "-c", "sleep 60"]
        supervisor = Supervisor([ChildSpec("worker", sleeper), ChildSpec("web", sleeper)])
        supervisor.start()
        processes = [child.process for child in supervisor.children]
        supervisor.stop()
        assert all(process.poll() is not None for process in processes)
        supervisor.poll()
        assert all(child.process is None for child in supervisor.children)
