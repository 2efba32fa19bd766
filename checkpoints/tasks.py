from celery import shared_task

from checkpoints.services import checkpoints_prune


@shared_task(acks_late=True)
def checkpoints_prune_task():
    return checkpoints_prune()
