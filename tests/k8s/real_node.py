"""RealNodeCluster: cluster.py's control plane plus a real node, for tests that need pods to run as
a kubelet runs them (images, containers, pod IPs, Services' endpoints, garbage collection).

On top of etcd + kube-apiserver (cluster.Cluster) it starts kube-scheduler, kube-controller-manager
and a kubelet (scripts/build-testinfra.sh builds all three from the pinned module), and Debian's
containerd 1.6 + runc as the container runtime, each with its own config under a short folder in
/tmp (unix socket paths are limited to 107 bytes) and its log in the test's folder. Nothing is
pulled: nothing outside the machine can be reached, so images are imported into containerd
(import_image; write_oci_image makes one from local files, host_program_files lists a program of
the machine with its libraries) and pods say imagePullPolicy Never or IfNotPresent.

What this machine needs, and why each setting is what it is:
  * containerd: restrict_oom_score_adj = true (containers get no lower an OOM score than
    containerd's own; the kubelet asks for -998 for sandboxes, which this machine refuses, and
    without it every sandbox fails in runc: "can't get final child's PID from pipe: EOF"), netns
    mounts and the runc state under its own folders, so teardown finds everything it made.
  * pod network: a bridge (BRIDGE) that this module creates with the gateway address, and CNI's
    bridge plugin with isGateway false, so the plugin never switches on net.ipv4.ip_forward (this
    machine's kernel settings stay as they are); host-local hands out POD_SUBNET. The host reaches
    pod IPs directly over the bridge: kube-apiserver calls webhooks in pods, the tests connect.
    Pods resolve names in the cluster domain through cluster_dns.ClusterDNS on the gateway
    address (the kubelet's clusterDNS). There is no kube-proxy: ClusterIPs do not route, except
    the `kubernetes` Service's (a DNAT rule to kube-apiserver, which then listens on all addresses:
    RealNodeCluster(pods_reach_apiserver=True), the default); kube-apiserver runs with
    --enable-aggregator-routing so webhooks and aggregated APIs behind a Service are called at the
    Service's endpoint (a pod IP) instead of its ClusterIP.
  * kubelet: --fail-cgroupv1=false and the cgroupfs driver (this machine has a hybrid cgroup v1
    layout and no systemd); it runs in a mount namespace of its own (unshare -m) where the
    /proc/sys files it insists on setting (vm.overcommit_memory, kernel.panic, ...) are files of
    ours bind-mounted over them, so it "sets" them without changing the machine's. Its root dir is
    a shared bind mount, so the volumes it mounts there (secrets, service-account tokens) are seen
    by containerd in the machine's namespace. Its cgroups live under /<node name>, removed at
    teardown.
  * identities: the kubelet is system:node:<node> (group system:nodes; a client certificate from
    the test CA, authorized by the Node authorizer added to kube-apiserver); kube-apiserver calls
    the kubelet (logs, exec) with a client certificate in system:masters, and checks the kubelet's
    serving certificate (also from the test CA, for the node's IP). kube-scheduler and
    kube-controller-manager use the admin kubeconfig.
  * gang scheduling (RealNodeCluster(coscheduling="beside" or "instead")): the scheduler-plugins
    kube-scheduler (.testinfra/bin/kube-scheduler-plugins, scripts/build-testinfra.sh) with a
    KubeSchedulerConfiguration whose profile enables Coscheduling (queueSort, preFilter,
    postFilter, permit, reserve), either as a second scheduler beside the default one (its
    profile's schedulerName is COSCHEDULER_NAME: pods choose it with spec.schedulerName) or as
    the only one (profile default-scheduler). Its PodGroup and ElasticQuota CRDs
    (.testinfra/scheduler-plugins-crds) are applied first, and scheduler-plugins' controller
    (.testinfra/bin/kube-scheduler-plugins-controller) sets PodGroups' status (phase, running).

Teardown (stop) kills every process it started, the containers (through containerd, then any
shim left), unmounts what is mounted under its folders, removes the bridge, the cgroups and the
folders, and checks that nothing of it is left (RealNodeCluster.leftovers).
"""
import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

from cluster import (REPO, TESTINFRA_BIN, Cluster, _kubeconfig, binaries, free_port,
                     issue_cert, unavailable)
from cluster_dns import ClusterDNS

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"   # the pause tag of the images the repo builds
POD_SUBNET = "10.244.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the first address of cluster.py's --service-cluster-ip-range
APISERVER_CHAIN = "KOROVOD-APISERVER"  # the nat chain of pods_reach_apiserver's DNAT rule
CLUSTER_DOMAIN = "cluster.local"  # korovod-operator's default (operator_settings.h)
BRIDGE = "korovod0"
NODE_BINARIES = ("kube-scheduler", "kube-controller-manager", "kubelet")
HOST_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "unshare", "iptables")
CNI_BIN_DIR = "/usr/lib/cni"
# libcni's cache of ADD results (not configurable in containerd 1.6): an entry per sandbox and
# network, <network>-<sandbox id>-<interface>, removed by CNI DEL; stop() removes those of sandboxes
# that were killed instead.
CNI_RESULTS = "/var/lib/cni/results"
# Folders of the machine that a node uses whatever its configuration says: containerd 1.6's shims
# put their sockets under /run/containerd/s, ctr its fifos under /run/containerd/fifo, a shim's
# clean-up of a killed task runs runc with its default root; the kubelet puts its device-plugin
# socket under /var/lib/kubelet/device-plugins (where it mounts a tmpfs in its own mount
# namespace, so the socket never reaches the machine). Those this module makes, stop() removes
# (when empty: nothing of another containerd is touched).
HOST_DIRS = ("/run/containerd", "/run/containerd/s", "/run/containerd/fifo",
             "/run/containerd/runc", "/run/containerd/runc/k8s.io", "/var/lib/kubelet")
# iptables chains the kubelet makes in the machine's tables whatever its configuration says
# ((command, table, chain), jumps to them first): those it made, stop() removes.
KUBELET_CHAINS = tuple((cmd, table, chain) for cmd in ("iptables", "ip6tables")
                       for table, chain in (("filter", "KUBE-FIREWALL"),
                                            ("filter", "KUBE-KUBELET-CANARY"),
                                            ("nat", "KUBE-KUBELET-CANARY"),
                                            ("mangle", "KUBE-KUBELET-CANARY"),
                                            ("mangle", "KUBE-IPTABLES-HINT")))
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CONTROLLERS = ("garbage-collector-controller", "job-controller", "statefulset-controller",
               "replicaset-controller", "deployment-controller", "endpoints-controller",
               "endpointslice-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "namespace-controller",
               "pod-garbage-collector-controller", "node-lifecycle-controller",
               "root-ca-certificate-publisher-controller", "ttl-after-finished-controller",
               "disruption-controller")
# The /proc/sys entries the kubelet sets at start-up (protectKernelDefaults: false), with the values
# it wants; bind-mounted over in its own mount namespace only.
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                   "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
                   "kernel/keys/root_maxbytes": "25000000"}


# The scheduler-plugins kube-scheduler (Coscheduling) and its PodGroup controller, for
# RealNodeCluster(coscheduling=...); their CRDs are copied beside them by build-testinfra.sh.
SCHEDULER_PLUGINS_BINARIES = ("kube-scheduler-plugins", "kube-scheduler-plugins-controller")
SCHEDULER_PLUGINS_CRDS = os.path.join(REPO, ".testinfra", "scheduler-plugins-crds")
# The schedulerName of the Coscheduling profile when it runs beside the default scheduler (the name
# scheduler-plugins' own Helm chart gives its second scheduler).
COSCHEDULER_NAME = "scheduler-plugins-scheduler"
COSCHEDULING_MODES = (None, "beside", "instead")


def scheduler_plugins_binaries():
    """The paths of kube-scheduler-plugins and kube-scheduler-plugins-controller, or a message
    naming what is missing (the CRDs included)."""
    paths = {n: os.path.join(TESTINFRA_BIN, n) for n in SCHEDULER_PLUGINS_BINARIES}
    missing = [n for n, p in paths.items() if not os.access(p, os.X_OK)]
    if missing:
        return None, ("missing %s in %s: run scripts/build-testinfra.sh (it builds them from "
                      "sigs.k8s.io/scheduler-plugins)" % (", ".join(missing), TESTINFRA_BIN))
    crd = os.path.join(SCHEDULER_PLUGINS_CRDS, "scheduling.x-k8s.io_podgroups.yaml")
    if not os.path.isfile(crd):
        return None, "missing %s: run scripts/build-testinfra.sh" % crd
    return paths, ""


def require_scheduler_plugins():
    """Skips the calling test without the scheduler-plugins build, or fails it under
    KOROVOD_REQUIRE_K8S=1. Returns the paths."""
    paths, why = scheduler_plugins_binaries()
    if not paths:
        unavailable(why)
    return paths


def node_binaries():
    """The paths of what a real node needs besides the control plane, or a message naming what is
    missing (and which script provides it)."""
    paths, why = binaries(NODE_BINARIES)
    if not paths:
        return None, why
    missing = []
    for name in HOST_BINARIES:
        p = shutil.which(name)
        if p:
            paths[name] = p
        else:
            missing.append(name)
    missing += ["%s/%s" % (CNI_BIN_DIR, p) for p in CNI_PLUGINS
                if not os.access(os.path.join(CNI_BIN_DIR, p), os.X_OK)]
    if os.geteuid() != 0:
        missing.append("root (a kubelet and containerd run as root)")
    if missing:
        return None, ("missing %s: run scripts/install-deps.sh --k8s (containerd, runc, "
                      "containernetworking-plugins, iptables)" % ", ".join(missing))
    return paths, ""


def require_node_binaries():
    """Skips the calling test when a real node cannot run here, or fails it under
    KOROVOD_REQUIRE_K8S=1. Returns the paths."""
    paths, why = node_binaries()
    if not paths:
        unavailable(why)
    return paths


def node_ip():
    """The machine's address on its default route: the node's InternalIP (the kubelet refuses a
    loopback one) and where kube-apiserver reaches the kubelet."""
    out = subprocess.run(["ip", "-o", "route", "get", "1.1.1.1"], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[out.index("src") + 1]


@contextlib.contextmanager
def running(workdir=None, images=(), **kwargs):
    """A started RealNodeCluster (kwargs: RealNodeCluster's) with the image archives `images`
    imported, stopped on exit, where teardown must leave nothing behind; workdir: where the logs
    go (default: a temporary folder, removed on exit). Callers skip first with require_binaries()
    and require_node_binaries() (cluster.py, here)."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="korovod-real-node-"))
        c = RealNodeCluster(workdir, **kwargs)
        c.start()
        try:
            for archive in images:
                c.import_image(archive)
            yield c
        finally:
            c.stop()
        left = c.leftovers()
        assert not left, "real node teardown left %s" % left


# --- images --------------------------------------------------------------------------------------
def _oci_arch():
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def write_oci_image(path, name, files, symlinks=None, entrypoint=None, cmd=None, env=None):
    """Writes an OCI image layout archive of one uncompressed layer to `path`, for import_image
    (no podman or registry needed). name: the full reference (docker.io/..., registry.k8s.io/...);
    files: {path in the image: (host file, mode)}; symlinks: {path in the image: target}."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = set()
        for p in list(files) + list(symlinks or {}):
            parts = p.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        for d in sorted(dirs):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        for p, (src, mode) in sorted(files.items()):
            ti = t.gettarinfo(src, p.strip("/"))
            ti.mode, ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = mode, 0, 0, "", "", 0
            with open(src, "rb") as f:
                t.addfile(ti, f)
        for p, target in sorted((symlinks or {}).items()):
            ti = tarfile.TarInfo(p.strip("/"))
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            t.addfile(ti)
    blobs = {}

    def blob(data, media_type):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer_desc = blob(layer.getvalue(), "application/vnd.oci.image.layer.v1.tar")
    config = {"architecture": _oci_arch(), "os": "linux",
              "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"],
                         "Entrypoint": entrypoint, "Cmd": cmd},
              "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]}}
    config_desc = blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer_desc]}
    manifest_desc = blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
    manifest_desc["platform"] = {"architecture": _oci_arch(), "os": "linux"}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_desc]}
    with tarfile.open(path, "w") as t:
        entries = [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                   ("index.json", json.dumps(index).encode())]
        entries += [("blobs/sha256/" + d.split(":", 1)[1], data) for d, data in blobs.items()]
        for n, data in entries:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return path


def host_program_files(*programs):
    """{path in the image: (host file, mode)} for write_oci_image: each program of the machine
    at its own path with the shared libraries ldd lists (and the dynamic loader), so a small
    image can run e.g. openssl as it runs here."""
    files = {}
    for prog in programs:
        path = os.path.realpath(shutil.which(prog) or prog)
        files[path] = (path, 0o755)
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            lib = parts[2] if "=>" in parts and len(parts) > 3 else parts[0] if parts else ""
            if lib.startswith("/"):
                files[lib] = (os.path.realpath(lib), 0o755)
    return files


def pause_image_archive(workdir):
    """An archive of PAUSE_IMAGE: the one scripts/build-images.sh leaves in .testinfra/images when
    there is one, else one made here from the pinned module's pause.c (gcc -static)."""
    images = os.path.join(REPO, ".testinfra", "images")
    if os.path.isdir(images):
        for f in sorted(os.listdir(images)):
            if f.startswith("pause") and f.endswith(".tar"):
                return os.path.join(images, f)
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                                env=dict(os.environ, PATH=os.environ["PATH"] + ":/usr/local/go/bin"),
                                ).stdout.strip() or os.path.expanduser("~/go/pkg/mod")
    src = os.path.join(gomodcache, "k8s.io", "kubernetes@" + _k8s_version(), "build", "pause",
                       "linux", "pause.c")
    exe = os.path.join(workdir, "pause")
    subprocess.run(["gcc", "-Os", "-static", "-DVERSION=v3.10-korovod-test", "-o", exe, src],
                   check=True, capture_output=True)
    return write_oci_image(os.path.join(workdir, "pause.tar"), PAUSE_IMAGE,
                           {"/pause": (exe, 0o755)}, entrypoint=["/pause"])


def _podman_env():
    """podman's environment as scripts/build-images.sh sets it (its containers.conf, when there)."""
    conf = os.path.join(REPO, ".testinfra", "images", "containers.conf")
    return dict(os.environ, **({"CONTAINERS_CONF": conf} if os.path.exists(conf) else {}))


def _k8s_version():
    with open(os.path.join(REPO, "tests", "k8s", "testinfra", "go.mod")) as f:
        for line in f:
            if line.startswith("require k8s.io/kubernetes "):
                return line.split()[2]
    raise RuntimeError("no k8s.io/kubernetes in tests/k8s/testinfra/go.mod")


def processes():
    """(pid, argv as bytes) of every process still there when read."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                yield int(pid), f.read().split(b"\0")
        except OSError:
            continue


# --- the cluster with a node ---------------------------------------------------------------------

class RealNodeCluster(Cluster):
    def __init__(self, workdir, node="real-node", extra_apiserver_args=(), audit_users=(),
                 pods_reach_apiserver=True, coscheduling=None, permit_waiting_s=10,
                 kubelet_config=None):
        """workdir: the test's folder (logs, kubeconfigs, PKI); the node's state goes to a short
        folder under /tmp that stop() removes. pods_reach_apiserver: kube-apiserver listens on
        all addresses (not only 127.0.0.1) and advertises the gateway address, and a DNAT rule
        sends pods' connections to the `kubernetes` Service's ClusterIP (KUBERNETES_SERVICE_HOST,
        kubernetes.default.svc) there, as kube-proxy would: in-cluster clients (an operator in a
        pod) work with their service-account token.
        coscheduling: None (the default: the pinned kube-scheduler alone), "beside" (the
        scheduler-plugins kube-scheduler as a second scheduler, schedulerName COSCHEDULER_NAME)
        or "instead" (it replaces kube-scheduler, as default-scheduler); permit_waiting_s: its
        Coscheduling permitWaitingTimeSeconds (how long the gang's first pods wait at Permit for
        the rest). kubelet_config: entries merged into the KubeletConfiguration (e.g.
        {"systemReserved": {"cpu": "1"}} to shrink the node's allocatable CPU)."""
        if coscheduling not in COSCHEDULING_MODES:
            raise ValueError("coscheduling must be one of %s" % (COSCHEDULING_MODES,))
        super().__init__(workdir, extra_apiserver_args, audit_users)
        self.coscheduling = coscheduling
        self.permit_waiting_s = permit_waiting_s
        self.kubelet_config = dict(kubelet_config or {})
        self.scheduler_plugins_paths = {}
        if coscheduling:
            self.scheduler_plugins_paths, why = scheduler_plugins_binaries()
            if not self.scheduler_plugins_paths:
                raise RuntimeError(why)
        self.pods_reach_apiserver = pods_reach_apiserver
        self.node_paths, why = node_binaries()
        if not self.node_paths:
            raise RuntimeError(why)
        self.node = node
        self.node_ip = node_ip()
        self.gateway = POD_SUBNET.rsplit(".", 1)[0] + ".1"
        self.state = None
        self.containerd_sock = None
        self.dns = None
        self._bridge_made = False
        self._apiserver_chain = False
        if pods_reach_apiserver:
            self.server_sans += ["IP:" + KUBERNETES_SERVICE_IP, "IP:" + self.gateway,
                                 "DNS:kubernetes.default.svc." + CLUSTER_DOMAIN]

    # --- hooks into Cluster.start -------------------------------------------------------------
    def _issue_more_certs(self, pki):
        issue_cert(pki, "kubelet-client", "/CN=kube-apiserver-kubelet-client/O=system:masters")
        issue_cert(pki, "node", "/CN=system:node:%s/O=system:nodes" % self.node)
        issue_cert(pki, "kubelet-serving", "/CN=%s" % self.node,
                   "subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth"
                   % (self.node_ip, self.node))

    def _more_apiserver_args(self, pki):
        # --authorization-mode is a list flag: this appends Node to cluster.py's RBAC.
        return ["--authorization-mode=Node",
                "--kubelet-client-certificate=%s/kubelet-client.crt" % pki,
                "--kubelet-client-key=%s/kubelet-client.key" % pki,
                "--kubelet-certificate-authority=%s/ca.crt" % pki,
                "--kubelet-preferred-address-types=InternalIP",
                "--enable-aggregator-routing=true", "--allow-privileged=true",
                # (string flags: these override cluster.py's --bind-address=127.0.0.1)
                *(["--bind-address=0.0.0.0", "--advertise-address=" + self.gateway]
                  if self.pods_reach_apiserver else [])]

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self, deadline_s=120, node_ready_s=120):
        """The control plane (Cluster.start), then the pod network, containerd (with the pause
        image), kube-scheduler, kube-controller-manager and the kubelet; returns once the node is
        Ready (start_seconds: how long it all took). On any failure everything started so far is
        stopped."""
        t0 = time.monotonic()
        try:
            super().start(deadline_s)
            self.state = tempfile.mkdtemp(prefix="krn-", dir="/tmp")
            self._new_host_dirs = [d for d in HOST_DIRS if not os.path.exists(d)]
            self._new_chains = [c for c in KUBELET_CHAINS if not _chain_exists(*c)]
            self._start_network()
            self._start_containerd()
            self.import_image(pause_image_archive(self.state))
            self._start_controllers()
            self._start_kubelet()
            self.wait_node_ready(node_ready_s)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_network(self):
        """The bridge with the gateway address (made here so that the bridge plugin needs no
        isGateway, which would turn on the machine's ip_forward), the cluster DNS on it, and the
        DNAT rule of pods_reach_apiserver."""
        if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
            raise RuntimeError("bridge %s exists already: another real node runs here, or one "
                               "was not torn down (ip link del %s)" % (BRIDGE, BRIDGE))
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        self._bridge_made = True
        subprocess.run(["ip", "addr", "add", self.gateway + "/" + POD_SUBNET.split("/")[1],
                        "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
        self.dns = ClusterDNS(self, self.gateway, CLUSTER_DOMAIN).start()
        if self.pods_reach_apiserver:
            port = self.server.rsplit(":", 1)[1]
            nat = ["iptables", "-w", "10", "-t", "nat"]
            if _chain_exists("iptables", "nat", APISERVER_CHAIN):
                raise RuntimeError("iptables nat chain %s exists already: another real node "
                                   "runs here, or one was not torn down" % APISERVER_CHAIN)
            subprocess.run(nat + ["-N", APISERVER_CHAIN], check=True)
            self._apiserver_chain = True
            subprocess.run(nat + ["-A", APISERVER_CHAIN, "-d", KUBERNETES_SERVICE_IP, "-p", "tcp",
                                  "--dport", "443", "-j", "DNAT", "--to-destination",
                                  "%s:%s" % (self.gateway, port)], check=True)
            subprocess.run(nat + ["-A", "PREROUTING", "-i", BRIDGE, "-j", APISERVER_CHAIN],
                           check=True)

    def _start_containerd(self):
        s = self.state
        cni_conf = os.path.join(s, "cni")
        os.makedirs(cni_conf)
        with open(os.path.join(cni_conf, "10-korovod.conflist"), "w") as f:
            json.dump({"cniVersion": "0.4.0", "name": "korovod-" + self.node, "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": False, "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET,
                                                              "gateway": self.gateway}]],
                          "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": os.path.join(s, "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, f, indent=1)
        self.containerd_sock = os.path.join(s, "containerd.sock")
        config = os.path.join(s, "containerd.toml")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        with open(config, "w") as f:
            f.write("""version = 2
root = "{s}/root"
state = "{s}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{s}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{s}/opt"
[{cri}]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{s}/runc"
  [{cri}.cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
""".format(s=s, sock=self.containerd_sock, cri=cri, pause=PAUSE_IMAGE, cni_bin=CNI_BIN_DIR,
           cni_conf=cni_conf))
        self._spawn("containerd", [self.node_paths["containerd"], "--config", config])
        self.wait_alive(lambda: self.ctr("version", check=False).returncode == 0,
                        "containerd to serve on %s" % self.containerd_sock, 30, "containerd")

    def _start_controllers(self):
        pki = os.path.join(self.dir, "pki")
        if self.coscheduling != "instead":
            self._spawn("kube-scheduler", [
                self.node_paths["kube-scheduler"], "--kubeconfig=" + self.admin_kubeconfig,
                "--authentication-kubeconfig=" + self.admin_kubeconfig,
                "--authorization-kubeconfig=" + self.admin_kubeconfig,
                "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"])
        if self.coscheduling:
            self._start_coscheduling()
        self._spawn("kube-controller-manager", [
            self.node_paths["kube-controller-manager"], "--kubeconfig=" + self.admin_kubeconfig,
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
            "--controllers=" + ",".join(CONTROLLERS),
            "--service-account-private-key-file=%s/sa.key" % pki,
            "--root-ca-file=%s/ca.crt" % pki, "--use-service-account-credentials=false",
            "--cluster-cidr=" + POD_SUBNET, "--allocate-node-cidrs=false",
            # Pods of a deleted owner go within a second or two, not a minute.
            "--concurrent-gc-syncs=5"])

    def _start_coscheduling(self):
        """The scheduler-plugins CRDs, its PodGroup controller and its kube-scheduler with a
        Coscheduling profile (see coscheduling in __init__)."""
        self.kubectl("apply", "--server-side", "-f", SCHEDULER_PLUGINS_CRDS)
        self.wait_established("crd/podgroups.scheduling.x-k8s.io",
                              "crd/elasticquotas.scheduling.x-k8s.io")
        # controller-runtime's --kubeconfig; its metrics and probes on ports of their own.
        self._spawn("kube-scheduler-plugins-controller", [
            self.scheduler_plugins_paths["kube-scheduler-plugins-controller"],
            "--kubeconfig=" + self.admin_kubeconfig,
            "--metricsAddr=127.0.0.1:%d" % free_port(), "--probeAddr=127.0.0.1:%d" % free_port()])
        name = COSCHEDULER_NAME if self.coscheduling == "beside" else "default-scheduler"
        # Coscheduling sorts the queue (a gang's pods together) and takes part at every extension
        # point where it acts (scheduler-plugins' manifests/coscheduling/scheduler-config.yaml
        # does the same with multiPoint): preFilter rejects a pod whose group has fewer than
        # minMember pods, permit holds the gang's placed pods until minMember are, postFilter
        # and reserve's unreserve reject the whole gang when one cannot be placed.
        config = os.path.join(self.dir, "coscheduling-scheduler.yaml")
        with open(config, "w") as f:
            json.dump({
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False},
                "clientConnection": {"kubeconfig": self.admin_kubeconfig},
                "profiles": [{
                    "schedulerName": name,
                    "plugins": {
                        "queueSort": {"enabled": [{"name": "Coscheduling"}],
                                      "disabled": [{"name": "*"}]},
                        **{point: {"enabled": [{"name": "Coscheduling"}]}
                           for point in ("preFilter", "postFilter", "permit", "reserve")}},
                    "pluginConfig": [{"name": "Coscheduling", "args": {
                        "permitWaitingTimeSeconds": self.permit_waiting_s}}]}],
            }, f, indent=1)
        self.coscheduler_name = name
        # Coscheduling asks for its rejected pods to be retried only when a pod is added or a
        # PodGroup added or updated (its EventsToRegister): a gang whose pods were all last
        # turned away by Coscheduling itself (at Permit or by a sibling's PostFilter) is not
        # retried when a pod is deleted and frees room, until the scheduler's flush of
        # unschedulable pods, 5 minutes by default. Here it is 10 s (the flush runs every 30 s).
        self._spawn("kube-scheduler-plugins", [
            self.scheduler_plugins_paths["kube-scheduler-plugins"], "--config=" + config,
            "--authentication-kubeconfig=" + self.admin_kubeconfig,
            "--authorization-kubeconfig=" + self.admin_kubeconfig,
            "--bind-address=127.0.0.1", "--secure-port=0",
            "--pod-max-in-unschedulable-pods-duration=10s"])

    def _start_kubelet(self):
        s, pki = self.state, os.path.join(self.dir, "pki")
        root = os.path.join(s, "kubelet")
        os.makedirs(root)
        # A shared bind mount: what the kubelet mounts under it in its own mount namespace
        # (pod volumes) propagates to the machine's, where containerd bind-mounts it into pods.
        subprocess.run(["mount", "--bind", root, root], check=True)
        subprocess.run(["mount", "--make-shared", root], check=True)
        self._make_cgroup_root()
        self.node_kubeconfig = os.path.join(self.dir, "node.kubeconfig")
        with open(self.node_kubeconfig, "w") as f:
            f.write(_kubeconfig(self.server, self.ca, {
                "client-certificate": os.path.join(pki, "node.crt"),
                "client-key": os.path.join(pki, "node.key")}))
        self.kubelet_port = free_port()
        config = os.path.join(s, "kubelet.yaml")
        with open(config, "w") as f:
            json.dump({
                "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                "cgroupDriver": "cgroupfs", "cgroupRoot": "/" + self.node, "failCgroupV1": False,
                "failSwapOn": False, "containerRuntimeEndpoint": "unix://" + self.containerd_sock,
                "address": self.node_ip, "port": self.kubelet_port, "readOnlyPort": 0,
                "healthzPort": 0,
                "tlsCertFile": os.path.join(pki, "kubelet-serving.crt"),
                "tlsPrivateKeyFile": os.path.join(pki, "kubelet-serving.key"),
                # kube-apiserver's calls (logs, exec) carry its client certificate; service
                # account tokens are checked with a TokenReview.
                "authentication": {"anonymous": {"enabled": False},
                                   "webhook": {"enabled": True},
                                   "x509": {"clientCAFile": os.path.join(pki, "ca.crt")}},
                "authorization": {"mode": "Webhook"},
                "podLogsDir": os.path.join(s, "pod-logs"),
                "volumePluginDir": os.path.join(s, "volume-plugins"),
                "resolvConf": "/etc/resolv.conf",
                "clusterDNS": [self.gateway], "clusterDomain": CLUSTER_DOMAIN,
                # This disk is shared and may be fuller than a node's: evict only when it is
                # really out of space, and never garbage-collect imported images (nothing can
                # pull them back).
                "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                                 "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
                "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
                # No KUBE-FIREWALL and canary chains in the machine's iptables (kube-proxy's
                # business, and there is none); the hint chain it still makes stop() removes.
                "makeIPTablesUtilChains": False,
                "serializeImagePulls": False, "maxPods": 50,
                "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s",
                "fileCheckFrequency": "5s", "httpCheckFrequency": "5s",
                **self.kubelet_config,
            }, f, indent=1)
        sysctl_dir = os.path.join(s, "sysctl")
        binds = []
        for key, value in KUBELET_SYSCTLS.items():
            fake = os.path.join(sysctl_dir, key.replace("/", "."))
            os.makedirs(sysctl_dir, exist_ok=True)
            with open(fake, "w") as f:
                f.write(value + "\n")
            binds.append("mount --bind %s /proc/sys/%s" % (fake, key))
        os.makedirs("/var/lib/kubelet", exist_ok=True)
        script = " && ".join(["mount --make-rprivate /proc", *binds,
                              "mount -t tmpfs -o size=1m kubelet-device-plugins /var/lib/kubelet"]
                             ) + ' && exec "$@"'
        self._spawn("kubelet", [
            self.node_paths["unshare"], "--mount", "--propagation", "unchanged", "--",
            "sh", "-c", script, "kubelet",
            self.node_paths["kubelet"], "--config=" + config, "--kubeconfig=" + self.node_kubeconfig,
            "--root-dir=" + root, "--cert-dir=" + os.path.join(s, "kubelet-pki"),
            "--hostname-override=" + self.node, "--node-ip=" + self.node_ip, "--v=2"])

    def _make_cgroup_root(self):
        """/<node> in every cgroup v1 hierarchy (and the unified one): the kubelet's cgroupRoot,
        which must exist; cpuset's needs the parent's cpus and mems."""
        self.cgroup_dirs = []
        for h in sorted(os.listdir("/sys/fs/cgroup")):
            base = os.path.join("/sys/fs/cgroup", h)
            if not os.path.ismount(base):
                continue
            d = os.path.join(base, self.node)
            os.makedirs(d, exist_ok=True)
            self.cgroup_dirs.append(d)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if os.path.exists(os.path.join(base, knob)):
                    with open(os.path.join(base, knob)) as f:
                        v = f.read().strip()
                    with open(os.path.join(d, knob), "w") as f:
                        f.write(v)

    # --- waits and clients ---------------------------------------------------------------------
    def wait_alive(self, predicate, what, deadline_s, process=None):
        """wait_for that also fails at once, with the process's log, when a process this cluster
        started has exited; on timeout the error names `process` and the end of its log."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited with %s while waiting for %s; log %s:\n%s"
                                       % (p.korovod_name, p.returncode, what, p.korovod_log,
                                          self._tail(p)))
            v = predicate()
            if v:
                return v
            time.sleep(0.3)
        p = next((p for p in self.procs if p.korovod_name == process), None)
        raise AssertionError("timed out after %ss waiting for %s%s" % (
            deadline_s, what, "; log %s:\n%s" % (p.korovod_log, self._tail(p, 30)) if p else ""))

    def wait_node_ready(self, deadline_s=120):
        def ready():
            node = self.get("/api/v1/nodes/" + self.node)
            conds = (node or {}).get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        self.wait_alive(ready, "node %s Ready" % self.node, deadline_s, "kubelet")

    def ctr(self, *args, check=True, timeout=120):
        """containerd's ctr against this node's containerd, in the CRI's namespace k8s.io."""
        r = subprocess.run([self.node_paths["ctr"], "-a", self.containerd_sock, "-n", "k8s.io",
                            *args], capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("ctr %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def import_image(self, archive, deadline_s=600):
        """Imports an image archive (docker-archive or OCI layout tar, as podman save or
        write_oci_image make) into the node's containerd and unpacks it; pods use it with
        imagePullPolicy Never or IfNotPresent (a tag other than latest). archive may also be
        "podman:<reference>": an image of podman's local storage, streamed (podman save |
        ctr images import -) without an archive on disk. Returns ctr's output."""
        if not archive.startswith("podman:"):
            return self.ctr("images", "import", archive, timeout=deadline_s).stdout
        ref = archive[len("podman:"):]
        with tempfile.TemporaryFile() as err:
            save = subprocess.Popen(["podman", "save", "--quiet", "--format", "docker-archive",
                                     ref], stdout=subprocess.PIPE, stderr=err, env=_podman_env())
            try:
                r = subprocess.run([self.node_paths["ctr"], "-a", self.containerd_sock, "-n",
                                    "k8s.io", "images", "import", "-"], stdin=save.stdout,
                                   capture_output=True, text=True, timeout=deadline_s)
            finally:
                save.stdout.close()
                if save.wait(60) != 0 or r.returncode != 0:
                    err.seek(0)
                    raise RuntimeError("podman save %s | ctr images import - failed (%s, %s): "
                                       "%s%s" % (ref, save.returncode, r.returncode,
                                                 err.read().decode(errors="replace"), r.stderr))
        return r.stdout

    def wait_pod_phase(self, name, phases=("Succeeded",), namespace="default", deadline_s=120):
        """Waits for pod `name` to reach one of `phases`; fails at once on a phase it cannot leave
        for them (Failed when waiting for Succeeded) with the pod's status."""
        path = "/api/v1/namespaces/%s/pods/%s" % (namespace, name)
        last = {}

        def reached():
            pod = self.get(path)
            last["pod"] = pod
            phase = (pod or {}).get("status", {}).get("phase")
            if phase in phases:
                return pod
            if phase in ("Succeeded", "Failed"):
                logs = self.kubectl("logs", "-n", namespace, name, "--all-containers",
                                    "--tail=30", check=False)
                raise AssertionError("pod %s is %s, not %s; its log (end):\n%s%s" % (
                    name, phase, "/".join(phases), logs.stdout, logs.stderr))
            return None
        try:
            return self.wait_alive(reached, "pod %s/%s %s" % (namespace, name, "/".join(phases)),
                                   deadline_s, "kubelet")
        except AssertionError as e:
            raise AssertionError("%s\npod status: %s" % (e, json.dumps(
                (last.get("pod") or {}).get("status"), indent=1))) from None

    # --- teardown ------------------------------------------------------------------------------
    def stop(self):
        """Kills the kubelet, every container and its shim, containerd and the control plane, and
        removes the mounts, the bridge, the cgroups and the node's folder."""
        kubelet = [p for p in self.procs if p.korovod_name == "kubelet"]
        for p in kubelet:
            _terminate(p)
        if self.containerd_sock and any(p.korovod_name == "containerd" and p.poll() is None
                                        for p in self.procs):
            r = self.ctr("tasks", "ls", "-q", check=False, timeout=30)
            for task in r.stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False, timeout=30)
            for task in r.stdout.split():
                self.ctr("tasks", "delete", "-f", task, check=False, timeout=30)
        super().stop()  # containerd, controllers, kube-apiserver, etcd
        for pid in self._shims():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.state:
            self._unmount_under(self.state)
        if self.dns:
            self.dns.stop()
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
        self._remove_cgroups()
        for cmd, table, chain in getattr(self, "_new_chains", []):
            _delete_chain(cmd, table, chain)
        if self._apiserver_chain:
            _delete_chain("iptables", "nat", APISERVER_CHAIN)
        for f in self._cni_results():
            try:
                os.remove(os.path.join(CNI_RESULTS, f))
            except OSError:
                pass
        for d in sorted(getattr(self, "_new_host_dirs", []), key=lambda d: -d.count("/")):
            try:
                os.rmdir(d)  # only when empty: the shims remove their sockets as they exit
            except OSError:
                pass
        if self.state:
            shutil.rmtree(self.state, ignore_errors=True)

    def _cni_results(self):
        """The names of libcni's cached results of this node's sandboxes."""
        try:
            names = os.listdir(CNI_RESULTS)
        except OSError:
            return []
        prefix = "korovod-%s-" % self.node
        ids = [n[len(prefix):].rsplit("-", 1)[0] for n in names if n.startswith(prefix)]
        return [n for n in names if n.startswith(prefix)] + \
            [n for n in names for i in ids if n.startswith("cni-loopback-%s-" % i)]

    def _shims(self):
        """Process ids of containerd shims started by this node's containerd."""
        pids = []
        if not self.containerd_sock:
            return pids
        for pid, argv in processes():
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and \
                    self.containerd_sock.encode() in argv:
                pids.append(pid)
        return pids

    @staticmethod
    def _mounts_under(path):
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        return [m for m in points if m == path or m.startswith(path.rstrip("/") + "/")]

    def _unmount_under(self, path):
        """Unmounts everything under path (pod volumes, overlay rootfs, netns), deepest first;
        a busy mount is detached (lazy unmount)."""
        for _ in range(5):
            mounts = self._mounts_under(path)
            if not mounts:
                return
            for m in sorted(mounts, key=lambda m: -m.count("/")):
                if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "-l", m], capture_output=True)

    def _remove_cgroups(self):
        for base in getattr(self, "cgroup_dirs", []):
            for d, _, _ in sorted(os.walk(base), key=lambda e: -e[0].count("/")):
                for _ in range(20):
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)  # the last processes are still leaving it

    def leftovers(self):
        """What teardown should have removed and is still there (empty when clean): shims,
        mounts under the node's folder, the bridge, the cgroups."""
        left = ["shim pid %d" % p for p in self._shims()]
        if self.state:
            left += ["mount " + m for m in self._mounts_under(self.state)]
            if os.path.exists(self.state):
                left.append("folder " + self.state)
        if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
            left.append("link " + BRIDGE)
        left += ["cgroup " + d for d in getattr(self, "cgroup_dirs", []) if os.path.exists(d)]
        left += ["file %s/%s" % (CNI_RESULTS, f) for f in self._cni_results()]
        left += ["%s -t %s chain %s" % c for c in getattr(self, "_new_chains", [])
                 if _chain_exists(*c)]
        if self._apiserver_chain and _chain_exists("iptables", "nat", APISERVER_CHAIN):
            left.append("iptables -t nat chain " + APISERVER_CHAIN)
        left += ["folder " + d for d in getattr(self, "_new_host_dirs", []) if os.path.exists(d)]
        left += ["process %s" % p.korovod_name for p in self.procs if p.poll() is None]
        return left


def _terminate(p, grace_s=10):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _chain_exists(cmd, table, chain):
    return subprocess.run([cmd, "-w", "10", "-t", table, "-S", chain],
                          capture_output=True).returncode == 0


def _delete_chain(cmd, table, chain):
    """Removes the rules that jump to `chain`, then the chain itself."""
    r = subprocess.run([cmd, "-w", "10", "-t", table, "-S"], capture_output=True, text=True)
    for rule in r.stdout.splitlines():
        parts = rule.split()
        if parts[:1] == ["-A"] and "-j" in parts and parts[parts.index("-j") + 1] == chain:
            subprocess.run([cmd, "-w", "10", "-t", table, "-D", *parts[1:]], capture_output=True)
    subprocess.run([cmd, "-w", "10", "-t", table, "-F", chain], capture_output=True)
    subprocess.run([cmd, "-w", "10", "-t", table, "-X", chain], capture_output=True)
