"""A DNS server on 127.0.0.1 for one headless Service, standing in for CoreDNS.

scripts/k8s-check.sh runs no CoreDNS (it would have to be built and run as a pod), yet the
rollout it measures must reach pods the way docs/deploy.md tells clients to: a ``dns:///``
target naming the headless Service, re-resolved by gRPC as pods come and go. This answers
A queries for NAME with the addresses of the Service's ready endpoints, read from its
EndpointSlices through the API server (the data CoreDNS serves for a headless Service), and
nothing else: every other name gets NXDOMAIN, AAAA/SRV/TXT for NAME an empty answer.

    python headless_dns.py --port-file F --name orpheus-svc-headless.default.svc.cluster.local \
        --service orpheus-svc-headless --namespace default --server https://127.0.0.1:P \
        --token T --ca CA

Client target: dns://127.0.0.1:<port>/<name>:50051 (grpcio's c-ares resolver takes the
DNS server as the authority). Answers carry TTL 0. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request


def ready_addresses(slices: dict) -> list[str]:
    """IPv4 addresses of ready endpoints in an EndpointSliceList (what CoreDNS publishes
    for a headless Service with publishNotReadyAddresses false)."""
    out: set[str] = set()
    for item in slices.get("items", []):
        if item.get("addressType") != "IPv4":
            continue
        for ep in item.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            out.update(ep.get("addresses") or [])
    return sorted(out)


def parse_query(data: bytes) -> tuple[int, int, str, int, bytes]:
    """(id, flags, qname lower-cased, qtype, the question section as sent)."""
    qid, flags, qd = struct.unpack("!HHH", data[:6])
    if qd != 1:
        raise ValueError("one question expected")
    pos, labels = 12, []
    while data[pos]:
        n = data[pos]
        labels.append(data[pos + 1:pos + 1 + n].decode("ascii"))
        pos += 1 + n
    qtype, _ = struct.unpack("!HH", data[pos + 1:pos + 5])
    return qid, flags, ".".join(labels).lower(), qtype, data[12:pos + 5]


def answer(data: bytes, name: str, addresses: list[str]) -> bytes:
    qid, flags, qname, qtype, question = parse_query(data)
    rd = flags & 0x0100
    if qname.rstrip(".") != name:
        return struct.pack("!HHHHHH", qid, 0x8400 | rd | 3, 1, 0, 0, 0) + question  # NXDOMAIN
    records = addresses if qtype == 1 else []
    body = b"".join(struct.pack("!HHHIH", 0xC00C, 1, 1, 0, 4) + socket.inet_aton(a)
                    for a in records)
    return struct.pack("!HHHHHH", qid, 0x8400 | rd, 1, len(records), 0, 0) + question + body


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--service", required=True)
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--log", default="")
    args = ap.parse_args()
    ctx = ssl.create_default_context(cafile=args.ca)
    url = (f"{args.server}/apis/discovery.k8s.io/v1/namespaces/{args.namespace}/endpointslices"
           f"?labelSelector=kubernetes.io%2Fservice-name%3D{args.service}")
    state = {"addresses": []}
    log = open(args.log, "a") if args.log else None

    def poll() -> None:
        while True:
            try:
                req = urllib.request.Request(url, headers={"Authorization": f"Bearer {args.token}"})
                with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
                    addrs = ready_addresses(json.load(r))
                if addrs != state["addresses"] and log:
                    log.write(f"{time.time():.3f} {' '.join(addrs) or '-'}\n")
                    log.flush()
                state["addresses"] = addrs
            except Exception as exc:  # noqa: BLE001 - keep serving the last answer
                print(f"headless_dns: {exc}", file=sys.stderr)
            time.sleep(0.5)

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    import os
    os.replace(args.port_file + ".tmp", args.port_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=poll, daemon=True).start()
    while True:
        data, peer = sock.recvfrom(512)
        try:
            sock.sendto(answer(data, args.name.lower(), state["addresses"]), peer)
        except (ValueError, IndexError, struct.error):
            continue


if __name__ == "__main__":
    main()
