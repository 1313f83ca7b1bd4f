"""A real Redis Cluster of three masters on free loopback ports, started as child processes.

Each master is an EmbeddedServer (the same binary lookup: `redis-server` on PATH, else the
bundled Valkey) with `--cluster-enabled yes` and its own data folder (its nodes.conf
there, so a master restarted on its port rejoins as itself). The masters are joined with
`redis-cli --cluster create` when a cli is at hand, else by CLUSTER ADDSLOTSRANGE and
CLUSTER MEET sent by hand; either way the cluster is handed out once every master says
`cluster_state:ok`. Used by the test suite (and the benchmarks); it touches only the
servers it started.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from callboard.embedded import EmbeddedServer, free_port, server_binary

SLOTS = 16384
CLUSTER_SCHEME = "redis+cluster"


def cli_binary(server: str) -> str | None:
    """A redis-cli (or valkey-cli) beside `server` or on PATH; None when there is none."""
    for name in ("redis-cli", "valkey-cli"):
        beside = Path(server).with_name(name)
        if beside.is_file():
            return str(beside)
        found = shutil.which(name)
        if found:
            return found
    return None


def command(port: int, *words: str, timeout_s: float = 2.0) -> str:
    """One command to 127.0.0.1:`port` in RESP, its reply as text (enough for CLUSTER
    INFO / MEET / ADDSLOTSRANGE, whose replies are a status or one bulk string)."""
    request = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request.encode())
        head = _line(sock)
        if head.startswith("$"):
            size = int(head[1:])
            body = b""
            while len(body) < size + 2:
                chunk = sock.recv(size + 2 - len(body))
                if not chunk:
                    break
                body += chunk
            return body[:size].decode()
        return head


def _line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode().rstrip("\r\n")


def _cluster_args(bus_port: int) -> list[str]:
    # The bus port is named: the default (port + 10000) may be taken, or past 65535 for a
    # free port from the ephemeral range.
    return [
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-port", str(bus_port), "--cluster-node-timeout", "2000",
    ]  # fmt: skip


class EmbeddedCluster:
    """Three (or `masters`) cluster-enabled servers joined into one cluster, no replicas."""

    def __init__(
        self, *, masters: int = 3, binary: str | None = None, appendonly: bool = False
    ) -> None:
        self.binary = binary or server_binary()
        self.bus_ports = [free_port() for _ in range(masters)]
        self.nodes = [
            EmbeddedServer(binary=self.binary, appendonly=appendonly, extra_args=_cluster_args(bus))
            for bus in self.bus_ports
        ]

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """What callboard connects with: the scheme says cluster; one node is enough."""
        return f"{CLUSTER_SCHEME}://127.0.0.1:{self.nodes[0].port}/0"

    def start(self, timeout_s: float = 30.0) -> EmbeddedCluster:
        for node in self.nodes:
            node.start()
        self._join()
        self.wait_ok(timeout_s)
        return self

    def _join(self) -> None:
        cli = cli_binary(self.binary)
        if cli is not None:
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            return
        share = SLOTS // len(self.nodes)
        for i, port in enumerate(self.ports):
            last = SLOTS - 1 if i == len(self.nodes) - 1 else (i + 1) * share - 1
            command(port, "CLUSTER", "ADDSLOTSRANGE", str(i * share), str(last))
        for port in self.ports[1:]:  # the bus port said, as it is not port + 10000
            meet = ("127.0.0.1", str(self.ports[0]), str(self.bus_ports[0]))
            command(port, "CLUSTER", "MEET", *meet)

    def state_ok(self) -> bool:
        """Every master answers and says `cluster_state:ok`."""
        try:
            return all("cluster_state:ok" in command(p, "CLUSTER", "INFO") for p in self.ports)
        except OSError:
            return False

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.state_ok():
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster on {self.ports} not ok within {timeout_s}s")
            time.sleep(0.05)

    def node_of(self, port: int) -> EmbeddedServer:
        return next(node for node in self.nodes if node.port == port)

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
