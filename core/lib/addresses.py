"""Which hosts the server may send requests to on a tenant's word: public addresses only.

A webhook URL or a provider endpoint is typed by a workspace's admin, and the server then
sends requests there from inside its own network: a private, loopback or link-local address
(the cloud's metadata service at 169.254.169.254) would let whoever can type one probe it.
IPv6 forms that carry an IPv4 address (IPv4-mapped, 6to4, NAT64, IPv4-compatible) are judged
by that address too: `is_global` judges only the IPv6 prefix.
"""

import ipaddress
import socket

# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards to (NAT64, RFC
# 6052; IPv4-compatible, RFC 4291).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))


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
    embedded = _embedded_ipv4(address)
    return address.is_global and (embedded is None or embedded.is_global)
