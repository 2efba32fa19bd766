"""Settings shared by every environment. Values come from the environment (see README)."""

from datetime import timedelta
from pathlib import Path

from celery.schedules import crontab
from kombu import Queue

from memory_project.broker import broker_transport_options
from memory_project.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("MEMORY_VAR_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = env_str("DJANGO_SECRET_KEY", "dev-insecure-8c1f0e8b3b9a4f7f9d2e6a1c5b7d3e0f-change-me")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    # Trigram lookups (`trigram_word_similar`) used by fuzzy fact key search.
    "django.contrib.postgres",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "core",
    "identities",
    "threads",
    "facts",
    "episodes",
    "episodic",
    "procedures",
    "checkpoints",
    "store",
    "webhooks",
    "activity",
    "portability",
    "retention",
    "review",
    "provenance",
    "reflection",
    "runtime",
    "browser",
]

MIDDLEWARE = [
    # First, so every log line of a request, and every /api/ response, carries its id.
    "core.middleware.RequestIdMiddleware",
    # Runs the request's bookkeeping (core.lib.after_response) once the response is sent.
    "core.middleware.AfterResponseMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.ApiBodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "memory_project.urls"
WSGI_APPLICATION = "memory_project.wsgi.application"
ASGI_APPLICATION = "memory_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The embedded server listens on a unix socket in its data directory (no TCP port).
EMBEDDED_POSTGRES_DIR = VAR_DIR / "postgres"
EMBEDDED_VALKEY_DIR = VAR_DIR / "valkey"
EMBEDDED_VALKEY_SOCKET = EMBEDDED_VALKEY_DIR / "valkey.sock"
DATABASE_URL = env_str(
    "DATABASE_URL",
    f"postgresql://postgres@/memory?host={EMBEDDED_POSTGRES_DIR / 'data'}",
)
DATABASES = {"default": database_from_url(DATABASE_URL)}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A connection idle longer than this is checked with a round trip before a request uses it;
# one used more recently only when its socket shows the server ended it (core/lib/postgresql).
DATABASE_HEALTH_CHECK_IDLE_SECONDS = env_float("DATABASE_HEALTH_CHECK_IDLE_SECONDS", 10.0)
# A web process's statements and lock waits end after this long (0: no limit): the request
# gets a 503 with Retry-After rather than holding its thread and connection for as long as a
# runaway statement or a held lock takes. Workers and commands have no limit (core/lib/postgresql).
DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS = env_float("DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS", 30.0)
DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS = env_float("DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS", 10.0)
# Read replica (core/lib/replica.py, docs/deploy.md): unset, there is no "replica" alias,
# router or middleware, and nothing reads anywhere but the primary.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL", "")
# Seconds a caller's reads stay on the primary after it wrote: above the replica's usual lag.
DATABASE_REPLICA_PIN_SECONDS = env_int("DATABASE_REPLICA_PIN_SECONDS", 5)
# A replica further behind than this is not read (checked at most once per CHECK_SECONDS).
DATABASE_REPLICA_MAX_LAG_SECONDS = env_float("DATABASE_REPLICA_MAX_LAG_SECONDS", 5.0)
DATABASE_REPLICA_CHECK_SECONDS = env_float("DATABASE_REPLICA_CHECK_SECONDS", 1.0)
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = {
        **database_from_url(DATABASE_REPLICA_URL),
        "CONN_MAX_AGE": DATABASES["default"]["CONN_MAX_AGE"],
        "CONN_HEALTH_CHECKS": True,
        # The same server as default in tests: no second test database is created for it.
        "TEST": {"MIRROR": "default"},
    }
    DATABASE_ROUTERS = ["core.lib.replica.ReplicaRouter"]
    # After the session and authentication middleware, which identify the caller to pin.
    MIDDLEWARE = [*MIDDLEWARE, "core.middleware.ReadReplicaMiddleware"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Django 6.0 behaviour now: a scheme-less URL typed into a form means https.
FORMS_URLFIELD_ASSUME_HTTPS = True

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", f"redis+socket://{EMBEDDED_VALKEY_SOCKET}")
CACHE_URL = env_str("CACHE_URL", f"unix://{EMBEDDED_VALKEY_SOCKET}?db=1")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CACHE_URL,
        "TIMEOUT": 300,
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
# WhiteNoise warns on every start when the directory is missing; collectstatic fills it.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/memories/"
LOGOUT_REDIRECT_URL = "login"

# Requests to /api/ with a larger body are refused with 413 before they are read.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 5 * 1024 * 1024)
# Seconds a web process trusts an API key it has authenticated before looking it up again.
API_KEY_CACHE_SECONDS = env_float("API_KEY_CACHE_SECONDS", 5.0)
# Seconds the recall counters of a web process's requests are gathered before one upsert
# stores them (core/counters.py); 0 writes each request's count after its response.
COUNTERS_FLUSH_SECONDS = env_float("COUNTERS_FLUSH_SECONDS", 1.0)
# Seconds a process keeps a workspace's LLM / embedding endpoint before reading it again.
PROVIDER_CACHE_SECONDS = env_float("PROVIDER_CACHE_SECONDS", 5.0)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["core.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["core.permissions.HasApiKey"],
    "DEFAULT_THROTTLE_CLASSES": ["core.throttling.ApiKeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api_key": env_str("API_THROTTLE_RATE", "6000/min")},
    "DEFAULT_PAGINATION_CLASS": "core.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON only, under one guard: size, nesting depth, NUL, lone surrogates, NaN (core/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["core.parsers.GuardedJSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "core.schema.AutoSchema",
    "EXCEPTION_HANDLER": "core.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Memory server API",
    "DESCRIPTION": (
        "Durable, isolated, searchable memory for AI agents. Authenticate with "
        "`Authorization: Bearer <api key>`; every object is scoped to the key's workspace."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The security scheme and each operation's requirement come from core.schema's
    # authentication extension; a global SECURITY here would list it twice per operation.
    # Several serializers have an `outcome` field with different choices; name each set.
    "ENUM_NAME_OVERRIDES": {
        "EpisodeOutcomeEnum": "episodes.models.Episode.Outcome",
        "EpisodicEntrySourceEnum": "episodic.models.EpisodicEntry.Source",
        "MessageRoleEnum": "threads.lib.validation.ROLES",
        "RetentionTierEnum": "retention.models.Tier",
        "EvidenceTierEnum": "provenance.selectors.TIERS",
        "ReviewTierEnum": "review.selectors.TIERS",
    },
    # The groups of the reference, in the order a user meets them; core.schema.TAG_BY_ROUTE
    # puts each operation in one by its route, and a test keeps both complete.
    "TAGS": [
        {
            "name": "Agents & keys",
            "description": "An agent is one assistant of the workspace (its slug names it in every "
            "other call) with its own memory settings. API keys are made and revoked in the browser "
            "at /memories (API keys tab): a workspace key acts for every agent, an agent-bound key "
            "only for its own, a read-only key reads. Start here: register the agent your bot runs "
            "as, then tune what it remembers with `memory_settings`.",
        },
        {
            "name": "Identities",
            "description": "Memory users: the people your agents talk to, each with the channel "
            "identities (telegram id, email, ...) that name them. `identify` finds or creates the "
            "person behind a channel identity in one call; merge joins two records of one person; "
            "delete is the right to erasure and removes everything stored about them.",
        },
        {
            "name": "Threads & messages",
            "description": "Conversations. A thread belongs to an agent (and usually a memory user) "
            "and holds its messages as a tree: append one message or a batch with idempotency keys, "
            "read the history window that fits a token budget, and compact old turns into a summary.",
        },
        {
            "name": "Context & recall",
            "description": "The runtime, one call per agent turn: `context` assembles the system "
            "prompt, user profile, memory, procedures and history within a token budget; `recall` "
            "and the tool schemas give a model its `recall`, `remember` and `identify_user` tools.",
        },
        {
            "name": "Facts",
            "description": "Semantic memory: key/value facts scoped to a session, a person, an "
            "agent or the whole workspace. `remember` confirms an equal value and supersedes a "
            "different one, keeping every version in the history; `lookup` answers the most "
            "specific current value of a key.",
        },
        {
            "name": "Episodic memory",
            "description": "What happened with a person, in their own words: short entries "
            "extracted from conversation turns (with the evidence quoted), searched by meaning and "
            "text together and rendered as the `<memory>` block of the context.",
        },
        {
            "name": "Episodes",
            "description": "Records of agent runs: what triggered them, the input, the actions "
            "taken and how they ended, with a person's rating. Successful episodes are the raw "
            "material procedures are learnt from.",
        },
        {
            "name": "Procedures",
            "description": "Procedural memory: how-tos the agent follows (prompt templates, tool "
            "sequences) with trigger conditions. `match` finds the ones that fire for a goal; "
            "recording each run keeps their success rate, and an edit makes a new version.",
        },
        {
            "name": "Checkpoints & runs",
            "description": "The state of long-running agent loops: LangGraph-compatible checkpoints "
            "with their pending writes, a thread's versioned plan, run snapshots and the iteration "
            "log of each task's attempts, so a run resumes where it stopped.",
        },
        {
            "name": "Long-term store",
            "description": "A namespaced key/value document store for what an agent keeps across "
            "threads outside the memory tiers (LangGraph's BaseStore): put, get, list and search "
            "documents under a namespace path.",
        },
        {
            "name": "Webhooks",
            "description": "Subscriptions that tell your service when memory changes: register an "
            "endpoint and the events it wants; each delivery is signed and retried until it is "
            "acknowledged.",
        },
        {
            "name": "Export & import",
            "description": "A workspace's memory, one agent's or one person's, as JSON lines "
            "(docs/export.md): every tier, optionally with history and vectors. An import into "
            "another workspace remaps ids, reuses rows it already holds, stores all or nothing, and "
            "changes nothing when run twice; `dry_run` reports what it would create.",
        },
        {
            "name": "Provenance",
            "description": "Why the agent believes something: the evidence of an entry, fact, episode "
            "or procedure (source messages, how it was made, confirmations, contradictions, audit), "
            "and purge by source: delete what one thread or message backs.",
        },
        {
            "name": "Retention",
            "description": "How long each tier's rows are kept (by age, or the newest N), per "
            "workspace with per-agent overrides; a preview of the next run, and runs. People under a "
            "legal hold (Identities) are never touched.",
        },
        {
            "name": "Reflection",
            "description": "A periodic pass over one agent's memory: duplicates merged, memories "
            "contradicted by newer ones retired (kept as history, audited with the reason), each "
            "person's compact profile refreshed; runs, their progress and the cached profiles.",
        },
        {
            "name": "Review queue",
            "description": "New memories held by an agent's `review` setting (what extraction "
            "proposes, or every write) and procedures learned from episodes wait here, unseen by "
            "recall, search and context, until approved (optionally edited), rejected with a reason "
            "or merged into a stored twin; one item or a batch.",
        },
    ],
}

# Celery: tasks are thin wrappers over services; limits and retries live here.
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 240)
CELERY_TASK_DEFAULT_RETRY_DELAY = 5
# Every task is idempotent (compare-and-set writes, skips of work already done) unless it
# opts out with acks_late=False and says why (entry_extract_task pays an LLM call). A task
# is acknowledged after it ran, and a task whose pool process died (kill -9, OOM) goes back
# to the queue at once instead of being acknowledged as failed. The price: a task that
# kills its process every time is redelivered every time.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A lost broker connection cancels running tasks: they could not be acknowledged any more
# and come back from the broker anyway (Celery 6's default; silences its warning).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# A worker reserves one message per pool process: prefetched messages of a worker that
# dies wait for the visibility timeout below, and more of them would only wait longer.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The visibility timeout must exceed the longest a worker holds a message: a retry's
# countdown (retry_backoff_max 600 s in the embedding and compaction tasks) plus the hard
# time limit, or a slow task runs twice (transport default: 1 hour). memory_project.broker
# says what both timings do.
CELERY_BROKER_TRANSPORT_OPTIONS = broker_transport_options(
    visibility_timeout=env_int("CELERY_BROKER_VISIBILITY_TIMEOUT", 600 + CELERY_TASK_TIME_LIMIT + 60),
    restore_interval=env_int("CELERY_BROKER_RESTORE_INTERVAL", 30),
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = False
# Beat sends only while it holds a PostgreSQL advisory lock (core/lib/beat.py): a second beat
# started against the same database, by mistake or for failover, stands by instead of
# sending every periodic task twice, and takes over within seconds when the first dies.
CELERY_BEAT_SCHEDULER = "core.lib.beat:LockedPersistentScheduler"
# Three queues, so that a backlog of one kind never delays another: vectors (CPU with the
# local model), LLM calls (wait on a provider), and short maintenance on Celery's default.
# A worker started without -Q consumes all three (serve, compose, the tests); a larger
# deployment runs workers per queue (docs/deploy.md). Routes name tasks as registered:
# the episodic tasks kept their names from before the episodic app existed.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = (Queue("celery"), Queue("embeddings"), Queue("llm"), Queue("webhooks"))
CELERY_TASK_ROUTES = {
    "episodes.tasks.entry_embed_task": {"queue": "embeddings"},
    "episodes.tasks.message_embed_task": {"queue": "embeddings"},
    "episodes.tasks.entries_reembed_task": {"queue": "embeddings"},
    "facts.tasks.fact_embed_task": {"queue": "embeddings"},
    "procedures.tasks.procedure_embed_task": {"queue": "embeddings"},
    "store.tasks.store_item_embed_task": {"queue": "embeddings"},
    "episodes.tasks.episode_embed_task": {"queue": "embeddings"},
    "runtime.tasks.embeddings_sweep_task": {"queue": "embeddings"},
    "portability.tasks.import_embed_task": {"queue": "embeddings"},
    "episodes.tasks.entry_extract_task": {"queue": "llm"},
    # Deliveries wait on subscribers' servers: a slow one never delays maintenance.
    "webhooks.tasks.webhook_deliver_task": {"queue": "webhooks"},
    "threads.tasks.thread_compact_task": {"queue": "llm"},
    "reflection.tasks.reflection_run_task": {"queue": "llm"},
}
# Each app adds its periodic tasks here (name -> schedule entry).
CELERY_BEAT_SCHEDULE = {
    "core-worker-heartbeat": {
        "task": "core.tasks.worker_heartbeat_task",
        "schedule": timedelta(seconds=30),
    },
    # Vectors that a lost or failed task left missing, in every tier (runtime/tasks.py);
    # a run not started within its period is dropped rather than queued behind another.
    "embeddings-sweep": {
        "task": "runtime.tasks.embeddings_sweep_task",
        "schedule": timedelta(minutes=2),
        "options": {"expires": 110},
    },
    "core-api-keys-purge-expired": {
        "task": "core.tasks.api_keys_purge_expired_task",
        "schedule": crontab(minute=17, hour=3),
    },
    # Every tier's retention rules (and the agents' thread `retention_days`), one engine.
    "retention-run-due": {
        "task": "retention.tasks.retention_run_due_task",
        "schedule": crontab(minute=31, hour="*/6"),
    },
    "checkpoints-prune": {
        "task": "checkpoints.tasks.checkpoints_prune_task",
        "schedule": crontab(minute=43),
    },
    # Store items whose TTL ran out (LangGraph's sweep); reads already omit them.
    "store-sweep-expired": {
        "task": "store.tasks.store_items_sweep_expired_task",
        "schedule": timedelta(minutes=5),
        "options": {"expires": 290},
    },
    # Events whose nudge was lost, retries that are due, deliveries whose task was lost.
    "webhooks-sweep": {
        "task": "webhooks.tasks.webhooks_sweep_task",
        "schedule": timedelta(seconds=30),
        "options": {"expires": 25},
    },
    "webhooks-deliveries-purge": {
        "task": "webhooks.tasks.webhook_deliveries_purge_task",
        "schedule": crontab(minute=53, hour=4),
    },
    # The overview's daily aggregates: yesterday's and today's buckets recomputed (activity/).
    "activity-aggregate": {
        "task": "activity.tasks.activity_aggregate_task",
        "schedule": timedelta(minutes=10),
        "options": {"expires": 540},
    },
    # Procedures learned from episodes, for workspaces whose nudge was lost (procedures/tasks.py).
    "procedures-learn-sweep": {
        "task": "procedures.tasks.procedures_learn_sweep_task",
        "schedule": timedelta(minutes=10),
        "options": {"expires": 540},
    },
}
# Import jobs whose worker died (no heartbeat): queued again once, then failed (portability/).
CELERY_BEAT_SCHEDULE["portability-import-jobs-sweep"] = {
    "task": "portability.tasks.import_jobs_sweep_task",
    "schedule": timedelta(minutes=1),
    "options": {"expires": 55},
}
CELERY_BEAT_SCHEDULE["reflection-sweep"] = {
    # Starts due reflection runs, resumes waiting and lost ones, recovers lost fair-queue jobs.
    "task": "reflection.tasks.reflection_sweep_task",
    "schedule": timedelta(minutes=15),
    "options": {"expires": 840},
}
# Webhooks (docs/webhooks.md). Private, loopback and link-local addresses are refused as
# subscriber URLs unless allowed (the server would otherwise probe its own network).
WEBHOOKS_ALLOW_PRIVATE_URLS = env_bool("WEBHOOKS_ALLOW_PRIVATE_URLS", False)
# Provider endpoints (embedding, chat) a workspace admin sets in the Django admin may name a
# private address only when this is on; a superuser may always (a self-hosted model).
PROVIDER_ALLOW_PRIVATE_URLS = env_bool("PROVIDER_ALLOW_PRIVATE_URLS", False)
WEBHOOKS_TIMEOUT_SECONDS = env_float("WEBHOOKS_TIMEOUT_SECONDS", 10.0)
WEBHOOKS_MAX_ATTEMPTS = env_int("WEBHOOKS_MAX_ATTEMPTS", 8)
WEBHOOKS_RETRY_BASE_SECONDS = env_int("WEBHOOKS_RETRY_BASE_SECONDS", 30)
WEBHOOKS_RETRY_MAX_SECONDS = env_int("WEBHOOKS_RETRY_MAX_SECONDS", 3600)
WEBHOOKS_DISABLE_AFTER_FAILURES = env_int("WEBHOOKS_DISABLE_AFTER_FAILURES", 20)
WEBHOOKS_DELIVERY_RETENTION_DAYS = env_int("WEBHOOKS_DELIVERY_RETENTION_DAYS", 30)
WEBHOOKS_ACTIVE_CACHE_SECONDS = env_int("WEBHOOKS_ACTIVE_CACHE_SECONDS", 5)
# /readyz reports unready when the last worker heartbeat is older than this.
WORKER_HEARTBEAT_MAX_AGE_SECONDS = env_int("WORKER_HEARTBEAT_MAX_AGE_SECONDS", 120)

# Provider credentials are encrypted with this key (Fernet, derived with SHA-256).
FIELD_ENCRYPTION_KEY = env_str("FIELD_ENCRYPTION_KEY", SECRET_KEY)

# Memory defaults; each agent's memory_settings override them (core.memory_settings).
MEMORY_DEFAULTS = {
    "recent_messages": env_int("MEMORY_RECENT_MESSAGES", 20),
    "token_limit": env_int("MEMORY_TOKEN_LIMIT", 2000),
    "compaction_threshold": env_float("MEMORY_COMPACTION_THRESHOLD", 0.5),
    "model_context_window": env_int("MEMORY_MODEL_CONTEXT_WINDOW", 128000),
    "semantic_recall": env_bool("MEMORY_SEMANTIC_RECALL", False),
    "semantic_recall_top_k": env_int("MEMORY_SEMANTIC_RECALL_TOP_K", 5),
    "episodic_memory": env_bool("MEMORY_EPISODIC", True),
    "auto_inject": env_bool("MEMORY_AUTO_INJECT", True),
    "auto_inject_top_k": env_int("MEMORY_AUTO_INJECT_TOP_K", 12),
    "dedupe_threshold": env_float("MEMORY_DEDUPE_THRESHOLD", 0.86),
    "retention_days": env_int("MEMORY_RETENTION_DAYS", 0),
}

# Global memory (facts, procedures): see docs/global-memory.md.
# A fact value larger than this (JSON-encoded, bytes) is refused with 400.
FACTS_VALUE_MAX_BYTES = env_int("FACTS_VALUE_MAX_BYTES", 16 * 1024)
# Confidence half-life in days for facts not confirmed since; applied at read time. 0: off.
FACTS_CONFIDENCE_HALF_LIFE_DAYS = env_float("FACTS_CONFIDENCE_HALF_LIFE_DAYS", 0.0)
# recall(query=...) also returns facts and procedures whose vectors are at least this
# cosine-similar to the query (in addition to full-text matches).
RECALL_SEMANTIC_MIN_SIMILARITY = env_float("RECALL_SEMANTIC_MIN_SIMILARITY", 0.45)
# Procedures learned from episodes (docs/global-memory.md): a trigger signature is proposed
# once its closed episodes of the last WINDOW_DAYS hold MIN_SUCCESSES successes at a success
# ratio of at least MIN_SUCCESS_RATIO. A pass reads at most EPISODE_LIMIT episodes, newest
# first (500 episodes: ~50 ms with nothing new, ~130 ms counting all 500 and proposing 4,
# measured at load average 5); the sweep visits SWEEP_WORKSPACES per run.
PROCEDURE_LEARN_MIN_SUCCESSES = env_int("PROCEDURE_LEARN_MIN_SUCCESSES", 3)
PROCEDURE_LEARN_MIN_SUCCESS_RATIO = env_float("PROCEDURE_LEARN_MIN_SUCCESS_RATIO", 0.8)
PROCEDURE_LEARN_WINDOW_DAYS = env_int("PROCEDURE_LEARN_WINDOW_DAYS", 30)
PROCEDURE_LEARN_EPISODE_LIMIT = env_int("PROCEDURE_LEARN_EPISODE_LIMIT", 500)
PROCEDURE_LEARN_SWEEP_WORKSPACES = env_int("PROCEDURE_LEARN_SWEEP_WORKSPACES", 50)

# Conversation memory (threads/, docs/threads.md).
TOKEN_COUNTER = env_str("TOKEN_COUNTER", "core.lib.tokens.BpeTokenCounter")
TOKEN_ENCODING = env_str("TOKEN_ENCODING", "cl100k_base")
THREADS_MAX_CONTENT_CHARS = env_int("THREADS_MAX_CONTENT_CHARS", 200_000)
THREADS_MAX_BATCH = env_int("THREADS_MAX_BATCH", 500)
THREADS_TOOL_RESULT_ARCHIVE_CHARS = env_int("THREADS_TOOL_RESULT_ARCHIVE_CHARS", 8_000)
THREADS_TOOL_RESULT_PREVIEW_CHARS = env_int("THREADS_TOOL_RESULT_PREVIEW_CHARS", 400)
# A message's files (docs/threads.md, "Files"): an image's base64 data, decoded, and a
# document's extracted text; over either the append answers 413.
THREADS_FILE_DATA_MAX_BYTES = env_int("THREADS_FILE_DATA_MAX_BYTES", 3 * 1024 * 1024)
THREADS_FILE_TEXT_MAX_CHARS = env_int("THREADS_FILE_TEXT_MAX_CHARS", 100_000)
THREADS_SUMMARY_MAX_TOKENS = env_int("THREADS_SUMMARY_MAX_TOKENS", 1_000)
THREADS_COMPACTION_MAX_MESSAGES = env_int("THREADS_COMPACTION_MAX_MESSAGES", 400)
# Rows deleted per transaction by the retention engine: 500 messages with their vectors take
# about 0.2 s to delete, short enough not to hold locks an append would wait on.
RETENTION_BATCH = env_int("RETENTION_BATCH", 500)
# Context windows by model name; a thread's `model` picks its row, else the agent's setting.
THREADS_MODEL_CONTEXT_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-3.5-turbo": 16_385,
    "claude-3-5-sonnet": 200_000,
    "claude-sonnet-4": 200_000,
    "llama-3.1-8b-instruct": 128_000,
    "qwen2.5-7b-instruct": 32_768,
}
# Checkpoints: keep the newest N per (thread, namespace) and/or drop those older than N days (0: off).
CHECKPOINTS_KEEP_LAST = env_int("CHECKPOINTS_KEEP_LAST", 100)
CHECKPOINTS_TTL_DAYS = env_int("CHECKPOINTS_TTL_DAYS", 0)
CHECKPOINTS_PRUNE_BATCH = env_int("CHECKPOINTS_PRUNE_BATCH", 5_000)
# /memories checkpoint pages: characters of the decoded state on the detail page, and at most
# this many when "show all" loads the rest (docs/browser.md).
CHECKPOINTS_BROWSER_PREVIEW_CHARS = env_int("CHECKPOINTS_BROWSER_PREVIEW_CHARS", 4_000)
CHECKPOINTS_BROWSER_MAX_CHARS = env_int("CHECKPOINTS_BROWSER_MAX_CHARS", 500_000)

# LangGraph's long-term store (docs/store.md): the largest value (JSON bytes) a put may store,
# the deepest namespace, index paths per put, ops per batch, results per search, and the
# rows the TTL sweep deletes per statement.
STORE_VALUE_MAX_BYTES = env_int("STORE_VALUE_MAX_BYTES", 256 * 1024)
STORE_NAMESPACE_MAX_DEPTH = env_int("STORE_NAMESPACE_MAX_DEPTH", 16)
STORE_INDEX_MAX_PATHS = env_int("STORE_INDEX_MAX_PATHS", 32)
STORE_BATCH_MAX_OPS = env_int("STORE_BATCH_MAX_OPS", 500)
STORE_SEARCH_MAX_LIMIT = env_int("STORE_SEARCH_MAX_LIMIT", 1_000)
STORE_SWEEP_BATCH = env_int("STORE_SWEEP_BATCH", 5_000)

# OpenAI-compatible endpoints used when a workspace has no credentials of its own.
LLM_BASE_URL = env_str("LLM_BASE_URL", "")
LLM_MODEL = env_str("LLM_MODEL", "")
LLM_API_KEY = env_str("LLM_API_KEY", "")
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 30.0)
# Tokens of LLM work per workspace and UTC day (0: no budget); a workspace's LLMBudget row
# overrides it. Past it, `fallback` takes the offline method and `wait` retries the work after
# the day rolls over (core/lib/llm_budget.py, docs/reflection.md).
LLM_DAILY_TOKEN_BUDGET = env_int("LLM_DAILY_TOKEN_BUDGET", 0)
LLM_BUDGET_POLICY = env_str("LLM_BUDGET_POLICY", "fallback")
# LLM-bound jobs of one workspace in the broker at once (core/lib/fair_queue.py): the rest
# wait in core_llmjob and are handed out one workspace at a time, so one tenant's backlog
# never sits in front of another's work. A job sent this long ago and not finished was lost.
LLM_JOBS_PER_WORKSPACE = env_int("LLM_JOBS_PER_WORKSPACE", 1)
LLM_JOB_LOST_SECONDS = env_int("LLM_JOB_LOST_SECONDS", 900)
# Reflection (reflection/, docs/reflection.md): a per-agent pass over its memory every
# REFLECTION_INTERVAL_HOURS, REFLECTION_BATCH people per transaction, each step at most
# REFLECTION_STEP_SECONDS before it yields its workspace's turn.
REFLECTION_INTERVAL_HOURS = env_int("REFLECTION_INTERVAL_HOURS", 24)
REFLECTION_BATCH = env_int("REFLECTION_BATCH", 20)
REFLECTION_STEP_SECONDS = env_float("REFLECTION_STEP_SECONDS", 60.0)
REFLECTION_ENTRIES_PER_PERSON = env_int("REFLECTION_ENTRIES_PER_PERSON", 200)
REFLECTION_SWEEP_AGENTS = env_int("REFLECTION_SWEEP_AGENTS", 100)
# Export and import (docs/export.md). Uploads from /memories wait here for a worker: in a
# deployment of several hosts it must be a volume every web and worker host shares.
PORTABILITY_IMPORT_DIR = Path(env_str("PORTABILITY_IMPORT_DIR", str(VAR_DIR / "imports")))
# A longer line (one record) stops an import instead of filling memory; the largest records
# are checkpoints (base64 state) and messages of THREADS_MAX_CONTENT_CHARS.
PORTABILITY_LINE_MAX_BYTES = env_int("PORTABILITY_LINE_MAX_BYTES", 16 * 1024 * 1024)
# An import job's hard time limit (~1 GB at the rates in docs/export.md, with room).
PORTABILITY_IMPORT_TIME_LIMIT = env_int("PORTABILITY_IMPORT_TIME_LIMIT", 6 * 3600)
# POST /api/v1/import/ streams its body to PORTABILITY_IMPORT_DIR instead of API_MAX_BODY_BYTES;
# a larger body (after gunzip, when sent gzipped) is refused with 413.
PORTABILITY_IMPORT_MAX_BYTES = env_int("PORTABILITY_IMPORT_MAX_BYTES", 2 * 1024**3)
# A running job's worker writes a heartbeat this often; the sweep treats a job without one
# for PORTABILITY_IMPORT_STALE_SECONDS as lost: queued again while its runs are below
# PORTABILITY_IMPORT_MAX_ATTEMPTS, failed after. Upload files no job names are removed after
# PORTABILITY_IMPORT_ORPHAN_SECONDS.
PORTABILITY_IMPORT_HEARTBEAT_SECONDS = env_float("PORTABILITY_IMPORT_HEARTBEAT_SECONDS", 30.0)
PORTABILITY_IMPORT_STALE_SECONDS = env_int("PORTABILITY_IMPORT_STALE_SECONDS", 300)
PORTABILITY_IMPORT_MAX_ATTEMPTS = env_int("PORTABILITY_IMPORT_MAX_ATTEMPTS", 2)
PORTABILITY_IMPORT_ORPHAN_SECONDS = env_int("PORTABILITY_IMPORT_ORPHAN_SECONDS", 24 * 3600)
EMBEDDING_BASE_URL = env_str("EMBEDDING_BASE_URL", "")
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", "")
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", "")
# A search's query vector from an endpoint is waited for at most this long (stored texts wait
# LLM_TIMEOUT_SECONDS, in tasks); after an endpoint fails a query, a process's queries skip it
# for EMBEDDING_QUERY_RETRY_SECONDS and rank without a vector (core.embeddings).
EMBEDDING_QUERY_TIMEOUT_SECONDS = env_float("EMBEDDING_QUERY_TIMEOUT_SECONDS", 5.0)
EMBEDDING_QUERY_RETRY_SECONDS = env_float("EMBEDDING_QUERY_RETRY_SECONDS", 30.0)

# Reads beside the request (core/lib/side_reads.py): threads per process, each with its own
# database connection, that read the context's episodic search and history window while the
# request thread builds the other blocks (docs/runtime.md), and a large scope's BM25 while the
# search finds its vector candidates (docs/speed.md); 0 reads everything in the request
# thread. CONTEXT_PARALLEL_WORKERS is the variable's name before searches used the threads.
SIDE_READ_THREADS = env_int("SIDE_READ_THREADS", env_int("CONTEXT_PARALLEL_WORKERS", 2))

# Episodic memory and semantic recall (docs/episodic.md, "Vector plan routing").
# Scopes up to this many vectors are always searched with an exact sort; a larger one takes
# HNSW (iterative scan) only once its walk costs less than the exact sort: a fixed part plus
# a part per unit of table / scope (the walk visits about pool x table / scope rows), both
# counted in rows of exact sort (measured on 120,000 MiniLM vectors: exact 1.3 us a row,
# HNSW about 9 ms + 1.8 ms per unit of table / scope).
EPISODIC_EXACT_SCOPE_MAX = env_int("EPISODIC_EXACT_SCOPE_MAX", 5000)
EPISODIC_HNSW_FIXED_COST_ROWS = env_int("EPISODIC_HNSW_FIXED_COST_ROWS", 7000)
EPISODIC_HNSW_RATIO_COST_ROWS = env_int("EPISODIC_HNSW_RATIO_COST_ROWS", 1400)
EPISODIC_HNSW_EF_SEARCH = env_int("EPISODIC_HNSW_EF_SEARCH", 200)
SEARCH_SCOPE_SIZE_CACHE_SECONDS = env_float("SEARCH_SCOPE_SIZE_CACHE_SECONDS", 30.0)
# A search of a scope last counted at this many vectors or more sends its BM25 on a side
# connection (SIDE_READ_THREADS) while its own finds the vector candidates (docs/speed.md).
SEARCH_BM25_BESIDE_MIN_ROWS = env_int("SEARCH_BM25_BESIDE_MIN_ROWS", 1000)
# A search on the HNSW plan asks for its scope's new vectors to join the graph at most this
# often per scope and process (core.ranking._graph_request, core.lib.vectors).
VECTOR_GRAPH_REQUEST_SECONDS = env_float("VECTOR_GRAPH_REQUEST_SECONDS", 300.0)
EPISODIC_MAX_ENTRY_LENGTH = env_int("EPISODIC_MAX_ENTRY_LENGTH", 500)
EPISODIC_MAX_ENTRIES_PER_TURN = env_int("EPISODIC_MAX_ENTRIES_PER_TURN", 5)
# Entries per POST /api/v1/episodic-entries/batch/: all are embedded in one call and
# stored in one transaction. 500: a bulk load of 100,000 took 519 a second in calls of 500
# against 451 in calls of 100, on 2 cores without AMX (docs/speed.md, run Z), a call ~1 s.
EPISODIC_CREATE_BATCH_MAX = env_int("EPISODIC_CREATE_BATCH_MAX", 500)
EPISODIC_QUERY_MAX_LENGTH = env_int("EPISODIC_QUERY_MAX_LENGTH", 2000)
EPISODIC_TRANSCRIPT_MAX_MESSAGES = env_int("EPISODIC_TRANSCRIPT_MAX_MESSAGES", 200)
EPISODIC_EXTRACTION_FACT_CONFIDENCE = env_float("EPISODIC_EXTRACTION_FACT_CONFIDENCE", 0.6)
# A new entry at least this similar to a stored one of the same person and agent (and below
# the duplicate threshold) is reconciled with it: add, update, supersede or no-op (docs/episodic.md).
EPISODIC_CONFLICT_FLOOR = env_float("EPISODIC_CONFLICT_FLOOR", 0.6)
# Intra-op threads of the local embedding model per process, torch, ONNX Runtime or OpenVINO
# (see core/embeddings.py).
EMBEDDING_TORCH_THREADS = env_int("EMBEDDING_TORCH_THREADS", 1)
# Cores a batch of texts (the batch endpoint, extraction, re-embedding) is encoded on with
# ONNX Runtime or OpenVINO: its chunks run side by side, EMBEDDING_TORCH_THREADS each; a single query
# never is split (docs/speed.md "Batches on two threads").
EMBEDDING_BATCH_THREADS = env_int("EMBEDDING_BATCH_THREADS", 2)
# auto, onnx, openvino, onnx-int8 or torch (docs/speed.md "Embedding runtime": ONNX Runtime
# measured faster than torch per query and per batch, and a process that uses it never imports
# torch; "OpenVINO in bf16": the same graph 3x faster a batch where the CPU computes bf16
# natively). auto is openvino for a model measured in bf16 on such a CPU, else onnx.
EMBEDDING_RUNTIME = env_str("EMBEDDING_RUNTIME", "auto")
# The runtime of search queries' vectors; "" lets core.embeddings.query_runtime_for choose
# (the int8 graph for all-MiniLM-L6-v2 under EMBEDDING_RUNTIME=onnx or openvino: docs/speed.md
# "int8 queries against fp32 vectors"). onnx, openvino, onnx-int8 or torch.
EMBEDDING_QUERY_RUNTIME = env_str("EMBEDDING_QUERY_RUNTIME", "")
# The local model: all-MiniLM-L6-v2 (384-d, the default) or all-mpnet-base-v2 (768-d, about 5x
# the compute per text, better recall; its weights come from requirements-mpnet.txt). A change
# is a model change: `manage.py episodic_reembed` re-embeds what was stored (docs/episodic.md).
EMBEDDING_LOCAL_MODEL = env_str("EMBEDDING_LOCAL_MODEL", "all-MiniLM-L6-v2")
# Where the ONNX graphs exported from the packaged weights live (scripts/bootstrap writes them).
EMBEDDING_ONNX_DIR = Path(env_str("EMBEDDING_ONNX_DIR", str(VAR_DIR / "models")))
# Recent query vectors kept per process (~1.6 KB each); 0 turns the cache off.
EMBEDDING_QUERY_CACHE_SIZE = env_int("EMBEDDING_QUERY_CACHE_SIZE", 1024)
# Seconds a request or task waits for the local model's vectors computed on a background
# thread (core.embeddings.embedding_awaited); past it, a search ranks lexically and an add
# stores its entries without vectors (the embedding task adds them), and an error is logged.
EMBEDDING_LOCAL_WAIT_SECONDS = env_float("EMBEDDING_LOCAL_WAIT_SECONDS", 30.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.middleware.RequestIdLogFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["request_id"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}
