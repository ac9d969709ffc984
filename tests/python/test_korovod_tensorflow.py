"""korovod.tensorflow / horovod.tensorflow / horovod.keras end to end: each test runs
`korovodrun -np N <python with TensorFlow> script`.

Environment: KOROVOD_BUILD_DIR (default <repo>/build) holds bin/korovodrun, the client extension
and python/korovod/tensorflow/_korovod_tf_ops.so; PYTHON: an interpreter with TensorFlow
(scripts/install-deps.sh --tensorflow makes <repo>/.deps/tf-venv).
"""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_elastic import run_killing_a_worker  # noqa: E402
from test_korovod_torch import KOROVODRUN, PYTHON, REPO, assert_each_rank  # noqa: E402
from test_korovod_torch import _env as _torch_env  # noqa: E402
from test_korovod_torch import run as _torch_run  # noqa: E402


def _env(extra=None):
    env = _torch_env()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(extra or {})
    return env


def run(np_, script, *args, timeout=600, env=None):
    return _torch_run(np_, script, *args, timeout=timeout,
                      env=dict({"TF_CPP_MIN_LOG_LEVEL": "3"}, **(env or {})))


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_collectives(np_):
    """Every op, eager and in tf.function, every dtype, process sets, gradients,
    DistributedGradientTape, Horovod's error types, ops that need no thread each."""
    out = run(np_, os.path.join(HERE, "tf_collectives_worker.py"))
    assert_each_rank(out, np_, "tf collectives OK")


def test_tensorflow1_graph():
    """horovod.tensorflow with eager execution off: ops run in a Session,
    broadcast_global_variables, the TF1 DistributedOptimizer, objects through the session."""
    out = run(2, os.path.join(HERE, "tf1_graph_worker.py"))
    assert_each_rank(out, 2, "tf1 graph OK")


KERAS = [("0", "horovod.tensorflow.keras"), ("1", "horovod.tensorflow.keras"),
         ("0", "horovod.keras"), ("1", "horovod.keras")]


@pytest.mark.parametrize("legacy,module", KERAS)
def test_keras_api(legacy, module):
    """DistributedOptimizer, the callbacks, BestModelCheckpoint, load_model, the elastic
    KerasState: Keras 3 (TF_USE_LEGACY_KERAS=0) and tf_keras (=1), both modules."""
    out = run(2, os.path.join(HERE, "tf_keras_worker.py"), module,
              env={"TF_USE_LEGACY_KERAS": legacy})
    assert_each_rank(out, 2, "keras OK")


@pytest.mark.parametrize("legacy,module", [("0", "horovod.tensorflow.keras"),
                                           ("1", "horovod.tensorflow.keras"),
                                           ("0", "horovod.keras")])
def test_keras_digits_matches_single_process(tmp_path, legacy, module):
    """4 ranks of the Keras digits example reach the test accuracy (and loss) of one process
    with the same global batch."""
    example = os.path.join(REPO, "examples", "tensorflow2_keras_digits.py")
    ref_json, dist_json = tmp_path / "ref.json", tmp_path / "dist.json"
    env = {"TF_USE_LEGACY_KERAS": legacy}
    p = subprocess.run([PYTHON, example, "--module", module, "--ranks-emulated", "4",
                        "--metrics-json", str(ref_json)], env=_env(env), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = run(4, example, "--module", module, "--metrics-json", dist_json,
              "--save", tmp_path / "digits.keras", env=env)
    assert "[1] " not in out, "only rank 0 prints: " + out
    ref, dist = json.loads(ref_json.read_text()), json.loads(dist_json.read_text())
    assert ref["test_accuracy"] > 0.9, ref
    assert abs(ref["test_accuracy"] - dist["test_accuracy"]) <= 0.01, (ref, dist)
    assert abs(ref["final_train_loss"] - dist["final_train_loss"]) <= 1e-3, (ref, dist)


@pytest.mark.parametrize("example,legacy,np_", [
    ("tensorflow2_synthetic_benchmark.py", "0", 2),
    ("tensorflow2_synthetic_benchmark.py", "1", 4),
    ("tensorflow2_keras_synthetic_benchmark.py", "1", 2),
    ("tensorflow2_keras_synthetic_benchmark.py", "0", 4)])
def test_synthetic_benchmark_examples(example, legacy, np_):
    """Horovod's TF2 synthetic benchmarks' flags and printout (ours run on Keras 3 and tf_keras;
    Horovod's own files need tf_keras, docs/converting.md), a small model, few steps."""
    out = run(np_, os.path.join(REPO, "examples", example), "--model", "MobileNetV2",
              "--image-size", "32", "--batch-size", "4", "--num-batches-per-iter", "2",
              "--num-iters", "3", "--fp16-allreduce", env={"TF_USE_LEGACY_KERAS": legacy})
    assert "[0] Number of CPUs: %d" % np_ in out, out
    assert len(re.findall(r"^\[0\] Iter #\d: [0-9.]+ img/sec per CPU$", out, re.M)) == 3, out
    total = re.search(r"^\[0\] Total img/sec on %d CPU\(s\): ([0-9.]+) \+-" % np_, out, re.M)
    assert total and float(total.group(1)) > 0, out


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_elastic_tensorflow_benchmark_survives_a_killed_worker(tmp_path, legacy):
    """Horovod's elastic TF2 synthetic benchmark (our copy: same flags and state) with
    hvd.elastic.TensorFlowKerasState under korovodrun --min-np 2: a worker's trainer is killed
    after the first iteration (its in-flight ops fail with UnknownError, which hvd.elastic.run
    turns into HorovodInternalError); the other two restore the commit and finish on 2."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n127.0.0.2:1\n")
    cmd = [KOROVODRUN, "--min-np", "2", "--max-np", "3", "--host-discovery-script",
           "cat %s" % hosts, "--elastic-timeout", "60", PYTHON,
           os.path.join(REPO, "examples", "tensorflow2_synthetic_benchmark_elastic.py"),
           "--model", "MobileNetV2", "--image-size", "32", "--batch-size", "4",
           "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "6"]
    out, rc, killed = run_killing_a_worker(cmd, _env({"TF_USE_LEGACY_KERAS": legacy}),
                                           "Iter #1:", "127.0.0.2:", timeout=600)
    assert killed, out[-4000:]
    assert rc == 0, out[-6000:]
    assert re.search(r"Iter #5: [0-9.]+ img/sec per CPU \(2 CPUs\)", out), out[-4000:]
    assert re.search(r"Total img/sec on 2 CPU\(s\): [0-9.]+", out), out[-4000:]
    assert "dropped; host 127.0.0.2 blacklisted" in out, out[-4000:]
