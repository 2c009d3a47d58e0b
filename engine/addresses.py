"""Addresses in one place: the one spelling each is stored and compared in, which are public,
and which network each counts for. Every part of the service that judges an address (the
firewall's and the fleet's rails, flood limits, the console's listener, the public-address
checks, who may scrape metrics) asks this module, never the running Python's `is_global`,
whose idea of "global" changes between versions and lets local-use NAT64, 3fff::/20,
5f00::/16 and site-local fec0::/10 through.

- `canonical`: IPv4 addresses written as IPv6 (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
  `::a.b.c.d`, well-known NAT64 `64:ff9b::a.b.c.d`) are the IPv4 address they carry; an IPv6
  address with a zone (`fe80::1%eth0`) is not an address a packet from the internet can
  carry and is refused. Ingestion stores this form, so SQL compares like with like.
- `is_public`: not in `NOT_PUBLIC`, the explicit table below. 6to4 (`2002::/16`) is judged by
  the IPv4 address it carries (the table holds the 6to4 form of every IPv4 range); Teredo
  (`2001::/32`) and local-use NAT64 (`64:ff9b:1::/48`, whose embedding only its network's
  operator knows) are never public; IPv6 outside global unicast (`2000::/3`) never is.
- `network_of`: what one reporter network is: the /24 of the IPv4 address an address
  carries (6to4 and Teredo included), else the IPv6 /48. The fleet counts at most
  `PER_ALLOCATION` /48s of one IPv6 /32 (server/fleet/sql.py), so free tunnel-broker /48s do
  not multiply networks while an ISP's customers are not merged into one.
"""

from __future__ import annotations

import functools
import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IANA IPv4 Special-Purpose Address Registry (every entry, whatever its "globally
# reachable" column: anycast infrastructure such as AS112 is never an attacker to block),
# plus multicast and the limited broadcast address.
IPV4_NOT_PUBLIC = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
    "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "255.255.255.255/32")

# IANA IPv6 Special-Purpose Address Registry inside global unicast (2000::/3), and the rest
# of the address space outside it (loopback, unspecified, ::ffff:0:0/96, 64:ff9b::/96,
# 64:ff9b:1::/48, 100::/64 and 100:0:0:1::/64 lie in ::/3; 5f00::/16 in 4000::/2; fc00::/7,
# fe80::/10, fec0::/10 and ff00::/8 in 8000::/1).
IPV6_NOT_PUBLIC = (
    "::/3", "4000::/2", "8000::/1",
    "2001::/23",          # IETF protocol assignments: Teredo, benchmarking, ORCHID, AMT, DET
    "2001:db8::/32",      # documentation
    "2620:4f:8000::/48",  # AS112-v6
    "3fff::/20")          # documentation (RFC 9637)

SIXTOFOUR = ipaddress.ip_network("2002::/16")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _sixtofour_of(network: str) -> str:
    """The 6to4 form of an IPv4 range: 2002:AABB:CCDD::/(16 + prefix)."""
    v4 = ipaddress.ip_network(network)
    prefix = int(SIXTOFOUR.network_address) | (int(v4.network_address) << 80)
    return str(ipaddress.IPv6Network((prefix, 16 + v4.prefixlen)))


# The table, as SQL takes it too (server/fleet/sql.py): `x <<= ANY(NOT_PUBLIC)` on a
# canonical address says exactly what is_public says.
NOT_PUBLIC = (IPV4_NOT_PUBLIC + IPV6_NOT_PUBLIC
              + tuple(_sixtofour_of(network) for network in IPV4_NOT_PUBLIC))
_NOT_PUBLIC = {4: tuple(ipaddress.ip_network(n) for n in NOT_PUBLIC if ":" not in n),
               6: tuple(ipaddress.ip_network(n) for n in NOT_PUBLIC if ":" in n)}

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
# Reachable only from inside a site: what a listener meant for a private network may use.
PRIVATE = LOOPBACK + tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "fc00::/7",
    "fe80::/10"))

IPV4_PREFIX = 24
IPV6_PREFIX = 48
ALLOCATION_PREFIX = 32   # an IPv6 /32: one ISP's or tunnel broker's allocation
PER_ALLOCATION = 3       # of its /48s that count as networks of their own


def canonical(address: str | IPAddress) -> IPAddress:
    """The address as stored and compared; ValueError when `address` is not one."""
    ip = address if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)) \
        else ipaddress.ip_address(address)
    if ip.version == 4:
        return ip
    if ip.scope_id is not None:
        raise ValueError(f"{address!r}: an address with a zone")
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):  # not :: nor ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def canonical_text(address: str) -> str:
    return str(canonical(address))


def carried(address: str | IPAddress) -> IPAddress:
    """The IPv4 address an address carries (6to4's, a Teredo client's, and canonical's), or
    the address itself: what a network is counted by."""
    ip = canonical(address)
    if ip.version == 6:
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


@functools.lru_cache(maxsize=65536)
def is_public(address: str | IPAddress) -> bool:
    """A globally routable unicast address (False for anything that is not an address)."""
    try:
        ip = canonical(address)
    except ValueError:
        return False
    return not any(ip in network for network in _NOT_PUBLIC[ip.version])


def is_public_network(network: str) -> bool:
    """A network of public addresses only (False when it overlaps any range that is not, or
    is not a network)."""
    try:
        wanted = canonical_network(network)
    except ValueError:
        return False
    return is_public(wanted.network_address) and not any(
        wanted.overlaps(other) for other in _NOT_PUBLIC[wanted.version])


def _within(address: str, networks: tuple) -> bool:
    """Judged as written (an IPv4-mapped address is its IPv4 one: a dual-stack socket's
    spelling): 64:ff9b::7f00:1 is a NAT64 address, not this host's loopback."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks if network.version == ip.version)


def is_loopback(address: str) -> bool:
    """False for a host name: whatever it resolves to may be public."""
    return address == "localhost" or _within(address, LOOPBACK)


def is_private(address: str) -> bool:
    """Loopback, RFC 1918, link-local or unique-local: never reached from the internet."""
    return address == "localhost" or _within(address, PRIVATE)


def network_of(address: str | IPAddress) -> str:
    """The reporter network an address counts for: an IPv4 /24 (by the IPv4 address it
    carries), else an IPv6 /48."""
    ip = carried(address)
    prefix = IPV4_PREFIX if ip.version == 4 else IPV6_PREFIX
    return str(ipaddress.ip_network((ip, prefix), strict=False))


def canonical_network(network: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A network as stored and compared: an IPv4 range written in an IPv6 form that carries
    IPv4 (`::ffff:8.8.0.0/112`) is that IPv4 range; ValueError when it is not a network."""
    net = ipaddress.ip_network(network, strict=False)
    if net.version == 6 and net.network_address.scope_id is not None:
        raise ValueError(f"{network!r}: a network with a zone")
    if net.version == 6 and net.prefixlen >= 96:
        first = canonical(net.network_address)
        if first.version == 4:
            return ipaddress.IPv4Network((first, net.prefixlen - 96))
    return net
