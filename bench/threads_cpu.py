"""CPU accounting for the conversation-memory benchmarks.

On a shared machine wall-clock latencies include time spent waiting for a core. These
helpers add what the work itself costs: CPU seconds of this process (Django, the test
client) and of the PostgreSQL backend serving its connection (read from /proc).
"""

import os
import time
from contextlib import contextmanager


def backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a local process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def cpu_meter():
    """`with cpu_meter() as used: ...` then `used()` gives (django_seconds, postgres_seconds)."""
    pid = backend_pid()
    backend_before = process_cpu_seconds(pid)
    before = time.process_time()
    result = {}

    def used() -> tuple[float, float]:
        return result["django"], result["postgres"]

    try:
        yield used
    finally:
        result["django"] = time.process_time() - before
        result["postgres"] = process_cpu_seconds(pid) - backend_before


def load_average() -> float:
    return os.getloadavg()[0]
