import os

# NumPy's OpenBLAS starts a worker thread per core, which spins after each matrix product. In
# a web or worker process on a few cores that spinning took CPU from the embedding threads and
# PostgreSQL (a batch add of 100: 100 ms of CPU a call, 175 -> 148 ms a call without it;
# docs/speed.md). Set before NumPy is imported, and only when the operator has not set it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .celery import app as celery_app

__all__ = ("celery_app",)
