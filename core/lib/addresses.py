"""Which hosts the server may send requests to on a tenant's word: public addresses only.

A webhook URL or a provider endpoint is typed by a workspace's admin, and the server then
sends requests there from inside its own network: a private, loopback or link-local address
(the cloud's metadata service at 169.254.169.254) would let whoever can type one probe it.
IPv6 forms that carry an IPv4 address (IPv4-mapped, 6to4, NAT64, IPv4-compatible) are judged
by that address too: `is_global` judges only the IPv6 prefix.

A check when the URL is saved is not enough: the name may answer another address later (DNS
rebinding). A request is sent to the address just checked (`url_checked_pinned`), its name kept
for Host and TLS; provider endpoints go through `provider_target` at each request.
"""

import ipaddress
import os
import socket
import threading
from collections import OrderedDict
from typing import NamedTuple

import httpx
from django.conf import settings

from core.lib.http import http_client

# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards to (NAT64, RFC
# 6052; IPv4-compatible, RFC 4291).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))
# Ranges a site routes to its own network that `is_global` of Python before 3.12.4 calls
# global: local-use NAT64 (RFC 8215), whose gateway reaches the site's private IPv4 addresses,
# and site-local (RFC 3879, deprecated, still routed inside some networks).
_LOCAL_IPV6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("fec0::/10"))


def host_addresses(host: str) -> list:
    """The addresses `host` names: itself when it is one, else what DNS answers (OSError,
    UnicodeError or ValueError when it cannot be looked up)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


def _embedded_ipv4(address) -> ipaddress.IPv4Address | None:
    if address.version != 6:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_public(address) -> bool:
    """Whether `address` (and the IPv4 address an IPv6 form carries) is globally routable."""
    if address.version == 6 and any(address in network for network in _LOCAL_IPV6):
        return False
    embedded = _embedded_ipv4(address)
    return address.is_global and (embedded is None or embedded.is_global)


class AddressRefused(Exception):
    """A host names an address that is not public, and requests are not sent there."""


ADDRESS_REFUSED = (
    "The host {host} names a private, loopback or link-local address ({address}); nothing is sent there."
)


def host_address_checked(host: str) -> str:
    """One address of `host` to connect to, every address it names checked first.

    AddressRefused when any of them is not public (`address_public`): a name that answers a
    public and a private address is refused, since a second lookup could pick either. OSError,
    UnicodeError or ValueError when the name cannot be looked up.
    """
    addresses = host_addresses(host)
    if not addresses:
        raise OSError(f"The host {host} has no address.")
    for address in addresses:
        if not address_public(address):
            raise AddressRefused(ADDRESS_REFUSED.format(host=host, address=address))
    return str(addresses[0])


def url_pinned(url: str | httpx.URL, address: str) -> tuple[httpx.URL, dict, dict]:
    """`url` aimed at `address`, with the headers and request extensions that keep its name.

    Answers (URL, headers, extensions) for `httpx.Client.send` or `.post`: the connection goes
    to the address already checked, not to what a second lookup answers (DNS rebinding); the
    name still goes in Host and, for https, in SNI and the certificate check, without the
    trailing dot a fully qualified name may carry (no certificate names "example.com.").
    """
    url = httpx.URL(url)
    headers = {"Host": url.netloc.decode("ascii")}
    sni_hostname = url.raw_host.decode("ascii").rstrip(".")
    extensions = {"sni_hostname": sni_hostname} if url.scheme == "https" else {}
    return url.copy_with(host=address), headers, extensions


def url_checked_pinned(url: str | httpx.URL) -> tuple[httpx.URL, dict, dict]:
    """`url_pinned` to the address `host_address_checked` answers for `url`'s host (which
    raises what that raises; httpx.InvalidURL for a URL without a host)."""
    url = httpx.URL(url)
    host = url.raw_host.decode("ascii")  # IDNA-encoded: what the resolver is asked.
    if not host:
        raise httpx.InvalidURL(f"No host in {url}.")
    return url_pinned(url, host_address_checked(host))


# Clients of pinned requests, one per name (`pinned_client`). A process sends to a handful of
# endpoints; the bound keeps many workspaces' names from holding idle connections open.
PINNED_CLIENTS_MAX = 64
_pinned_clients: OrderedDict = OrderedDict()
_pinned_pid: int | None = None
_pinned_ssl_context = None
_pinned_lock = threading.Lock()


def pinned_client(url: httpx.URL) -> httpx.Client:
    """The client for requests `url_pinned` aimed at an address, one per name (scheme, host,
    port) in this process.

    A pinned URL names the address, and a connection pool keys connections by it: a shared
    pool would hand a connection opened and verified for one name to a request for another
    name at the same address (a CDN's), TLS then ending at the first name's site. The clients
    share one SSL context, built once (its cost: core.lib.http); a forked child makes its own.
    They take no proxy from the environment (HTTPS_PROXY): the request goes to the address
    checked, and through a CONNECT proxy httpx would name that address, not the host, in TLS.
    """
    global _pinned_pid, _pinned_ssl_context
    key = (url.scheme, url.raw_host, url.port)
    with _pinned_lock:
        if _pinned_pid != os.getpid():
            _pinned_clients.clear()
            _pinned_pid, _pinned_ssl_context = os.getpid(), None
        client = _pinned_clients.get(key)
        if client is None:
            if _pinned_ssl_context is None:
                _pinned_ssl_context = httpx.create_ssl_context()
            client = _pinned_clients[key] = httpx.Client(
                verify=_pinned_ssl_context, follow_redirects=False, trust_env=False
            )
            # An evicted client is not closed: another thread may be sending with it; its idle
            # connections close when it is collected.
            while len(_pinned_clients) > PINNED_CLIENTS_MAX:
                _pinned_clients.popitem(last=False)
        else:
            _pinned_clients.move_to_end(key)
        return client


class Target(NamedTuple):
    """Where a request goes: `client.post(url, headers={**own, **headers}, extensions=...)`."""

    url: httpx.URL | str
    headers: dict
    extensions: dict
    client: httpx.Client


def provider_target(base_url: str, path: str, *, private_allowed: bool = False) -> Target:
    """Where a request to the provider endpoint `base_url` + `path` goes.

    A workspace's endpoint is looked up and checked at each request (`url_checked_pinned`),
    not only when it was saved: a name that answered a public address then may answer
    169.254.169.254 now. Not checked under PROVIDER_ALLOW_PRIVATE_URLS, nor when
    `private_allowed`: the endpoints the operator set in the settings (LLM_BASE_URL,
    EMBEDDING_BASE_URL) and those a superuser saved (ProviderCredential.private_allowed), which
    may be a model on the server's own network. Raises what `url_checked_pinned` raises.
    """
    url = base_url.rstrip("/") + path
    if settings.PROVIDER_ALLOW_PRIVATE_URLS or private_allowed:
        return Target(url, {}, {}, http_client())
    pinned_url, headers, extensions = url_checked_pinned(url)
    return Target(pinned_url, headers, extensions, pinned_client(httpx.URL(url)))
