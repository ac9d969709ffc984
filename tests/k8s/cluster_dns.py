"""ClusterDNS: the cluster DNS of a real node (real_node.RealNodeCluster), just enough of
Kubernetes' DNS specification for pods to find each other by name, as workers of a HorovodJob find
rank 0 ("<job>-worker-0.<job>.<ns>.svc.cluster.local", operator/controller/child_names.h).

There is no CoreDNS here (nothing to pull it from, and no kube-proxy to reach it at a ClusterIP):
this UDP server listens on the pod bridge's gateway address, where the kubelet's clusterDNS points
the pods' resolv.conf, and answers A queries from the API server, read at each query:
  <host>.<service>.<ns>.svc.<domain>   the EndpointSlice endpoints of <service> whose hostname is
                                       <host> (pods with spec.hostname/subdomain) and that are
                                       ready (or of a Service that publishes not-ready addresses)
  <service>.<ns>.svc.<domain>          a headless Service's ready endpoints, else its ClusterIP
  <a-b-c-d>.<ns>.pod.<domain>          a.b.c.d
Any other name is NXDOMAIN (nothing outside the machine can be reached anyway); a known name asked
for another type than A gets an empty answer, so resolvers do not wait for AAAA.
"""
import ipaddress
import socket
import struct
import threading

A, IN = 1, 1
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3


class ClusterDNS:
    def __init__(self, cluster, address, domain="cluster.local", port=53):
        self.cluster = cluster
        self.address = address
        self.port = port
        self.domain = domain.strip(".").lower()
        self.queries = []       # (name, type, answer IPs or None) as served, for tests to read
        self.errors = []
        self._sock = None
        self._thread = None

    def start(self):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.bind((self.address, self.port))
        except OSError as e:
            self._sock.close()
            raise RuntimeError("cluster DNS cannot listen on %s:%d/udp: %s"
                               % (self.address, self.port, e)) from None
        self._sock.settimeout(0.3)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, daemon=True, name="cluster-dns")
        self._thread.start()
        return self

    def stop(self):
        if self._thread:
            self._stopping = True
            self._thread.join(5)
            self._sock.close()
            self._thread = None

    def _serve(self):
        while not self._stopping:
            try:
                data, peer = self._sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                reply = self._answer(data)
            except Exception as e:  # a bad packet or an API error: SERVFAIL, and keep serving
                self.errors.append(repr(e))
                reply = _reply(data, SERVFAIL, [])
            if reply:
                self._sock.sendto(reply, peer)

    def _answer(self, data):
        if len(data) < 12:
            return None
        name, qtype, _ = _question(data)
        ips = self.resolve(name)
        self.queries.append((name, qtype, ips))
        if ips is None:
            return _reply(data, NXDOMAIN, [])
        return _reply(data, NOERROR, ips if qtype == A else [])

    # --- names ---------------------------------------------------------------------------------
    def resolve(self, name):
        """The IPv4 addresses of `name` (a list, maybe empty), or None when it does not exist."""
        name = name.strip(".").lower()
        if not name.endswith("." + self.domain):
            return None
        parts = name[:-len(self.domain) - 1].split(".")
        if len(parts) == 3 and parts[2] == "pod":
            try:
                return [str(ipaddress.IPv4Address(parts[0].replace("-", ".")))]
            except ValueError:
                return None
        if len(parts) == 3 and parts[2] == "svc":
            svc = self.cluster.get("/api/v1/namespaces/%s/services/%s" % (parts[1], parts[0]))
            if not svc:
                return None
            if svc["spec"].get("clusterIP") not in (None, "", "None"):
                return [svc["spec"]["clusterIP"]]
            return [ip for _, ip in self._endpoints(parts[1], parts[0])]
        if len(parts) == 4 and parts[3] == "svc":
            ips = [ip for host, ip in self._endpoints(parts[2], parts[1]) if host == parts[0]]
            return ips or None
        return None

    def _endpoints(self, ns, service):
        """(hostname, IPv4) of the ready endpoints of `service`'s EndpointSlices."""
        slices = self.cluster.get("/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices"
                                  "?labelSelector=kubernetes.io/service-name%%3D%s"
                                  % (ns, service)) or {}
        out = []
        for s in slices.get("items", []):
            if s.get("addressType") != "IPv4":
                continue
            for e in s.get("endpoints") or []:
                if (e.get("conditions") or {}).get("ready") is False:
                    continue
                out += [(e.get("hostname"), ip) for ip in e.get("addresses", [])]
        return out


def _question(data):
    """(name, type, end offset) of a query's first question (no compression in questions)."""
    labels, i = [], 12
    while data[i]:
        n = data[i]
        labels.append(data[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack("!HH", data[i + 1:i + 5])
    return ".".join(labels), qtype, i + 5


def _reply(query, rcode, ips):
    """The reply to `query`: its id and question, the RD bit it asked, authoritative, and an A
    record per IP (the name as a pointer to the question's)."""
    qid, flags = struct.unpack("!HH", query[:4])
    _, _, end = _question(query)
    header = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode,
                         1, len(ips), 0, 0)
    answers = b"".join(struct.pack("!HHHIH", 0xC00C, A, IN, 5, 4) + socket.inet_aton(ip)
                       for ip in ips)
    return header + query[12:end] + answers
