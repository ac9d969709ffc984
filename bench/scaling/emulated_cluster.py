#!/usr/bin/python3
"""Scaling efficiency on an emulated cluster (issue 16): H "hosts" as network namespaces on one
bridge, every link rate-shaped with tc, one rank per host that sleeps a GPU's (dilated) compute
time and exchanges the model's real gradient shapes through korovod, Horovod or torch DDP.
Read bench/scaling/README.md first. Stdlib only; run as root with /usr/bin/python3.

    emulated_cluster.py --hosts 1,2,4,8 --models resnet50 --engines korovod,horovod,ddp \
        --fusion off,on,autotune --warmup 2 --steps 5 --out /tmp/scaling.json

Time dilation D: the emulated link carries 25/D Gbit/s and a rank's compute takes D times the
published per-step GPU time, so compute : communication is that of a 25 Gbit/s cluster while the
CPU (two cores shared by every rank, sidecar and the kernel's TCP path) has D times the slack.
"""
import argparse
import atexit
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

REAL_RATE_GBIT = 25.0          # the emulated cluster's link: 25 Gbit/s (the Horovod paper's RoCE)
REAL_ONE_WAY_DELAY_US = 25.0   # a datacenter hop through one switch, TCP stack included (estimate)
# Forward+backward time of one step at batch 64 per GPU on an NVIDIA V100 (FP32). Estimates of the
# order of the published tf_cnn_benchmarks / NVIDIA numbers (ResNet-50 ~330 img/s -> ~195 ms,
# ResNet-101 ~195 img/s -> ~330 ms); not measured here. --compute-ms overrides.
GPU_STEP_MS = {"resnet50": 195.0, "resnet101": 330.0}
BATCH_PER_RANK = 64

NS_PREFIX = "ksc"
SUBNET = "10.214.0"
PROXY_PORT = 4199      # korovod-delay-proxy in each host namespace, when there is no sch_netem
PROXY_MARK = "0x4b"
ENGINES = ("korovod", "horovod", "ddp")
FUSIONS = ("off", "on", "autotune")


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stdout.strip()))
    return r


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        return "  (no log: %s)" % e
    return "".join("  | " + l for l in lines[-n:]).rstrip()


class Cluster:
    """H host namespaces + one bridge namespace; host i is 10.214.0.(i+1) on its eth0."""

    def __init__(self, hosts, rate_mbit, delay_us):
        self.delay_by = "netem"  # or "proxy": korovod-delay-proxy in every host (no sch_netem)
        self.proxy_bin = None
        self.proxies = []
        self.id = "%s%d" % (NS_PREFIX, os.getpid())
        self.br = self.id + "br"
        self.hosts = ["%sh%d" % (self.id, i) for i in range(hosts)]
        self.addrs = ["%s.%d" % (SUBNET, i + 1) for i in range(hosts)]
        self.rate_mbit = rate_mbit
        self.delay_us = delay_us
        self.made = []
        self.etc_dirs = []

    @staticmethod
    def remove_stale():
        out = sh("ip", "netns", "list", check=False).stdout
        for ns in re.findall(r"^(%s(\d+)(?:br|h\d+))\b" % NS_PREFIX, out, re.M):
            name, pid = ns
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                sh("ip", "netns", "del", name, check=False)
                shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)
            except PermissionError:
                pass

    def _shape(self, ns, dev, with_delay):
        # htb: one class at `rate` (ceil = rate) that all traffic falls into. quantum and burst are
        # set so a 64 KiB GSO segment passes in one go and htb does not warn.
        rate = "%gmbit" % self.rate_mbit
        sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
        sh("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
           "rate", rate, "ceil", rate, "burst", "128k", "cburst", "128k", "quantum", "65536")
        if with_delay and self.delay_us > 0 and self.delay_by == "netem":
            sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
               "netem", "delay", "%dus" % self.delay_us, "limit", "100000")

    def _delay_proxy(self, ns):
        """Every TCP connection this host opens to the cluster subnet goes through a local
        korovod-delay-proxy that holds each chunk for the delay, both directions (one D each way
        per connection, as netem on the NIC would give). Its own dials carry PROXY_MARK and pass."""
        sh("ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d",
           SUBNET + ".0/24", "-m", "mark", "!", "--mark", PROXY_MARK, "-j", "REDIRECT",
           "--to-ports", str(PROXY_PORT))
        p = subprocess.Popen(["ip", "netns", "exec", ns, self.proxy_bin, "--port", str(PROXY_PORT),
                              "--delay-us", "%d" % self.delay_us, "--mark", PROXY_MARK],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("korovod-delay-proxy did not start in %s" % ns)
        self.proxies.append(p)

    def up(self):
        sh("ip", "netns", "add", self.br)
        self.made.append(self.br)
        sh("ip", "-n", self.br, "link", "set", "lo", "up")
        sh("ip", "-n", self.br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.br, "link", "set", "br0", "up")
        for i, ns in enumerate(self.hosts):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", self.br, "link", "add", "port%d" % i, "type", "veth", "peer", "name",
               "eth0", "netns", ns)
            sh("ip", "-n", self.br, "link", "set", "port%d" % i, "master", "br0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", self.addrs[i] + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            # `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts: the machine's host
            # name resolves to this host's own address, as on a real cluster. Horovod 0.28.1 needs
            # it: its process-set Gloo contexts ignore HOROVOD_GLOO_IFACE and bind the address of
            # the host name (127.0.0.1 in /etc/hosts here, so ranks would dial themselves).
            d = os.path.join("/etc/netns", ns)
            os.makedirs(d, exist_ok=True)
            self.etc_dirs.append(d)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write("127.0.0.1 localhost\n%s %s h%d\n" % (self.addrs[i], os.uname().nodename,
                                                              i))
                for j, a in enumerate(self.addrs):
                    if j != i:
                        f.write("%s h%d\n" % (a, j))
            if self.rate_mbit > 0:
                self._shape(ns, "eth0", True)              # host -> switch (NIC transmit)
                self._shape(self.br, "port%d" % i, False)  # switch -> host (NIC receive)
            if self.delay_us > 0 and self.delay_by == "proxy":
                self._delay_proxy(ns)

    def down(self):
        for p in self.proxies:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        self.proxies = []
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)
        self.made = []
        for d in self.etc_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.etc_dirs = []
        try:
            os.rmdir("/etc/netns")  # only when empty (nobody else's namespaces use it)
        except OSError:
            pass

    def measure_link(self, seconds=2.0):
        """Mbit/s of one TCP stream h1 -> h0 over the shaped links (a check of the shaping)."""
        if len(self.hosts) < 2:
            return None
        port = 5999
        server = ("import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
                  "socket.SO_REUSEADDR,1);s.bind(('',%d));s.listen(1);s.settimeout(20)\n"
                  "c,_=s.accept();c.settimeout(20);n=0;t0=None\nwhile True:\n"
                  " b=c.recv(1<<20)\n if not b: break\n if t0 is None: t0=time.time()\n"
                  " n+=len(b)\nprint(n*8/(time.time()-t0)/1e6)\n" % port)
        client = ("import socket,time\nfor i in range(100):\n try:\n"
                  "  c=socket.create_connection(('%s',%d),timeout=2);break\n"
                  " except OSError: time.sleep(0.1)\nb=b'x'*(1<<20);t=time.time()+%f\n"
                  "while time.time()<t: c.sendall(b)\nc.close()\n"
                  % (self.addrs[0], port, seconds))
        srv = subprocess.Popen(["ip", "netns", "exec", self.hosts[0], sys.executable, "-c", server],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            subprocess.run(["ip", "netns", "exec", self.hosts[1], sys.executable, "-c", client],
                           timeout=seconds + 30, check=True, stdout=subprocess.DEVNULL)
            out, _ = srv.communicate(timeout=30)
            return float(out.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError) as e:
            log("link check failed: %s" % e)
            return None
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()


class Procs:
    """Every process this driver started, each in its own process group, killed on exit."""

    def __init__(self):
        self.live = []

    def start(self, ns, cmd, env, logpath, what):
        f = open(logpath, "w")
        p = subprocess.Popen(["ip", "netns", "exec", ns] + cmd, env=env, stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        f.close()
        p.what, p.logpath = what, logpath
        self.live.append(p)
        return p

    def stop(self, procs, grace=5.0):
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.time() + grace
        for p in procs:
            try:
                p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.live = [p for p in self.live if p not in procs]

    def stop_all(self):
        self.stop(list(self.live), grace=2.0)


class LaunchError(Exception):
    pass


EXTRA_ENV = {}


def base_env():
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TERM") if k in os.environ}
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env["OMP_NUM_THREADS"] = "1"
    env.update(EXTRA_ENV)
    return env


def fail(procs_to_show, msg):
    parts = [msg]
    for p in procs_to_show:
        rc = p.poll()
        parts.append("--- %s (%s), log %s:\n%s" % (
            p.what, "running" if rc is None else "exit %d" % rc, p.logpath, tail(p.logpath)))
    raise LaunchError("\n".join(parts))


def wait_all(trainers, others, deadline, label):
    """Waits for every trainer to exit 0; any failure (or a helper dying) is a LaunchError."""
    while True:
        pending = [p for p in trainers if p.poll() is None]
        for p in trainers:
            if p.poll() not in (None, 0):
                fail([p] + [q for q in others], "%s: %s exited with code %d" %
                     (label, p.what, p.returncode))
        for q in others:
            if q.poll() is not None:
                fail([q] + pending, "%s: %s exited (code %d) while trainers ran" %
                     (label, q.what, q.returncode))
        if not pending:
            return
        if time.time() > deadline:
            fail(pending + list(others), "%s: deadline passed; still running: %s" %
                 (label, ", ".join(p.what for p in pending)))
        time.sleep(0.5)


def result_of(trainer):
    with open(trainer.logpath, errors="replace") as f:
        for line in f:
            if line.startswith("RESULT "):
                return json.loads(line[7:])
    fail([trainer], "%s printed no RESULT line" % trainer.what)


def run_trial(args, cluster, procs, engine, fusion, hosts, shapes, compute_ms, work, seq):
    label = "%s fusion=%s hosts=%d" % (engine, fusion, hosts)
    tdir = os.path.join(work, "t%03d-%s-%s-%d" % (seq, engine, fusion, hosts))
    os.makedirs(tdir)
    trainer_args = ["--shapes", shapes, "--compute-ms", "%.3f" % compute_ms,
                    "--warmup", str(args.warmup), "--steps", str(args.steps)]
    emulator = os.path.join(HERE, "step_emulator.py")
    port = 20000 + seq * 2
    started = []
    try:
        if engine == "korovod":
            key = os.path.join(tdir, "job.key")
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (os.urandom(32).hex() + "\n").encode())
            os.close(fd)
            world = os.path.join(tdir, "world")
            with open(world, "w") as f:
                for i in range(hosts):
                    f.write("rank=%d host=h%d port=%d addr=eth0/%s\n" %
                            (i, i, port, cluster.addrs[i]))
            shm_prefix = "/%s%dt%d-" % (NS_PREFIX, os.getpid(), seq)
            sidecars = []
            for i in range(hosts):
                env = base_env()
                env.update(KOROVOD_RANK=str(i), KOROVOD_SIZE=str(hosts), KOROVOD_LOCAL_RANK="0",
                           KOROVOD_LOCAL_SIZE="1", KOROVOD_CROSS_RANK=str(i),
                           KOROVOD_CROSS_SIZE=str(hosts), KOROVOD_WORLD_FILE=world,
                           KOROVOD_IFACE="eth0", KOROVOD_JOB_KEY_FILE=key,
                           KOROVOD_SOCKET=os.path.join(tdir, "rank%d.sock" % i),
                           KOROVOD_SHM_PREFIX=shm_prefix,
                           KOROVOD_START_TIMEOUT_SECONDS=str(int(args.start_timeout)))
                if fusion == "off":
                    env["KOROVOD_FUSION_THRESHOLD"] = "0"
                elif fusion == "autotune":
                    env["KOROVOD_AUTOTUNE"] = "1"
                    env["KOROVOD_AUTOTUNE_LOG"] = os.path.join(tdir, "autotune%d.csv" % i)
                p = procs.start(cluster.hosts[i], [args.sidecar], env,
                                os.path.join(tdir, "sidecar%d.log" % i),
                                "korovod sidecar rank %d (host h%d)" % (i, i))
                sidecars.append(p)
                started.append(p)
            end = time.time() + args.start_timeout
            for i, p in enumerate(sidecars):
                sock = os.path.join(tdir, "rank%d.sock" % i)
                while not os.path.exists(sock):
                    if p.poll() is not None:
                        fail([p], "%s: %s exited (code %d) before creating %s" %
                             (label, p.what, p.returncode, sock))
                    if time.time() > end:
                        fail([p], "%s: %s did not create %s within %d s" %
                             (label, p.what, sock, args.start_timeout))
                    time.sleep(0.1)
            trainers = []
            for i in range(hosts):
                env = base_env()
                env.update(PYTHONPATH=args.pysrc + ":" + os.path.join(args.build, "python"),
                           KOROVOD_SOCKET=os.path.join(tdir, "rank%d.sock" % i),
                           KOROVOD_SHM_PREFIX=shm_prefix, KOROVOD_RANK=str(i),
                           KOROVOD_SIZE=str(hosts), HOROVOD_RANK=str(i), HOROVOD_SIZE=str(hosts),
                           HOROVOD_LOCAL_RANK="0", HOROVOD_LOCAL_SIZE="1",
                           HOROVOD_CROSS_RANK=str(i), HOROVOD_CROSS_SIZE=str(hosts),
                           KOROVOD_CONNECT_TIMEOUT=str(int(args.start_timeout)))
                p = procs.start(cluster.hosts[i],
                                [args.python, emulator, "--api", "horovod"] + trainer_args, env,
                                os.path.join(tdir, "trainer%d.log" % i),
                                "korovod trainer rank %d (host h%d)" % (i, i))
                trainers.append(p)
                started.append(p)
            helpers = sidecars
        elif engine == "horovod":
            rdv = procs.start(cluster.hosts[0], [args.horovod_python,
                                                 os.path.join(HERE, "hvd_rendezvous.py"),
                                                 str(hosts)],
                              base_env(), os.path.join(tdir, "rendezvous.log"),
                              "horovod rendezvous server (host h0)")
            started.append(rdv)
            end = time.time() + args.start_timeout
            rport = None
            while rport is None:
                with open(rdv.logpath, errors="replace") as f:
                    m = re.search(r"^PORT (\d+)$", f.read(), re.M)
                if m:
                    rport = m.group(1)
                elif rdv.poll() is not None or time.time() > end:
                    fail([rdv], "%s: the Gloo rendezvous server did not start" % label)
                else:
                    time.sleep(0.2)
            trainers = []
            for i in range(hosts):
                env = base_env()  # no PYTHONPATH: korovod's shim must not shadow Horovod
                env.update(HOROVOD_GLOO_RENDEZVOUS_ADDR=cluster.addrs[0],
                           HOROVOD_GLOO_RENDEZVOUS_PORT=rport, HOROVOD_CONTROLLER="gloo",
                           HOROVOD_CPU_OPERATIONS="gloo", HOROVOD_GLOO_IFACE="eth0",
                           HOROVOD_HOSTNAME="h%d" % i, HOROVOD_RANK=str(i),
                           HOROVOD_SIZE=str(hosts), HOROVOD_LOCAL_RANK="0",
                           HOROVOD_LOCAL_SIZE="1", HOROVOD_CROSS_RANK=str(i),
                           HOROVOD_CROSS_SIZE=str(hosts),
                           HOROVOD_GLOO_TIMEOUT_SECONDS=str(int(args.start_timeout)))
                if fusion == "off":
                    env["HOROVOD_FUSION_THRESHOLD"] = "0"
                elif fusion == "autotune":
                    env["HOROVOD_AUTOTUNE"] = "1"
                    env["HOROVOD_AUTOTUNE_LOG"] = os.path.join(tdir, "autotune%d.csv" % i)
                p = procs.start(cluster.hosts[i],
                                [args.horovod_python, emulator, "--api", "horovod"] +
                                trainer_args, env, os.path.join(tdir, "trainer%d.log" % i),
                                "horovod trainer rank %d (host h%d)" % (i, i))
                trainers.append(p)
                started.append(p)
            helpers = [rdv]
        else:  # ddp
            trainers = []
            for i in range(hosts):
                env = base_env()
                env.update(RANK=str(i), WORLD_SIZE=str(hosts), GLOO_SOCKET_IFNAME="eth0",
                           DDP_INIT="tcp://%s:%d" % (cluster.addrs[0], port))
                p = procs.start(cluster.hosts[i],
                                [args.python, emulator, "--api", "ddp", "--ddp-buckets",
                                 fusion] + trainer_args, env,
                                os.path.join(tdir, "trainer%d.log" % i),
                                "ddp trainer rank %d (host h%d)" % (i, i))
                trainers.append(p)
                started.append(p)
            helpers = []
        total_steps = args.warmup + args.steps
        link_Bps = cluster.rate_mbit * 1e6 / 8 if cluster.rate_mbit > 0 else 1e9
        worst_comm = 3.0 * 2.0 * shapes_bytes(shapes) / link_Bps
        budget = args.start_timeout + 60 + total_steps * (compute_ms / 1e3 * 1.2 + worst_comm)
        if args.trial_timeout:
            budget = args.trial_timeout
        wait_all(trainers, helpers, time.time() + budget, label)
        row = result_of(trainers[0])
        row["_logs"] = tdir
        if EXTRA_ENV:
            row["env"] = dict(EXTRA_ENV)  # e.g. KOROVOD_COLLECTIVE_LANES of a comparison
        return row
    finally:
        procs.stop(started)
        if engine == "korovod":
            for name in os.listdir("/dev/shm"):
                if name.startswith("%s%dt%d-" % (NS_PREFIX, os.getpid(), seq)):
                    try:
                        os.unlink(os.path.join("/dev/shm", name))
                    except OSError:
                        pass


def snapshot_build(build, work, python, lock_timeout=900):
    """Copies the sidecar, gradbench and the Python client out of the build tree, holding the
    build lock (/tmp/korovod-build.lock, as `flock` takes it) so no rebuild is half-way: a long run
    then uses one build throughout even if the tree is rebuilt meanwhile."""
    import fcntl
    dst = os.path.join(work, "build")
    with open("/tmp/korovod-build.lock", "a") as lock:
        end = time.time() + lock_timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.time() > end:
                    raise SystemExit("the build lock /tmp/korovod-build.lock stayed held for "
                                     "%d s; pass --no-snapshot to use %s as it is" %
                                     (lock_timeout, build))
                time.sleep(2)
        try:
            os.makedirs(os.path.join(dst, "bin"))
            for f in ("korovod-sidecar", "korovod-gradbench", "korovod-delay-proxy"):
                shutil.copy2(os.path.join(build, "bin", f), os.path.join(dst, "bin", f))
            shutil.copytree(os.path.join(build, "python"), os.path.join(dst, "python"))
            shutil.copytree(os.path.join(REPO, "python"), os.path.join(dst, "src-python"),
                            ignore=shutil.ignore_patterns("__pycache__"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    env = base_env()
    env["PYTHONPATH"] = os.path.join(dst, "src-python") + ":" + os.path.join(dst, "python")
    r = subprocess.run([python, "-c", "import korovod._client"], env=env, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise SystemExit("the korovod client copied from %s does not load:\n%s" %
                         (build, r.stdout.strip()))
    log("snapshot of %s (sidecar, gradbench, python client) in %s" % (build, dst))
    return dst


_bytes_cache = {}


def shapes_bytes(path):
    if path not in _bytes_cache:
        with open(path) as f:
            _bytes_cache[path] = 4 * sum(math.prod(t["shape"]) for t in json.load(f)["tensors"])
    return _bytes_cache[path]


def fmt_eff(r):
    if r is None:
        return "-"
    if "error" in r:
        return "FAILED"
    eff = r.get("efficiency")
    s = "%.1f s" % (r["step_ms"] / 1e3)
    return ("%.1f%% (%s)" % (eff * 100, s)) if eff is not None else "(%s)" % s


def table(rows, hosts_list):
    out = []
    groups = sorted({(r["model"], r["compute_ms"], r["dilation"]) for r in rows})
    for model, compute_ms, dil in groups:
        mr = [r for r in rows if (r["model"], r["compute_ms"], r["dilation"]) ==
              (model, compute_ms, dil)]
        if not mr:
            continue
        r0 = mr[0]
        out.append("Model %s, dilation D=%g: link %g Mbit/s (= %g Gbit/s / D), delay %s us, "
                   "compute %.0f ms/step (= %.0f ms GPU step time x D), batch %d/rank." % (
                       model, r0["dilation"], r0["rate_mbit"], REAL_RATE_GBIT,
                       r0["delay_us"], r0["compute_ms"], r0["compute_ms"] / r0["dilation"],
                       BATCH_PER_RANK))
        out.append("Efficiency = step_time(1 host) / step_time(N hosts) (median step, max over "
                   "ranks); in parentheses the emulated (dilated) step time.")
        out.append("")
        out.append("| engine | fusion | " + " | ".join("%d host%s" % (h, "s" if h > 1 else "")
                                                     for h in hosts_list) + " |")
        out.append("|---|---|" + "---|" * len(hosts_list))
        for eng in ENGINES:
            for fu in FUSIONS:
                cells = []
                for h in hosts_list:
                    m = [r for r in mr if r["engine"] == eng and r["fusion"] == fu and
                         r["hosts"] == h]
                    cells.append(fmt_eff(m[-1] if m else None))
                if any(c != "-" for c in cells):
                    out.append("| %s | %s | %s |" % (eng, fu, " | ".join(cells)))
        hmax = max(hosts_list)
        on = [r for r in mr if r["engine"] == "korovod" and r["fusion"] == "on" and
              r["hosts"] == hmax and "error" not in r]
        off = [r for r in mr if r["engine"] == "korovod" and r["fusion"] == "off" and
               r["hosts"] == hmax and "error" not in r]
        if on and off:
            out.append("")
            out.append("korovod at %d hosts: step time fusion off / on = %.3f" %
                       (hmax, off[-1]["step_ms"] / on[-1]["step_ms"]))
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="1,2,4,8")
    ap.add_argument("--models", default="resnet50")
    ap.add_argument("--engines", default="korovod,horovod,ddp")
    ap.add_argument("--fusion", default="off,on,autotune",
                    help="off, on (engine default threshold / DDP 25 MiB buckets), autotune "
                         "(korovod, Horovod; DDP has none and is skipped)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dilation", type=float, default=100.0, help="time-dilation factor D")
    ap.add_argument("--rate-mbit", type=float, default=None,
                    help="override the link rate (default 25000/D Mbit/s; 0 = unshaped)")
    ap.add_argument("--delay-us", type=float, default=None,
                    help="one-way delay (default 25 us x D; netem where the kernel has it, else "
                         "korovod-delay-proxy)")
    ap.add_argument("--compute-ms", type=float, default=None,
                    help="override the GPU step time before dilation (default per model)")
    ap.add_argument("--out", default="scaling.json")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter for korovod and DDP")
    ap.add_argument("--horovod-python",
                    default=os.path.join(REPO, ".deps", "horovod-venv", "bin", "python"))
    ap.add_argument("--start-timeout", type=float, default=90.0)
    ap.add_argument("--trial-timeout", type=float, default=0.0, help="seconds; 0 = estimated")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use --build in place instead of a private copy taken at start")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="extra variable for every process started (e.g. HOROVOD_LOG_LEVEL=debug)")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="only print the markdown table of earlier --out files; run nothing")
    args = ap.parse_args()
    if args.table:
        rows = []
        for path in args.table:
            with open(path) as f:
                rows += json.load(f)
        print(table(rows, sorted({r["hosts"] for r in rows})))
        return 0
    for kv in args.env:
        k, _, v = kv.partition("=")
        EXTRA_ENV[k] = v

    if os.geteuid() != 0:
        raise SystemExit("emulated_cluster.py needs root (network namespaces, tc)")
    hosts_list = sorted({int(h) for h in args.hosts.split(",") if h})
    models = [m for m in args.models.split(",") if m]
    engines = [e for e in args.engines.split(",") if e]
    fusions = [f for f in args.fusion.split(",") if f]
    for e in engines:
        if e not in ENGINES:
            raise SystemExit("unknown engine %r (%s)" % (e, ",".join(ENGINES)))
    for f in fusions:
        if f not in FUSIONS:
            raise SystemExit("unknown fusion mode %r (%s)" % (f, ",".join(FUSIONS)))
    for m in models:
        if m not in GPU_STEP_MS and args.compute_ms is None:
            raise SystemExit("no GPU step time for %r: pass --compute-ms" % m)
    for f in ("bin/korovod-sidecar", "bin/korovod-gradbench"):
        if not os.access(os.path.join(args.build, f), os.X_OK):
            raise SystemExit("no %s (build korovod first)" % os.path.join(args.build, f))
    if "horovod" in engines and not os.access(args.horovod_python, os.X_OK):
        raise SystemExit("no Horovod interpreter %s (scripts/install-deps.sh builds it)" %
                         args.horovod_python)

    D = args.dilation
    rate = args.rate_mbit if args.rate_mbit is not None else REAL_RATE_GBIT * 1000.0 / D
    delay = args.delay_us if args.delay_us is not None else REAL_ONE_WAY_DELAY_US * D
    if rate == 0:
        delay = 0.0  # unshaped: nothing emulated, a measure of the CPU floor

    work = tempfile.mkdtemp(prefix="korovod-scaling-")
    args.pysrc = os.path.join(REPO, "python")
    if not args.no_snapshot:
        args.build = snapshot_build(args.build, work, args.python)
        args.pysrc = os.path.join(args.build, "src-python")
    args.sidecar = os.path.join(args.build, "bin", "korovod-sidecar")
    gradbench = os.path.join(args.build, "bin", "korovod-gradbench")
    procs = Procs()
    Cluster.remove_stale()
    cluster = Cluster(max(hosts_list), rate, delay)

    def cleanup():
        procs.stop_all()
        cluster.down()
        if not args.keep_logs:
            shutil.rmtree(work, ignore_errors=True)

    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))

    # netem (delay) is optional in kernels: probe it on a throwaway veth in a namespace of ours.
    if rate > 0 and delay > 0:
        probe = cluster.br
        ok = False
        if sh("ip", "netns", "add", probe, check=False).returncode == 0:
            ok = sh("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name",
                    "probe1", check=False).returncode == 0 and sh(
                "tc", "-n", probe, "qdisc", "add", "dev", "probe0", "root", "netem", "delay",
                "1ms", check=False).returncode == 0
            sh("ip", "netns", "del", probe, check=False)
        if not ok:
            # No netem here: delay every cluster TCP connection in a user-space relay instead.
            cluster.delay_by = "proxy"
            cluster.proxy_bin = os.path.join(args.build, "bin", "korovod-delay-proxy")
            if not os.access(cluster.proxy_bin, os.X_OK):
                raise SystemExit("no sch_netem in this kernel and no %s to delay with instead" %
                                 cluster.proxy_bin)
            log("no sch_netem in this kernel: one-way delay %g us applied by korovod-delay-proxy "
                "(iptables REDIRECT of each host's cluster TCP connections)" % delay)
        cluster.delay_us = delay
    cluster.up()
    measured = cluster.measure_link()
    log("cluster %s: %d hosts, bridge %s, link %g Mbit/s each way (htb), delay %g us; one TCP "
        "stream h1->h0 measured %s Mbit/s; work dir %s" % (
            cluster.id, len(cluster.hosts), cluster.br, rate, delay,
            "%.0f" % measured if measured else "?", work))

    rows = []
    seq = 0

    def save():
        with open(args.out, "w") as f:
            json.dump([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows], f,
                      indent=1)

    for model in models:
        shapes = os.path.join(work, "%s.json" % model)
        with open(shapes, "w") as f:
            subprocess.run([gradbench, "--print-shapes", model], stdout=f, check=True, timeout=60)
        gpu_ms = args.compute_ms if args.compute_ms is not None else GPU_STEP_MS[model]
        compute_ms = gpu_ms * D
        nbytes = shapes_bytes(shapes)
        hmax = max(hosts_list)
        ring = 2.0 * (hmax - 1) / hmax * nbytes * 8
        log("%s: %.1f MiB of gradients; compute %.0f ms/step emulated (%.0f ms x D=%g); ring "
            "allreduce at %d hosts needs %.1f s on the link (%.1f ms at %g Gbit/s)" % (
                model, nbytes / 2**20, compute_ms, gpu_ms, D, hmax,
                ring / (rate * 1e6) if rate else 0, ring / (REAL_RATE_GBIT * 1e9) * 1e3,
                REAL_RATE_GBIT))
        for fusion in fusions:
            for engine in engines:
                if engine == "ddp" and fusion == "autotune":
                    continue
                base = None
                for hosts in hosts_list:
                    seq += 1
                    label = "%s %s fusion=%s hosts=%d" % (model, engine, fusion, hosts)
                    log("start %s" % label)
                    t0 = time.time()
                    common = dict(engine=engine, model=model, hosts=hosts, fusion=fusion,
                                  dilation=D, rate_mbit=rate, delay_us=delay,
                                  link_measured_mbit=measured,
                                  rate="%g Mbit/s (= %g Gbit/s / %g)" % (rate, REAL_RATE_GBIT, D),
                                  delay="%g us" % delay, delay_by=cluster.delay_by if delay else
                                  None, gpu_step_ms=gpu_ms,
                                  batch_per_rank=BATCH_PER_RANK,
                                  peer={"ddp": "torch-ddp"}.get(engine, engine),
                                  transport="tcp", ranks=hosts, bytes=nbytes,
                                  compute_ms=compute_ms)
                    try:
                        r = run_trial(args, cluster, procs, engine, fusion, hosts, shapes,
                                      compute_ms, work, seq)
                        r.update(common)
                        if "error" not in r:
                            r["algbw_gbps"] = nbytes / (r["step_ms"] / 1e3) / 1e9
                            r["busbw_gbps"] = r["algbw_gbps"] * 2 * (hosts - 1) / hosts
                            r["efficiency_vs_compute"] = round(compute_ms / r["step_ms"], 4)
                            if hosts == 1:
                                base = r["step_ms"]
                            r["efficiency"] = (round(base / r["step_ms"], 4)
                                               if base is not None else None)
                            r["imgs_per_s_emulated"] = round(
                                hosts * BATCH_PER_RANK / (r["step_ms"] / 1e3) * D, 1)
                    except LaunchError as e:
                        log("FAILED %s\n%s" % (label, e))
                        r = dict(common, error=str(e).splitlines()[0])
                    r["wall_s"] = round(time.time() - t0, 1)
                    rows.append(r)
                    save()
                    if "error" not in r:
                        log("done %s: step %.0f ms (median of %s), efficiency %s, %.0f s" % (
                            label, r["step_ms"], r["step_ms_all"],
                            "%.3f" % r["efficiency"] if r["efficiency"] is not None else "-",
                            r["wall_s"]))
    md = table(rows, hosts_list)
    print(md)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md + "\n")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
