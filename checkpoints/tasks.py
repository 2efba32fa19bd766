from celery import shared_task

from checkpoints.services import checkpoints_prune


@shared_task
def checkpoints_prune_task():
    return checkpoints_prune()
