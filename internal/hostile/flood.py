# Flood of a control socket, run by StartFlood as an unprivileged member of
# the socket group: open N connections, send one GET on each (HTTP
# keep-alive), report how many were answered 200, 503 or not at all within
# 10 s, then hold every connection open until stdin closes (at most 30 s).
import resource, selectors, socket, sys, time

path, n = sys.argv[1], int(sys.argv[2])
# As many descriptors as the flood may have (the parent's soft limit may be low).
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
deadline = time.monotonic() + 10
sel = selectors.DefaultSelector()
conns, failed = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(path)
        s.sendall(b"GET /v1/services HTTP/1.1\r\nHost: keeld\r\n\r\n")
    except OSError:
        failed += 1
        s.close()
        continue
    s.setblocking(False)
    conns.append(s)
    sel.register(s, selectors.EVENT_READ, bytearray())
served = refused = 0
pending = len(conns)
while pending and time.monotonic() < deadline:
    for key, _ in sel.select(timeout=max(0, deadline - time.monotonic())):
        try:
            chunk = key.fileobj.recv(4096)
        except OSError:
            chunk = b""
        buf = key.data
        buf += chunk
        if len(buf) >= 12 or not chunk:
            status = bytes(buf[9:12])
            if status == b"200":
                served += 1
            elif status == b"503":
                refused += 1
            else:
                failed += 1
            sel.unregister(key.fileobj)
            pending -= 1
failed += pending
print(f"served={served} refused={refused} failed={failed}", flush=True)
sel = selectors.DefaultSelector()
sel.register(sys.stdin, selectors.EVENT_READ)
sel.select(timeout=30)
