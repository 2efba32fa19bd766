"""One HTTP client per process for the calls this service makes: the embedding and chat
endpoints and webhook deliveries.

`httpx.post` builds a client for each call, and with it an SSL context that loads the CA
bundle, for an http:// URL too: 43 ms of CPU a call on this machine, more than a whole local
embedding. A shared client builds it once and keeps connections to an endpoint open between
calls. httpx clients are safe to share between threads; a forked child (a gunicorn or Celery
pool process) makes its own, since the parent's open sockets are not its to use.
"""

import os
import threading

import httpx

_client: httpx.Client | None = None
_client_pid: int | None = None
_lock = threading.Lock()


def http_client() -> httpx.Client:
    """This process's client. Callers pass their own timeout and redirect policy per request."""
    global _client, _client_pid
    pid = os.getpid()
    if _client is None or _client_pid != pid:
        with _lock:
            if _client is None or _client_pid != pid:
                _client, _client_pid = httpx.Client(follow_redirects=False), pid
    return _client
