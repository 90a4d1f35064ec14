#!/usr/bin/env python3
"""Slow-client attacks on a running `strata serve` (loopback only), for docs/reliability.md.

  slowloris: N connections trickle a header byte every 100 ms for D seconds while GET /health is
             probed every 200 ms on fresh connections (3 s timeout each); prints answered/total
             and the worst latency.
  nolength:  POST /health without Content-Length: seconds until the answer (5 s timeout).

Usage: http_attack.py PORT [N=200] [D=6]. Bounded in count and time; connects to 127.0.0.1 only.
"""
import socket
import sys
import threading
import time

port = int(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
duration = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0


def request(raw, timeout):
    """Seconds until the first response bytes arrive, or None."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(raw)
            s.settimeout(max(0.01, timeout - (time.monotonic() - t0)))
            return time.monotonic() - t0 if s.recv(4096) else None
    except OSError:
        return None


head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
slow = []
for _ in range(n):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port))
        s.send(head[:1])  # the first byte at once: an idle connection may be closed before the attack
        slow.append(s)
    except OSError:
        s.close()
stop = threading.Event()


def trickle():
    for i in range(1, len(head)):
        if stop.is_set():
            return
        for s in slow:
            try:
                s.send(head[i:i + 1], socket.MSG_DONTWAIT)
            except OSError:
                pass
        time.sleep(0.1)


t = threading.Thread(target=trickle)
t.start()
time.sleep(0.5)
answered, total, worst = 0, 0, 0.0
end = time.monotonic() + duration
while time.monotonic() < end:
    total += 1
    r = request(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 3.0)
    if r is not None:
        answered += 1
        worst = max(worst, r)
    else:
        worst = max(worst, 3.0)
    time.sleep(0.2)
stop.set()
t.join()
for s in slow:
    s.close()
print(f"slowloris: {len(slow)} slow connections, /health answered {answered}/{total}, worst {worst * 1000:.0f} ms"
      + (" (3000 = timed out)" if answered < total else ""))
r = request(b"POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 5.0)
print("nolength: POST /health without a length answered in " + (f"{r:.3f} s" if r is not None else "> 5 s (no answer)"))
