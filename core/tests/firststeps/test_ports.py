"""serve's choice of ports: a taken web port fails clearly, the MCP port follows the web port (issue 18)."""

import socket

import pytest
from django.core.management.base import CommandError

from core.management.commands.serve import MCP_PORT_OFFSET, ports_choose

HOST = "127.0.0.1"


@pytest.fixture
def listening():
    """A port some other program listens on."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free_port_with_free_successor() -> int:
    """A free port whose MCP_PORT_OFFSET successor is free too."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port + MCP_PORT_OFFSET > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port + MCP_PORT_OFFSET))
            except OSError:
                continue
        return port
    raise AssertionError("no pair of free ports found")


def test_a_taken_web_port_fails_and_says_what_to_do(listening):
    with pytest.raises(CommandError) as raised:
        ports_choose(HOST, web=listening, mcp=None)
    assert f"Port {listening} on {HOST} is in use" in str(raised.value)
    assert "--port 0" in str(raised.value)


def test_port_zero_picks_a_free_port():
    web, mcp = ports_choose(HOST, web=0, mcp=None)
    assert web and mcp and web != mcp
    with socket.socket() as sock:
        sock.bind((HOST, web))


def test_the_mcp_port_follows_the_web_port():
    web = _free_port_with_free_successor()
    assert ports_choose(HOST, web=web, mcp=None) == (web, web + MCP_PORT_OFFSET)


def test_a_taken_derived_mcp_port_becomes_a_free_one(listening):
    web = listening - MCP_PORT_OFFSET
    if web < 1024:
        pytest.skip("the listening port has no unprivileged web port below it")
    with socket.socket() as probe:
        try:
            probe.bind((HOST, web))
        except OSError:
            pytest.skip("the web port below is taken too")
    chosen_web, mcp = ports_choose(HOST, web=web, mcp=None)
    assert chosen_web == web
    assert mcp not in (listening, web, 0)


def test_a_taken_explicit_mcp_port_fails(listening):
    with pytest.raises(CommandError, match=f"MCP port {listening} on {HOST} is in use"):
        ports_choose(HOST, web=0, mcp=listening)


def test_mcp_port_zero_turns_it_off():
    assert ports_choose(HOST, web=0, mcp=0)[1] == 0
