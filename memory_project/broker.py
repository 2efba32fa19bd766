"""The Redis/Valkey transport's options, derived from the two timings the settings read."""


def broker_transport_options(*, visibility_timeout: int, restore_interval: int) -> dict:
    """Options for `CELERY_BROKER_TRANSPORT_OPTIONS`.

    `visibility_timeout`: Redis/Valkey has no acknowledgement protocol, so a message delivered
    and not acknowledged within this many seconds is delivered again. It is also how long the
    messages of a worker whose main process was killed (-9, power loss) wait before another
    worker takes them (a warm shutdown hands them back at once).

    `restore_interval`: seconds between a worker's scans for such messages (kombu scans on
    every 10th tick by default, so the first scan after the timeout could come 100 s late).

    A scan holds a lock in the broker. A worker killed during one leaves the lock behind until
    it expires, and no worker restores anything meanwhile: kombu's expiry is 5 minutes,
    whatever the interval. A scan takes milliseconds, so the lock expires after three
    intervals (5 s at least).

    Not covered by either: a message the main process popped from the queue and was killed
    before recording as unacknowledged is gone from the broker. The periodic sweeps take its
    work up again from PostgreSQL (docs/deploy.md).
    """
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": restore_interval,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": max(5, 3 * restore_interval),
    }
