"""Work queued for after the response (core.lib.after_response, AfterResponseMiddleware)."""

import logging

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from core.lib.after_response import after_response
from core.middleware import AfterResponseMiddleware, current_request_id


def test_outside_a_request_the_work_runs_at_once():
    ran = []
    after_response(lambda: ran.append(1))
    assert ran == [1]


def _serve(view):
    request = RequestFactory().post("/api/v1/anything/")
    request.id = "req-42"
    return AfterResponseMiddleware(view)(request)


def test_queued_work_runs_when_the_response_is_closed_in_order():
    ran = []

    def view(request):
        after_response(lambda: ran.append("first"))
        after_response(lambda: ran.append("second"))
        assert ran == []
        return HttpResponse("answer")

    response = _serve(view)
    assert ran == [] and response.content == b"answer"
    response.close()
    assert ran == ["first", "second"]
    assert response.closed


def test_a_failing_function_is_logged_and_the_others_still_run(caplog):
    ran = []

    def fail():
        raise RuntimeError("sink down")

    def view(request):
        after_response(fail)
        after_response(lambda: ran.append(current_request_id()))
        return HttpResponse("answer")

    response = _serve(view)
    with caplog.at_level(logging.ERROR, logger="core.lib.after_response"):
        response.close()
    # The later function ran, with the request's id for its log lines.
    assert ran == ["req-42"]
    assert "sink down" in caplog.text
    assert response.closed
    assert current_request_id() == "-"


def test_work_queued_before_an_unhandled_exception_still_runs():
    ran = []

    def view(request):
        after_response(lambda: ran.append(1))
        raise ValueError("view failed")

    with pytest.raises(ValueError):
        _serve(view)
    assert ran == [1]
    # And the queue is gone: later work outside a request runs at once.
    after_response(lambda: ran.append(2))
    assert ran == [1, 2]


def test_a_response_with_nothing_queued_is_left_as_it_is():
    response = _serve(lambda request: HttpResponse("answer"))
    assert "close" not in vars(response)
