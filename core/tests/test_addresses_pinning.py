"""Addresses judged private although this Python's `is_global` calls them global, and the
form of a pinned name that TLS checks."""

import ipaddress

import pytest

from core.lib.addresses import address_public, url_pinned


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::a00:1",  # local-use NAT64 (RFC 8215): a site's own gateway to its IPv4 network
        "64:ff9b:1:ffff::7f00:1",
        "fec0::1",  # site-local (RFC 3879): still routed inside some networks
        "feff:ffff::1",
    ],
)
def test_local_ipv6_ranges_are_not_public(address):
    assert not address_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["2606:4700::1111", "64:ff9b::808:808", "8.8.8.8"])
def test_public_addresses_stay_public(address):
    assert address_public(ipaddress.ip_address(address))


def test_a_trailing_dot_is_kept_in_host_but_not_in_the_name_tls_checks():
    url, headers, extensions = url_pinned("https://Api.Example.com.:8443/v1", "93.184.216.34")
    assert str(url) == "https://93.184.216.34:8443/v1"
    assert headers == {"Host": "api.example.com.:8443"}
    assert extensions == {"sni_hostname": "api.example.com"}


def test_pinned_clients_ignore_proxies_from_the_environment(monkeypatch):
    """A pinned request connects to the address just checked: through a CONNECT proxy its TLS
    would name the address, and every certificate would fail."""
    import httpx

    from core.lib import addresses

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setattr(addresses, "_pinned_clients", addresses.OrderedDict())
    client = addresses.pinned_client(httpx.URL("https://api.example.com/v1"))
    try:
        assert client._transport_for_url(httpx.URL("https://93.184.216.34/v1")) is client._transport
    finally:
        client.close()
