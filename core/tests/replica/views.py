"""Test-only views that report which server answered their reads (pg_is_in_recovery())."""

from concurrent.futures import ThreadPoolExecutor

from django.contrib.auth.decorators import login_required
from django.db import connections, transaction
from django.db.models.expressions import RawSQL
from django.http import JsonResponse
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.lib.replica import read_replica
from core.models import Workspace
from core.services import workspace_create


def workspace_names() -> dict:
    """Every workspace name, and whether the server that listed them is a standby."""
    rows = list(
        Workspace.objects.annotate(standby=RawSQL("pg_is_in_recovery()", ()))
        .order_by("name")
        .values_list("name", "standby")
    )
    servers = {"standby" if standby else "primary" for _, standby in rows}
    return {"names": [name for name, _ in rows], "server": servers.pop() if len(servers) == 1 else None}


def _in_pool_thread():
    try:
        return workspace_names()
    finally:
        # The pool thread's own connections; a leftover one would block dropping the test database.
        connections.close_all()


class WorkspaceNamesApi(APIView):
    read_replica = True

    def get(self, request):
        return Response(workspace_names())

    def post(self, request):
        workspace_create(name=request.data["name"])
        return Response(workspace_names(), status=status.HTTP_201_CREATED)


class WorkspaceSearchApi(APIView):
    """A search whose POST only reads, as recall and entry search declare."""

    read_replica = True
    read_only_safe = True

    def post(self, request):
        return Response(workspace_names())


class PrimaryWorkspaceNamesApi(APIView):
    def get(self, request):
        return Response(workspace_names())


class AtomicWorkspaceNamesApi(APIView):
    read_replica = True

    def get(self, request):
        with transaction.atomic():
            return Response(workspace_names())


class PoolWorkspaceNamesApi(APIView):
    read_replica = True

    def get(self, request):
        with ThreadPoolExecutor(max_workers=1) as pool:
            in_pool = pool.submit(_in_pool_thread).result()
        return Response({"request_thread": workspace_names(), "pool_thread": in_pool})


@login_required
@read_replica
def workspace_names_page(request):
    if request.method == "POST":
        workspace_create(name=request.POST["name"])
    return JsonResponse(workspace_names())
