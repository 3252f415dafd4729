"""A probe of one emulated link: TCP round-trip time and goodput between two hosts.

The what-if model needs the link's latency (alpha) and bandwidth (beta); the rate is what tc was
told, but the latency of a veth through a bridge is whatever this kernel and CPU make it, so it is
measured: ``PINGS`` one-byte ping-pongs over TCP (Nagle off; the median, halved, is the one-way
latency), then one transfer of ``nbytes`` timed until the receiver's one-byte acknowledgement.

Runs as ``python -m dlbench.netemu.probe server|client ...`` inside the namespaces (started with
``ip netns exec`` by :func:`dlbench.netemu.launch.probe_link`); the client prints one JSON line.
Every socket has a timeout and every loop a count.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

PINGS = 20
SOCKET_TIMEOUT_S = 30.0
CONNECT_TRIES = 100          # x 50 ms: the server may still be starting
PORT = 29499


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = sock.recv(min(1 << 20, n - got))
        if not b:
            raise ConnectionError("peer closed the connection")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def serve(address: str, port: int = PORT) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.settimeout(SOCKET_TIMEOUT_S)
    srv.bind((address, port))
    srv.listen(1)
    conn, _ = srv.accept()
    conn.settimeout(SOCKET_TIMEOUT_S)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pings = struct.unpack("!I", _recv_exact(conn, 4))[0]
    for _ in range(min(pings, 10_000)):
        conn.sendall(_recv_exact(conn, 1))
    n = struct.unpack("!Q", _recv_exact(conn, 8))[0]
    got = 0
    while got < n:
        b = conn.recv(min(1 << 20, n - got))
        if not b:
            break
        got += len(b)
    conn.sendall(b"k")
    conn.close()
    srv.close()


def measure(address: str, nbytes: int, port: int = PORT, pings: int = PINGS) -> dict:
    sock = None
    for _ in range(CONNECT_TRIES):
        try:
            sock = socket.create_connection((address, port), timeout=SOCKET_TIMEOUT_S)
            break
        except OSError:
            time.sleep(0.05)
    if sock is None:
        raise ConnectionError(f"no probe server at {address}:{port}")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(struct.pack("!I", pings))
    rtts = []
    for _ in range(pings):
        t = time.perf_counter()
        sock.sendall(b"p")
        _recv_exact(sock, 1)
        rtts.append(time.perf_counter() - t)
    payload = bytes(nbytes)
    t = time.perf_counter()
    sock.sendall(struct.pack("!Q", nbytes))
    sock.sendall(payload)
    _recv_exact(sock, 1)
    dt = time.perf_counter() - t
    sock.close()
    rtts.sort()
    return {"rtt_s": rtts[len(rtts) // 2], "rtt_min_s": rtts[0], "pings": pings,
            "probe_bytes": nbytes, "transfer_s": dt, "goodput_bps": nbytes * 8 / dt}


def main(argv: list[str]) -> int:
    if argv[0] == "server":
        serve(argv[1])
    else:
        print(json.dumps(measure(argv[1], int(argv[2]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
