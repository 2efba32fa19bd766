import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.development")

# DjangoTask gives every task `delay_on_commit`, so nothing is enqueued before its rows commit.
app = Celery("memory_project", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
