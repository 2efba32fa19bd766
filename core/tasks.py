import socket

from celery import shared_task
from celery.signals import worker_ready

from core.services import api_keys_purge_expired, worker_heartbeat_record


@shared_task
def worker_heartbeat_task(worker: str | None = None):
    worker_heartbeat_record(worker=worker or socket.gethostname())


@shared_task
def api_keys_purge_expired_task():
    return api_keys_purge_expired()


@worker_ready.connect
def _heartbeat_on_start(sender, **kwargs):
    # /readyz sees a fresh worker at once instead of after the first beat interval.
    worker_heartbeat_task.delay(worker=getattr(sender, "hostname", None) or socket.gethostname())
