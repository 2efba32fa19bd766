"""Which views opt in to replica reads, and how a caller is named in the pin (issue 12)."""

import hashlib

from django.contrib.auth.decorators import login_required
from django.test import RequestFactory
from django.views import View
from rest_framework.views import APIView

from core.lib.replica import PIN_CACHE_PREFIX, principal_pin_key, read_replica, view_reads_replica


class _OptedInApi(APIView):
    read_replica = True


class _PlainApi(APIView):
    pass


class _OptedInSearchApi(APIView):
    read_replica = True
    read_only_safe = True


class _OptedInView(View):
    read_replica = True


def test_drf_class_attribute_opts_in():
    assert view_reads_replica(_OptedInApi.as_view())
    assert not view_reads_replica(_PlainApi.as_view())


def test_post_opts_in_only_where_the_view_declares_it_read_only():
    assert view_reads_replica(_OptedInSearchApi.as_view(), "POST")
    assert not view_reads_replica(_OptedInApi.as_view(), "POST")
    assert not view_reads_replica(_OptedInSearchApi.as_view(), "DELETE")
    assert view_reads_replica(_OptedInApi.as_view(), "HEAD")


def test_django_class_based_view_attribute_opts_in():
    assert view_reads_replica(_OptedInView.as_view())


def test_decorator_opts_in_under_and_over_other_decorators():
    @login_required
    @read_replica
    def inner(request):
        return None

    @read_replica
    @login_required
    def outer(request):
        return None

    def plain(request):
        return None

    assert view_reads_replica(inner)
    assert view_reads_replica(outer)
    assert not view_reads_replica(plain)


def test_api_key_pin_names_the_key_by_hash_only():
    """The cache never holds the secret, and the scheme's spelling does not matter."""
    request = RequestFactory().get("/", HTTP_AUTHORIZATION="Bearer mk_secret123")
    other_spelling = RequestFactory().get("/", HTTP_AUTHORIZATION="bearer  mk_secret123")

    key = principal_pin_key(request)

    assert key == f"{PIN_CACHE_PREFIX}key:{hashlib.sha256(b'mk_secret123').hexdigest()}"
    assert "mk_secret123" not in key
    assert principal_pin_key(other_spelling) == key


def test_anonymous_caller_has_no_pin():
    request = RequestFactory().get("/")
    request.session = {}

    assert principal_pin_key(request) is None
