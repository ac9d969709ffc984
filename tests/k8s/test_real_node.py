"""Pods on a real node (real_node.RealNodeCluster): the pinned kubelet, kube-scheduler and
kube-controller-manager with Debian's containerd + runc. A pod built from a tiny local image (the
machine's static busybox) is scheduled, run to Succeeded and its log read through kube-apiserver
and the kubelet (kubectl logs); a server pod's IP is reachable from the machine and a Service's
endpoints list it, and kubectl exec reaches into it; a pod whose owner is deleted is removed by
the garbage collector; pods find each other by name through the cluster DNS and reach
kube-apiserver in-cluster. Teardown leaves no process, mount, link, cgroup or iptables chain
behind."""
import os
import shutil
import tempfile
import time
import urllib.request

import pytest

from cluster import require_binaries
from real_node import host_program_files, require_node_binaries, running, write_oci_image

BUSYBOX = "docker.io/korovod-test/busybox:1"
OPENSSL = "docker.io/korovod-test/openssl:1"  # busybox + the machine's openssl and its libraries
BUSYBOX_APPLETS = ("sh", "cat", "echo", "sleep", "httpd", "hostname", "wget")


@pytest.fixture(scope="module")
def node():
    require_binaries()
    require_node_binaries()
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("no /bin/busybox (busybox-static) for the test image")
    with tempfile.TemporaryDirectory(prefix="korovod-real-node-") as d:
        image = write_oci_image(
            os.path.join(d, "busybox.tar"), BUSYBOX, {"/bin/busybox": (busybox, 0o755)},
            symlinks={"/bin/" + a: "busybox" for a in BUSYBOX_APPLETS}, cmd=["/bin/sh"])
        files = {"/bin/busybox": (busybox, 0o755)}
        files.update(host_program_files("openssl"))
        tls = write_oci_image(
            os.path.join(d, "openssl.tar"), OPENSSL, files,
            symlinks={"/bin/" + a: "busybox" for a in BUSYBOX_APPLETS}, cmd=["/bin/sh"])
        with running(d, images=[image, tls]) as c:
            print("real node Ready in %.1fs" % c.start_seconds)
            yield c


def _pod(name, command, labels=None, owner=None):
    meta = {"name": name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                        "command": command}]}}


def test_pod_runs_to_completion_and_its_log_is_readable(node):
    t0 = time.monotonic()
    # The service-account token volume is mounted by the kubelet in its own mount namespace:
    # reading it in the container shows that the mount reached containerd's side.
    code, body = node.request("POST", "/api/v1/namespaces/default/pods", _pod("hello", [
        "sh", "-c", "echo hello from $(hostname); "
                    "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo"]))
    assert code == 201, body
    pod = node.wait_pod_phase("hello", ("Succeeded",), deadline_s=120)
    print("pod hello: created to Succeeded in %.1fs" % (time.monotonic() - t0))
    assert pod["spec"]["nodeName"] == node.node
    assert pod["status"]["podIP"].startswith("10.244.0."), pod["status"]
    log = node.kubectl("logs", "hello").stdout
    assert log.split("\n")[:2] == ["hello from hello", "default"], log


def test_service_endpoints_pod_ip_and_exec(node):
    labels = {"app": "web"}
    code, body = node.request("POST", "/api/v1/namespaces/default/pods", _pod("web", [
        "sh", "-c", "mkdir -p /www && echo served-by-pod > /www/index.html && "
                    "exec httpd -f -p 8080 -h /www"], labels=labels))
    assert code == 201, body
    code, body = node.request("POST", "/api/v1/namespaces/default/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}})
    assert code == 201, body
    pod = node.wait_pod_phase("web", ("Running",), deadline_s=120)
    ip = pod["status"]["podIP"]

    def served():
        try:
            with urllib.request.urlopen("http://%s:8080/" % ip, timeout=2) as r:
                return r.read().decode()
        except OSError:
            return None
    # The machine reaches the pod's IP over the bridge (as kube-apiserver does a webhook's).
    assert node.wait_for(served, "http://%s:8080/ from the machine" % ip, 30) == "served-by-pod\n"

    def endpoint_ips():
        ep = node.get("/api/v1/namespaces/default/endpoints/web") or {}
        return [a["ip"] for s in ep.get("subsets", []) for a in s.get("addresses", [])]
    assert node.wait_for(endpoint_ips, "endpoints of Service web", 60) == [ip]

    def slice_ips():
        sl = node.get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
                      "?labelSelector=kubernetes.io/service-name%3Dweb") or {}
        return [a for s in sl.get("items", []) for e in s.get("endpoints") or []
                for a in e["addresses"]]
    assert node.wait_for(slice_ips, "EndpointSlice of Service web", 60) == [ip]
    # kubectl exec: kube-apiserver -> kubelet -> containerd's stream server.
    assert node.kubectl("exec", "web", "--", "cat", "/www/index.html").stdout == "served-by-pod\n"


def test_pod_of_a_deleted_owner_is_garbage_collected(node):
    code, owner = node.request("POST", "/api/v1/namespaces/default/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    assert code == 201, owner
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"]}
    code, body = node.request("POST", "/api/v1/namespaces/default/pods",
                              _pod("owned", ["sleep", "3600"], owner=ref))
    assert code == 201, body
    node.wait_pod_phase("owned", ("Running",), deadline_s=120)
    code, body = node.request("DELETE", "/api/v1/namespaces/default/configmaps/owner")
    assert code == 200, body
    # The garbage collector deletes the pod; the kubelet stops its container and the pod goes.
    node.wait_alive(lambda: node.get("/api/v1/namespaces/default/pods/owned") is None,
                    "pod owned to be garbage-collected and removed", 90,
                    "kube-controller-manager")


def test_pods_resolve_a_headless_service_hostname(node):
    """As HorovodJob workers find rank 0: <host>.<service>.<ns>.svc.cluster.local through the
    cluster DNS (the kubelet's clusterDNS), for a pod not yet ready."""
    peer = _pod("peer", ["sh", "-c", "mkdir -p /www && echo peer-0 > /www/index.html && "
                                     "exec httpd -f -p 8080 -h /www"], labels={"app": "peers"})
    peer["spec"].update({"hostname": "peer-0", "subdomain": "peers"})
    code, body = node.request("POST", "/api/v1/namespaces/default/pods", peer)
    assert code == 201, body
    code, body = node.request("POST", "/api/v1/namespaces/default/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"app": "peers"}, "ports": [{"port": 1234}]}})
    assert code == 201, body
    ip = node.wait_pod_phase("peer", ("Running",), deadline_s=120)["status"]["podIP"]
    fqdn = "peer-0.peers.default.svc.cluster.local"
    node.wait_for(lambda: node.dns.resolve(fqdn) == [ip], "%s -> %s in the cluster DNS"
                  % (fqdn, ip), 60)
    code, body = node.request("POST", "/api/v1/namespaces/default/pods", _pod("resolver", [
        "sh", "-c", "cat /etc/resolv.conf && nslookup -type=a %s && wget -qO- http://%s:8080/"
                    % (fqdn, fqdn)]))
    assert code == 201, body
    node.wait_pod_phase("resolver", ("Succeeded",), deadline_s=120)
    log = node.kubectl("logs", "resolver").stdout
    assert "nameserver %s" % node.gateway in log, log
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in log, log
    assert "Address: %s" % ip in log, log
    assert log.endswith("\npeer-0\n"), log  # pod to pod, by name


def test_pod_reaches_the_apiserver_in_cluster(node):
    """An in-cluster client (as the operator in a pod would be): kubernetes.default.svc through
    the cluster DNS and the ClusterIP's DNAT rule, the service-account token, the CA from the
    kube-root-ca.crt ConfigMap (busybox's wget does not check certificates)."""
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    pod = _pod("incluster", [
        "sh", "-c", "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
                    "(printf 'GET /api HTTP/1.0\\r\\nAuthorization: Bearer %%s\\r\\n\\r\\n' "
                    "\"$(cat %s/token)\"; sleep 3) | openssl s_client -quiet -connect "
                    "kubernetes.default.svc:443 -servername kubernetes.default.svc "
                    "-CAfile %s/ca.crt -verify_return_error -verify_hostname "
                    "kubernetes.default.svc 2>/dev/null" % (sa, sa)])
    pod["spec"]["containers"][0]["image"] = OPENSSL
    code, body = node.request("POST", "/api/v1/namespaces/default/pods", pod)
    assert code == 201, body
    node.wait_pod_phase("incluster", ("Succeeded",), deadline_s=120)
    log = node.kubectl("logs", "incluster").stdout
    assert log.startswith("10.96.0.1:443\nHTTP/1.0 200 OK"), log
    assert '"kind":"APIVersions"' in log.replace(" ", ""), log
