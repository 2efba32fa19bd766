"""Settings of the beat processes in the scale-out test: one periodic task, every second.

The real schedule's shortest period is 30 s; a one-second heartbeat shows within seconds
which beat sends and when a standby takes over.
"""

from datetime import timedelta

from memory_project.settings.development import *  # noqa: F403

CELERY_BEAT_SCHEDULE = {
    "core-worker-heartbeat": {
        "task": CELERY_BEAT_SCHEDULE["core-worker-heartbeat"]["task"],  # noqa: F405
        "schedule": timedelta(seconds=1),
    },
}
