import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.development")

# DjangoTask gives every task `delay_on_commit`, so nothing is enqueued before its rows commit;
# MemoryTask keeps a swept task's send from failing a committed write (core.lib.celery_task).
app = Celery("memory_project", task_cls="core.lib.celery_task:MemoryTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _warm_up(**kwargs):
    """Each pool process loads the embedding model before its first task needs it.

    In a background thread: a pool process that does not report up within 4 s
    (worker_proc_alive_timeout) is replaced, and loading the model takes longer than that.
    A task that arrives meanwhile waits for the same load instead of starting another.
    """
    from core.lib.warmup import warmup_start

    warmup_start()
