"""korovod.torch / horovod.torch end to end: each test runs `korovodrun -np N python3 script`.

Environment: KOROVOD_BUILD_DIR (default <repo>/build) holds bin/korovodrun, bin/korovod-sidecar
and python/korovod/_client*.so; PYTHON (default the running interpreter).
"""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KOROVOD_BUILD_DIR", os.path.join(REPO, "build"))
KOROVODRUN = os.path.join(BUILD, "bin", "korovodrun")
PYTHON = os.environ.get("PYTHON", sys.executable)


def _env():
    env = dict(os.environ)
    paths = [os.path.join(REPO, "python"), os.path.join(BUILD, "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def world_sizes(*nps):
    """The world sizes a test runs at: all of `nps`, or under KOROVOD_TEST_WORLD_SIZES=smallest
    (the *_torch_newest entries) the first alone: what a second torch could break shows at any
    size, the engine's paths at each size are the first torch's to cover, and CI's time is
    limited."""
    if os.environ.get("KOROVOD_TEST_WORLD_SIZES") == "smallest":
        return list(nps[:1])
    return list(nps)


def run(np_, script, *args, timeout=300, env=None):
    cmd = [KOROVODRUN, "-np", str(np_), PYTHON, script] + [str(a) for a in args]
    p = subprocess.run(cmd, env=dict(_env(), **(env or {})), capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    return p.stdout


def assert_each_rank(out, np_, what):
    """Every rank printed "[r] rank r <what>": the workers' way of saying they passed."""
    for r in range(np_):
        assert "[%d] rank %d %s" % (r, r, what) in out, out


@pytest.mark.parametrize("np_", world_sizes(2, 4))
def test_collectives(np_):
    out = run(np_, os.path.join(HERE, "collectives_worker.py"))
    assert_each_rank(out, np_, "OK")


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_grouped_allreduce(np_):
    out = run(np_, os.path.join(HERE, "grouped_worker.py"))
    assert_each_rank(out, np_, "grouped OK")


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_zero_copy_through_the_arena(np_):
    """Arena tensors and DistributedOptimizer's gradients stage nothing on the trainer side (the
    client's copy counters), an ordinary tensor stages in and out, groups go through the grouped
    allreduce; results as the staged path's."""
    out = run(np_, os.path.join(HERE, "zero_copy_worker.py"))
    assert_each_rank(out, np_, "zero copy OK")
    assert "[0] defaults: staged in/out bytes per step [(0, 0), (0, 0), (0, 0), (0, 0)]" in out, out


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_one_host_ranks_reduce_from_each_others_arenas(np_, tmp_path):
    """Ranks on one host reduce straight from each other's memory: an arena tensor and a staged
    one (both in the arena) and a fused burst (built in the shared window) show the direct
    shared-memory phases in the timeline, and no copy into a window or through the ring's slots."""
    timeline = tmp_path / "timeline.json"
    out = run(np_, os.path.join(HERE, "shm_direct_worker.py"),
              env={"KOROVOD_TIMELINE": str(timeline)})
    assert_each_rank(out, np_, "shm direct OK")
    events = json.loads(timeline.read_text())
    lanes = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    phases = {}
    for e in events:
        if e.get("ph") == "B" and e.get("tid") in lanes:
            phases.setdefault(lanes[e["tid"]], set()).add(e["name"])
    names = ["direct.arena", "direct.staged"] + ["direct.burst.%d" % i for i in range(24)]
    for name in names:
        seen = phases.get(name, set())
        assert "SHM_REDUCE" in seen and "SHM_GATHER" in seen, (name, seen)
        assert not seen & {"SHM_COPY_IN", "RING_REDUCE_SCATTER", "RING_ALLGATHER"}, (name, seen)
    fused = [p for n, p in phases.items() if n.startswith("direct.burst.")]
    assert any("MEMCPY_IN_FUSION_BUFFER" in p for p in fused), phases


@pytest.mark.parametrize("passes,compression", [(1, "none"), (2, "none"), (1, "fp16")])
def test_distributed_optimizer_keeps_replicas_identical(passes, compression):
    out = run(2, os.path.join(HERE, "optimizer_worker.py"), passes, compression)
    sums = re.findall(r"params identical sum=(\S+)", out)
    assert len(sums) == 2 and sums[0] == sums[1], out
    # torch >= 2.1: register_post_accumulate_grad_hook; 1.13: hooks on the grad accumulators.
    major, minor = map(int, re.search(r"\[0\] rank 0 torch (\d+)\.(\d+)", out).groups())
    kind = "post_accumulate_grad_hook" if (major, minor) >= (2, 1) else "grad_accumulator"
    assert re.search(r"\[0\] rank 0 torch \S+ gradient hooks: %s$" % kind, out, re.M), out


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_autograd_through_collectives(np_):
    out = run(np_, os.path.join(HERE, "autograd_worker.py"))
    assert_each_rank(out, np_, "autograd OK")


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_horovod_api_and_errors(np_):
    out = run(np_, os.path.join(HERE, "api_worker.py"))
    assert_each_rank(out, np_, "api OK")
    # FP8 through allgather/broadcast/alltoall where this torch has it (>= 2.1), none on 1.13.
    m = re.search(r"^\[0\] rank 0 torch (\d+)\.(\d+)\S* moved FP8 as bytes: (.*)$", out, re.M)
    assert m, out
    fp8 = set(m.group(3).split(", ")) - {""}
    if (int(m.group(1)), int(m.group(2))) >= (2, 1):
        assert {"float8_e4m3fn", "float8_e5m2"} <= fp8, m.group(0)
    else:
        assert not fp8, m.group(0)


def _gpus():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - any import trouble means no GPU here
        return 0


@pytest.mark.skipif(_gpus() == 0, reason="needs a CUDA GPU (torch.cuda.is_available())")
@pytest.mark.parametrize("alloc_conf", ["", "expandable_segments:True"])
def test_cuda_tensors_stay_on_the_gpu_through_the_sidecar(alloc_conf):
    """Legacy IPC handles (the default allocator) and file descriptors of cuMemCreate pieces
    (expandable segments: no legacy IPC handle)."""
    np_ = min(2, _gpus())  # one GPU per rank, as NCCL requires
    out = run(np_, os.path.join(HERE, "cuda_worker.py"),
              env={"KOROVOD_DEVICE_BACKEND": "nccl", "PYTORCH_CUDA_ALLOC_CONF": alloc_conf})
    assert_each_rank(out, np_, "cuda ok")


@pytest.mark.skipif(_gpus() == 0, reason="needs a CUDA GPU (torch.cuda.is_available())")
def test_cuda_malloc_async_tensors_are_refused_naming_the_allocator_setting():
    """cudaMallocAsync's default pool is not exportable: the op fails naming the setting."""
    np_ = min(2, _gpus())
    cmd = [KOROVODRUN, "-np", str(np_), PYTHON, os.path.join(HERE, "cuda_worker.py")]
    env = dict(_env(), KOROVOD_DEVICE_BACKEND="nccl",
               PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0, p.stdout
    assert "cudaMallocAsync memory pool" in p.stderr, p.stderr[-4000:]
    assert "backend:native" in p.stderr, p.stderr[-4000:]


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_optimizer_features(np_):
    out = run(np_, os.path.join(HERE, "optimizer_features_worker.py"))
    assert_each_rank(out, np_, "optimizer features OK")


@pytest.mark.parametrize("np_", world_sizes(2, 3))
def test_sync_batch_norm_and_shutdown_in_flight(np_):
    out = run(np_, os.path.join(HERE, "sync_bn_shutdown_worker.py"))
    assert_each_rank(out, np_, "sync bn shutdown OK")


def test_unmodified_horovod_script():
    out = run(2, os.path.join(HERE, "horovod_docs_worker.py"))
    assert "[0] done rank 0" in out and "[1] done rank 1" in out, out
    losses = [float(x) for x in re.findall(r"epoch \d average loss (\S+)", out)]
    assert len(losses) == 3 and all(l == l for l in losses), out


def test_init_without_korovodrun_fails_clearly():
    env = _env()
    env.pop("KOROVOD_SOCKET", None)
    p = subprocess.run([PYTHON, "-c", "import horovod.torch as hvd; hvd.init()"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "not started by korovodrun (KOROVOD_SOCKET unset)" in p.stderr, p.stderr


def test_digits_example_matches_single_process(tmp_path):
    example = os.path.join(REPO, "examples", "pytorch_digits.py")
    ref_json, dist_json = tmp_path / "ref.json", tmp_path / "dist.json"
    common = ["--checkpoint", str(tmp_path / "ckpt.pt")]
    p = subprocess.run([PYTHON, example, "--ranks-emulated", "4", "--metrics-json",
                        str(ref_json)] + common, env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    run(4, example, "--metrics-json", dist_json, *common, timeout=600)
    ref, dist = json.loads(ref_json.read_text()), json.loads(dist_json.read_text())
    key = next(k for k in ("test_accuracy", "test_acc", "accuracy") if k in ref)
    assert abs(ref[key] - dist[key]) <= 0.01 * (100 if ref[key] > 1 else 1), (ref, dist)


@pytest.mark.parametrize("module", ["korovod.torch", "horovod.torch"])
def test_synthetic_benchmark_example(tmp_path, module):
    example = os.path.join(REPO, "examples", "pytorch_synthetic_benchmark.py")
    script = tmp_path / "synthetic.py"
    # The horovod variant is Horovod's own import line: the script must run unchanged on it.
    script.write_text(open(example).read().replace("import korovod.torch as hvd",
                                                   "import %s as hvd" % module))
    out = run(2, script, "--model", "mlp", "--num-warmup-batches", "2", "--num-iters", "3",
              "--num-batches-per-iter", "2", "--fp16-allreduce")
    assert "[0] Number of ranks: 2" in out, out
    assert len(re.findall(r"^\[0\] Iter #\d: [0-9.]+ img/sec per rank$", out, re.M)) == 3, out
    total = re.search(r"^\[0\] Total img/sec on 2 rank\(s\): ([0-9.]+) \+-", out, re.M)
    assert total and float(total.group(1)) > 0, out
    assert "[1] " not in out, "only rank 0 prints: " + out


# ---- gradient bursts and the arena (issue: a ResNet-50 burst exhausted the 64 MiB heap) ----

@pytest.mark.parametrize("np_,model,threads", [(2, "resnet50", 1), (4, "resnet50", 4),
                                               (2, "vgg16", 4), (2, "big1", 1)])
def test_gradient_burst_with_default_settings(np_, model, threads):
    """Every allreduce_async of a model's gradients, then synchronize: with the defaults (64 MiB
    reserved per heap) a 97.5 MiB ResNet-50 burst, VGG-16's 528 MiB from 4 threads and a single
    256 MiB tensor all complete with exact results; the heap grows instead of failing."""
    out = run(np_, os.path.join(HERE, "burst_worker.py"), model, threads, timeout=600)
    assert_each_rank(out, np_, "burst %s OK" % model)


# ---- virtual hosts: hierarchical allreduce (issue 17) ----

@pytest.mark.parametrize("setting,shape", [("auto", "hierarchical (2 hosts x 2 ranks)"),
                                           ("0", "flat (turned off)")])
def test_virtual_hosts_run_every_collective_hierarchically_or_flat(setting, shape):
    """korovodrun -H localhost:2,127.0.0.2:2: two hosts of two ranks (shared memory inside, TCP
    between). Every collective of the collectives worker is exact, and every rank's start-up line
    says how allreduce runs; HOROVOD_HIERARCHICAL_ALLREDUCE=0 keeps it flat."""
    cmd = [KOROVODRUN, "-np", "4", "-H", "localhost:2,127.0.0.2:2", PYTHON,
           os.path.join(HERE, "collectives_worker.py")]
    p = subprocess.run(cmd, env=dict(_env(), HOROVOD_HIERARCHICAL_ALLREDUCE=setting),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert_each_rank(p.stdout, 4, "OK")
    for r in range(4):
        assert re.search(r"\[rank %d\] world: korovod: rank %d/4 .* transport tcp: .*; allreduce %s"
                         % (r, r, re.escape(shape)), p.stderr), p.stderr[-4000:]


def test_resnet50_burst_on_virtual_hosts_is_exact():
    """ResNet-50's 161 gradients in one burst through the hierarchy (fusion, lanes, 2 x 2)."""
    cmd = [KOROVODRUN, "-np", "4", "-H", "localhost:2,127.0.0.2:2", PYTHON,
           os.path.join(HERE, "burst_worker.py"), "resnet50", "1"]
    p = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert_each_rank(p.stdout, 4, "burst resnet50 OK")
    assert "allreduce hierarchical (2 hosts x 2 ranks)" in p.stderr


def test_gradient_burst_waits_for_space_when_the_heap_cannot_grow():
    """A heap capped at 16 MiB and a 97.5 MiB burst from 4 threads: submissions wait for
    completions to free space, and every result is right."""
    out = run(2, os.path.join(HERE, "burst_worker.py"), "resnet50", 4,
              env={"KOROVOD_ARENA_HEAP_MIB": "8", "KOROVOD_ARENA_HEAP_MAX_MIB": "16"})
    for r in range(2):
        assert "[%d] rank %d burst resnet50 OK" % (r, r) in out, out


def test_tensor_larger_than_the_whole_heap_is_refused_clearly():
    out = run(2, os.path.join(HERE, "burst_worker.py"), "big1", 1, "expect-too-big",
              env={"KOROVOD_ARENA_HEAP_MIB": "8", "KOROVOD_ARENA_HEAP_MAX_MIB": "16"})
    for r in range(2):
        assert re.search(r"\[%d\] rank %d refused ValueError: INVALID_ARGUMENT: allreduce too.big of "
                         r"268435456 bytes: client heap of arena \S+rank%d: a block of 268435456 "
                         r"bytes can never fit its 16777216 bytes \(the sidecar's "
                         r"KOROVOD_ARENA_HEAP_MAX_MIB bounds the heap" % (r, r, r), out), out
        assert "[%d] rank %d still works" % (r, r) in out, out


def test_vgg16_trains_with_default_settings():
    """VGG-16's 528 MiB of gradients every step through DistributedOptimizer, default arena."""
    out = run(2, os.path.join(HERE, "vgg16_worker.py"), 3, timeout=900)
    for r in range(2):
        assert ("[%d] rank %d vgg16 trained: 527.8 MiB of gradients per step, replicas identical"
                % (r, r)) in out, out
    assert len(re.findall(r"^\[0\] step \d loss \d+\.\d+$", out, re.M)) == 3, out


@pytest.mark.parametrize("mode", ["dynamic", "static", "static_duplicate"])
@pytest.mark.parametrize("np_", world_sizes(3, 4))
def test_process_sets_dtypes_and_join(np_, mode):
    out = run(np_, os.path.join(HERE, "process_sets_worker.py"), mode)
    assert_each_rank(out, np_, "process sets %s OK" % mode)


def _lane(path, lane):
    """The activities recorded in timeline `path`'s lane named `lane`."""
    with open(path) as f:
        events = json.load(f)
    tids = {e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
            and e.get("args", {}).get("name") == lane}
    return [e["name"] for e in events if e.get("tid") in tids and e.get("ph") == "B"]


@pytest.mark.parametrize("mode", ["input", "compute", "none"])
def test_straggler_is_named_with_its_cause(mode, tmp_path):
    """Rank 2 slowed on purpose: korovodrun's end-of-run summary names it in one line, input-bound
    when it starts its steps late and compute-bound when it submits its gradients slowly; every
    rank reports its waits; the timeline's "waits" lane shows who waited for whom. Nobody slowed:
    no straggler is named."""
    tl = str(tmp_path / "tl-{rank}.json")
    p = subprocess.run([KOROVODRUN, "-np", "3", "--timeline", tl, PYTHON,
                        os.path.join(HERE, "straggler_worker.py"), "--mode", mode],
                       env=_env(), capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    for r in range(3):
        assert re.search(r"korovod: rank %d end of run: \d+ steps; waited for others [0-9.]+ s; "
                         r"others waited for it [0-9.]+ s" % r, out), out[-4000:]
    lines = [l for l in out.splitlines() if "korovod: straggler:" in l]
    if mode == "none":
        assert lines == [], lines
        return
    assert len(lines) == 1, out[-4000:]
    assert re.search(r"straggler: rank 2 \(127\.0\.0\.1:\d+\) arrived last in \d+ of \d+ steps",
                     lines[0]), lines[0]
    assert ("%s-bound" % mode) in lines[0], lines[0]
    assert "OTHERS_WAIT_FOR_ME" in _lane(str(tmp_path / "tl-2.json"), "waits")
    assert "WAIT_FOR_OTHERS" in _lane(str(tmp_path / "tl-0.json"), "waits")


def test_exported_device_memory_on_the_host_device():
    """Memory without a CUDA IPC handle (expandable segments) sent as file descriptors, through
    the Python client and real sidecars, on the host device (no GPU)."""
    out = run(2, os.path.join(HERE, "exported_memory_worker.py"),
              env={"KOROVOD_DEVICE_BACKEND": "host"})
    assert_each_rank(out, 2, "OK")
