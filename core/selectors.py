import hashlib
import hmac
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.lib.crypto import decrypt
from core.models import Agent, ApiKey, Membership, ProviderCredential, WorkerHeartbeat, Workspace

# last_used_at is refreshed at most this often, so a busy key costs no write per request.
API_KEY_TOUCH_INTERVAL = timedelta(seconds=60)


def api_key_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def api_key_parse_prefix(secret: str) -> str | None:
    # Keys look like "mem_<prefix>_<secret>"; the prefix is the indexed lookup value.
    parts = secret.split("_")
    if len(parts) != 3 or parts[0] != "mem" or not parts[1]:
        return None
    return parts[1]


# Authenticated keys (with their workspace and agent) are remembered per process for
# settings.API_KEY_CACHE_SECONDS: the lookup was ~30% of a trivial request
# (bench.checkpoints_put_get's calibration GET). A revocation or an agent settings change
# is seen at once by the process that makes it and within that many seconds by the others.
_api_key_cache: dict[str, tuple[float, ApiKey]] = {}
_API_KEY_CACHE_MAX = 10_000


def api_key_cache_clear() -> None:
    _api_key_cache.clear()


def api_key_authenticate(*, secret: str) -> ApiKey | None:
    """The active key for `secret`, or None. Also refreshes last_used_at (throttled)."""
    prefix = api_key_parse_prefix(secret)
    if prefix is None:
        return None
    digest = api_key_hash(secret)
    clock = time.monotonic()
    cached = _api_key_cache.get(digest)
    if cached is not None and clock - cached[0] < settings.API_KEY_CACHE_SECONDS and cached[1].is_active:
        api_key = cached[1]
    else:
        api_key = ApiKey.objects.active().select_related("workspace", "agent").filter(prefix=prefix).first()
        if api_key is None or not hmac.compare_digest(api_key.secret_hash, digest):
            _api_key_cache.pop(digest, None)
            return None
        if len(_api_key_cache) >= _API_KEY_CACHE_MAX:
            _api_key_cache.clear()
        _api_key_cache[digest] = (clock, api_key)
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > API_KEY_TOUCH_INTERVAL:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


def workspace_list_for_user(*, user):
    return Workspace.objects.for_user(user).order_by("name")


def membership_get(*, user, workspace_id) -> Membership | None:
    return (
        Membership.objects.select_related("workspace", "user")
        .filter(user=user, workspace_id=workspace_id)
        .first()
    )


def membership_list(*, workspace):
    return Membership.objects.filter(workspace=workspace).select_related("user").order_by("user__username")


def agent_list(*, principal: Principal):
    agents = scope_to_principal(Agent.objects.all(), principal, agent_field=None)
    if principal.agent is not None:
        agents = agents.filter(pk=principal.agent.pk)
    return agents.order_by("slug")


def agent_get(*, principal: Principal, slug: str) -> Agent:
    agent = agent_list(principal=principal).filter(slug=slug).first()
    if agent is None:
        raise NotFoundError(f"Agent '{slug}' not found.")
    return agent


def api_key_list(*, workspace):
    return ApiKey.objects.filter(workspace=workspace).select_related("agent").order_by("-created_at")


# Endpoints per (workspace, purpose), kept per process for settings.PROVIDER_CACHE_SECONDS:
# every context assembly and search looks up the embedding endpoint (~1 ms with the
# decryption); provider_credential_set clears it, other processes see a change within the TTL.
_provider_cache: dict = {}
_PROVIDER_CACHE_MAX = 10_000


def provider_cache_clear() -> None:
    _provider_cache.clear()


def provider_credential_get(*, workspace, purpose: str) -> dict | None:
    """The workspace's endpoint for `purpose` with its key decrypted, else the settings' one."""
    ttl = settings.PROVIDER_CACHE_SECONDS
    key = (getattr(workspace, "pk", workspace), purpose)
    clock = time.monotonic()
    cached = _provider_cache.get(key) if ttl > 0 else None
    if cached is not None and clock - cached[0] < ttl:
        return dict(cached[1]) if cached[1] is not None else None
    endpoint = _provider_credential_read(workspace=workspace, purpose=purpose)
    if ttl > 0:
        if len(_provider_cache) >= _PROVIDER_CACHE_MAX:
            _provider_cache.clear()
        _provider_cache[key] = (clock, endpoint)
    return dict(endpoint) if endpoint is not None else None


def _provider_credential_read(*, workspace, purpose: str) -> dict | None:
    credential = ProviderCredential.objects.filter(workspace=workspace, purpose=purpose).first()
    if credential is not None:
        return {
            "base_url": credential.base_url,
            "model": credential.model,
            "api_key": decrypt(credential.api_key_encrypted),
            "private_allowed": credential.private_allowed,
        }
    # The operator's own endpoints (a model on the server's network) are not a tenant's word:
    # their address is not checked when requests are sent.
    if purpose == ProviderCredential.Purpose.CHAT and settings.LLM_BASE_URL:
        return {
            "base_url": settings.LLM_BASE_URL,
            "model": settings.LLM_MODEL,
            "api_key": settings.LLM_API_KEY,
            "private_allowed": True,
        }
    if purpose == ProviderCredential.Purpose.EMBEDDING and settings.EMBEDDING_BASE_URL:
        return {
            "base_url": settings.EMBEDDING_BASE_URL,
            "model": settings.EMBEDDING_MODEL,
            "api_key": settings.EMBEDDING_API_KEY,
            "private_allowed": True,
        }
    return None


def readiness_check() -> dict:
    """Database, broker, worker heartbeat and this process's warm-up status for /readyz.

    A check that fails carries a machine-readable `reason`; one that passes with a caveat (an
    embedding endpoint that did not answer the start-up probe) carries a `warning`.
    """
    checks = {"warmup": _warmup_check()}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = {"ok": True}
    except Exception as exc:
        checks["database"] = {"ok": False, "reason": "database_unavailable", "error": str(exc)[:200]}

    try:
        # The project's app: memory_project/__init__.py makes it current at start-up.
        from celery import current_app

        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = {"ok": True}
    except Exception as exc:
        checks["broker"] = {"ok": False, "reason": "broker_unavailable", "error": str(exc)[:200]}

    checks["worker"] = {"ok": False, "reason": "no_worker_heartbeat"}
    if checks["database"]["ok"]:
        latest = WorkerHeartbeat.objects.order_by("-beat_at").first()
        if latest is not None:
            age = (timezone.now() - latest.beat_at).total_seconds()
            checks["worker"] = {
                "ok": age <= settings.WORKER_HEARTBEAT_MAX_AGE_SECONDS,
                "worker": latest.worker,
                "last_heartbeat_seconds_ago": round(age, 1),
            }
            if not checks["worker"]["ok"]:
                checks["worker"]["reason"] = "worker_heartbeat_stale"
    return checks


def _warmup_check() -> dict:
    """Ready once this process has loaded its models (core/lib/warmup.py).

    A process that never started a warm-up (runserver, tests, gunicorn without
    memory_project/gunicorn.conf.py) is not held back: it loads on first use, as before.
    """
    from core.lib.warmup import FAILED, WARMING, warmup_status

    state = warmup_status()
    check = {"ok": state["status"] not in (WARMING, FAILED), **state}
    if state["status"] == WARMING:
        check["reason"] = "warming"
    elif state["status"] == FAILED:
        check["reason"] = "warmup_failed"
    embeddings = state.get("embeddings") or {}
    if embeddings.get("reachable") is False:
        check["warning"] = "embedding_endpoint_unreachable"
    return check
