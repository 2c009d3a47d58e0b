"""ops/deploy/connlimit.nft: the shipped bound on connections per client address, loaded in a
network namespace the test makes itself (user and network namespaces: no change to the
host's firewall)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parent.parent / "ops" / "deploy" / "connlimit.nft"

# Inside the namespace: the rules loaded, a listener on 443 accepting everything, then 300
# connections from 127.0.0.1 and 10 from 127.0.0.2; prints how many of each were held.
CLIENTS = r"""
import socket, subprocess, sys, threading
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["nft", "-f", sys.argv[1]], check=True)
listener = socket.create_server(("0.0.0.0", 443), backlog=1024)
accepted = []
def accept():
    while True:
        accepted.append(listener.accept()[0])
threading.Thread(target=accept, daemon=True).start()
def held(source, count):
    kept = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", 443))
            kept.append(sock)
        except OSError:
            sock.close()
    return kept
one, other = held("127.0.0.1", 300), held("127.0.0.2", 10)
print(len(one), len(other))
"""


def _namespaces_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("nft") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _namespaces_available(),
                    reason="needs nft and unprivileged user and network namespaces")
def test_one_address_holds_at_most_256_connections_and_another_is_served():
    answer = subprocess.run(["unshare", "-rn", sys.executable, "-c", CLIENTS, str(RULES)],
                            capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.split() == ["256", "10"]
