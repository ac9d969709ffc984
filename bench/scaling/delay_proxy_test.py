"""korovod-delay-proxy in a network namespace of its own (run by ctest as delay_proxy_netns):

  ns: lo, with 10.215.0.1 (the "peer") added; an echo server listens there;
      iptables redirects TCP to 10.215.0.0/24 to the proxy on port 4111 (except its own, marked);
  checks: 1 MiB of random bytes comes back intact (both directions relayed), each of 5 one-byte
  round trips takes at least 2 x the delay (the delay is a lower bound, so this cannot flake),
  and the client sees end of stream when the server closes; and a client that dials before its
  server listens gets through once it does (the proxy redials: the client's own connect had
  already succeeded, so a refusal cannot be passed on as one).

Usage: delay_proxy_test.py PATH/TO/korovod-delay-proxy. Exit 77 (skipped) without root, `ip`
or iptables' nat table."""
import os
import shutil
import subprocess
import sys
import time

DELAY_US = 20000
NS = "kvdp%d" % os.getpid()


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


SERVER = r"""
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.215.0.1", 5111)); s.listen(4); print("listening", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big")
got = b""
while len(got) < n:
    got += c.recv(n - len(got))
c.sendall(got)                        # echo the bulk
for _ in range(5):                    # then 5 one-byte ping-pongs
    c.sendall(c.recv(1, socket.MSG_WAITALL))
c.close()
"""

CLIENT = r"""
import os, socket, sys, time
c = socket.create_connection(("10.215.0.1", 5111), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
data = os.urandom(1 << 20)
c.sendall(len(data).to_bytes(8, "big") + data)
back = b""
while len(back) < len(data):
    b = c.recv(1 << 20)
    assert b, "stream ended after %d bytes" % len(back)
    back += b
assert back == data, "bytes changed on the way"
rtts = []
for i in range(5):
    t = time.monotonic(); c.sendall(b"x"); assert c.recv(1) == b"x"
    rtts.append(time.monotonic() - t)
assert c.recv(1) == b"", "no end of stream"
print(" ".join("%.4f" % r for r in rtts))
"""


LATE_SERVER = r"""
import socket, time
time.sleep(0.5)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.215.0.1", 5112)); s.listen(1)
c, _ = s.accept(); c.sendall(c.recv(5, socket.MSG_WAITALL)); c.close()
"""

EARLY_CLIENT = r"""
import socket
c = socket.create_connection(("10.215.0.1", 5112), timeout=30)
c.sendall(b"hello"); got = c.recv(5, socket.MSG_WAITALL)
assert got == b"hello", got
print("late server reached")
"""


def main():
    proxy = sys.argv[1]
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"):
        skip("needs root, ip and iptables")
    if sh("ip", "netns", "add", NS, check=False).returncode != 0:
        skip("cannot create a network namespace")
    procs = []
    try:
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("ip", "-n", NS, "addr", "add", "10.215.0.1/32", "dev", "lo")
        if sh("ip", "netns", "exec", NS, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp",
              "-d", "10.215.0.0/24", "-m", "mark", "!", "--mark", "0x4b", "-j", "REDIRECT",
              "--to-ports", "4111", check=False).returncode:
            skip("no iptables nat REDIRECT")
        px = subprocess.Popen(["ip", "netns", "exec", NS, proxy, "--port", "4111", "--delay-us",
                               str(DELAY_US), "--mark", "0x4b"], stdout=subprocess.PIPE, text=True)
        procs.append(px)
        assert px.stdout.readline().strip() == "ready", "the proxy did not start"
        srv = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", SERVER],
                               stdout=subprocess.PIPE, text=True)
        procs.append(srv)
        assert srv.stdout.readline().strip() == "listening"
        out = subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", CLIENT],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rtts = [float(x) for x in out.stdout.split()]
        assert len(rtts) == 5 and min(rtts) >= 2 * DELAY_US * 1e-6, rtts
        late = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", LATE_SERVER])
        procs.append(late)
        out2 = subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", EARLY_CLIENT],
                              capture_output=True, text=True, timeout=60)
        assert out2.returncode == 0 and "late server reached" in out2.stdout, out2.stderr
        print("OK: 1 MiB echoed intact; round trips %s s (delay %d us each way)" % (
            " ".join("%.4f" % r for r in rtts), DELAY_US))
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        sh("ip", "netns", "del", NS, check=False)


if __name__ == "__main__":
    main()
