"""The project's processes keep NumPy's OpenBLAS on one thread (memory_project/__init__.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_THREADS = """
import memory_project, numpy, os
numpy.ones((400, 400)) @ numpy.ones((400, 400))
print(len(os.listdir("/proc/self/task")), os.environ["OPENBLAS_NUM_THREADS"])
"""


def _run(**env) -> tuple[int, str]:
    environ = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", _THREADS],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), out[1]


def test_openblas_starts_no_worker_thread_in_the_projects_processes():
    """Its worker threads spin after each matrix product, taking a core from the embedding
    threads and PostgreSQL: the process has its main thread only."""
    assert _run() == (1, "1")


def test_an_operators_openblas_setting_is_kept():
    threads, setting = _run(OPENBLAS_NUM_THREADS="2")
    assert setting == "2"
    assert threads == min(2, os.cpu_count() or 1)
