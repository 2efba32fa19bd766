"""gunicorn hooks for the memory server; `serve` and the Dockerfile pass it with `--config`.

Settings stay on the command line (serve's options, the image's GUNICORN_CMD_ARGS); this file
only holds what a command line cannot: each worker warms up once it has loaded the app
(core/lib/warmup.py), in a background thread, so it accepts connections at once and
`/readyz` answers 503 `"warming"` until its embedding model is loaded.

Not `--preload`: the master would load torch and the model and fork them into the workers,
which would share the weights' memory and start a replaced worker warm; but torch's OpenMP
thread pool is not documented as safe to use across a fork once started, and that was not
measured here, so each worker loads its own copy.
"""


def post_worker_init(worker):
    from core.lib.warmup import warmup_start

    # Once warm, the long-lived objects leave the collector's generations (gc.freeze): full
    # collections no longer walk the model and the modules on every request (core/lib/warmup.py).
    warmup_start(freeze=True)


def worker_exit(server, worker):
    """Skip the collector's last pass over the interpreter's objects on the way out.

    sentence-transformers imports hundreds of modules; collecting them at exit took 4.8 s
    of a worker's shutdown (0.7 s frozen) on 2 busy cores, and gunicorn's graceful timeout
    (10 s under serve) had to cover it.
    """
    import gc

    gc.freeze()
