"""An elastic training run (hvd.elastic) for the korovodrun elastic tests.

Every step takes a fixed global batch of 12 samples, split over the ranks of the moment; gradients
are summed (not averaged) across ranks, so a step's update does not depend on the world size and
the final weights must equal a single-process run of the same steps: a step lost or counted twice
across a failure would show. State is committed after every step.

Environment:
  ELASTIC_TEST_DIR   markers, the host file the discovery script prints, results (result.txt)
  ELASTIC_STEPS      steps to train (default 60); ELASTIC_STEP_SLEEP seconds per step (0.1)
  ELASTIC_FAULTS     "what@host@step,...": on the worker of that (virtual) host, at that step, once:
                     "trainer" kills this trainer mid-step (after its gradients, before their
                     allreduce), "sidecar" kills its sidecar at that point
  ELASTIC_SPARE_HOSTS  hosts rank 0 adds to the host file, one per epoch that has run 3 steps
                     below ELASTIC_FULL_SIZE (default 4) ranks
  ELASTIC_ASYNC      1: each step submits its allreduces asynchronously (the gradient, then a
                     second op) and synchronizes them in order, as DistributedOptimizer does, so
                     a failure leaves an op of the broken epoch never synchronized

The script runs on Horovod itself too (bench/elastic/recovery.py --engine horovod): the worker's
host is then HOROVOD_HOSTNAME, and the epoch is counted by the script (one per reset).
"""
import os
import signal
import sys
import time

import torch

import horovod.torch as hvd

try:
    from korovod.torch import mpi_ops
except ImportError:  # Horovod itself
    mpi_ops = None

GLOBAL_BATCH = 12
DIR = os.environ["ELASTIC_TEST_DIR"]
STEPS = int(os.environ.get("ELASTIC_STEPS", "60"))
SLEEP = float(os.environ.get("ELASTIC_STEP_SLEEP", "0.1"))
FULL = int(os.environ.get("ELASTIC_FULL_SIZE", "4"))
ASYNC = os.environ.get("ELASTIC_ASYNC") == "1"
if "KOROVOD_WORKER_ID" in os.environ:
    WORKER = os.environ["KOROVOD_WORKER_ID"]
    HOST = WORKER.rsplit(":", 1)[0]
else:  # Horovod: host and local rank name the worker
    HOST = os.environ.get("HOROVOD_HOSTNAME", "")
    WORKER = "%s:%s" % (HOST, os.environ.get("HOROVOD_LOCAL_RANK", "?"))
resets = 0


def epoch():
    return mpi_ops._membership()[0] if mpi_ops is not None else 1 + resets


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(-3, 4, (GLOBAL_BATCH, 4), generator=g).double()
    y = torch.randint(-3, 4, (GLOBAL_BATCH, 1), generator=g).double()
    return x, y


def new_model():
    model = torch.nn.Linear(4, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
    return model, torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)


def local_loss(model, step, rank, size):
    x, y = batch(step)
    idx = list(range(rank, GLOBAL_BATCH, size))
    return ((model(x[idx]) - y[idx]) ** 2).sum() / GLOBAL_BATCH


def reference():
    model, opt = new_model()
    for step in range(STEPS):
        opt.zero_grad()
        local_loss(model, step, 0, 1).backward()
        opt.step()
    return model.weight.detach().clone()


def once(name):
    """True the first time any process of the job asks for `name`."""
    try:
        fd = os.open(os.path.join(DIR, "once-" + name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def sidecar_pid():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/comm" % pid) as f:
                comm = f.read().strip()
        except OSError:
            continue
        # The worker id is unique within a job only: the job's shared-memory prefix tells jobs apart.
        if (comm.startswith("korovod-sidecar") and ("KOROVOD_WORKER_ID=" + WORKER).encode() in env
                and ("KOROVOD_SHM_PREFIX=" + os.environ["KOROVOD_SHM_PREFIX"]).encode() in env):
            return int(pid)
    raise RuntimeError("no sidecar of worker " + WORKER)


def maybe_fault(step):
    for i, spec in enumerate(filter(None, os.environ.get("ELASTIC_FAULTS", "").split(","))):
        what, host, at = spec.split("@")
        if host != HOST or int(at) != step or not once("fault%d" % i):
            continue
        print("fault: killing the %s of worker %s at step %d at %.3f" %
              (what, WORKER, step, time.time()), flush=True)
        if what == "trainer":
            os.kill(os.getpid(), signal.SIGKILL)
        os.kill(sidecar_pid(), signal.SIGKILL)


small_steps = {}  # epoch -> steps run in it below the full size


def maybe_grow():
    if hvd.rank() != 0 or hvd.size() >= FULL:
        return
    e = epoch()
    small_steps[e] = small_steps.get(e, 0) + 1
    if small_steps[e] != 3:
        return
    for host in filter(None, os.environ.get("ELASTIC_SPARE_HOSTS", "").split(",")):
        if once("spare-" + host):
            with open(os.path.join(DIR, "hosts"), "a") as f:
                f.write(host + "\n")
            print("grow: added host %s to the discovered hosts" % host, flush=True)
            return


hvd.init()
model, opt = new_model()
state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)


def on_reset():
    global resets
    resets += 1
    print("reset: rank %d of %d in epoch %d at %.3f" % (hvd.rank(), hvd.size(), epoch(),
                                                        time.time()), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < STEPS:
        opt.zero_grad()
        local_loss(model, state.step, hvd.rank(), hvd.size()).backward()
        maybe_fault(state.step)
        if ASYNC:
            handles = [(p, hvd.allreduce_async(p.grad, op=hvd.Sum, name="grad." + name))
                       for name, p in model.named_parameters()]
            spare = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="spare")
            for p, h in handles:
                p.grad.copy_(hvd.synchronize(h))  # a failure here leaves `spare` pending
            hvd.synchronize(spare)
        else:
            for name, p in model.named_parameters():
                p.grad.copy_(hvd.allreduce(p.grad, op=hvd.Sum, name="grad." + name))
        opt.step()
        if hvd.rank() == 0:
            print("step %d size %d epoch %d at %.3f" %
                  (state.step, hvd.size(), epoch(), time.time()), flush=True)
        state.step += 1
        time.sleep(SLEEP)
        maybe_grow()
        state.commit()


train(state)
if hvd.rank() == 0:
    want = reference()
    got = model.weight.detach()
    ok = torch.allclose(got, want, rtol=1e-9, atol=1e-12)
    with open(os.path.join(DIR, "result.txt"), "w") as f:
        f.write("%s %s %s\n" % ("match" if ok else "MISMATCH", got.tolist(), want.tolist()))
    print("final weights %s the single-process reference: %s vs %s" %
          ("match" if ok else "DO NOT match", got.tolist(), want.tolist()), flush=True)
    sys.exit(0 if ok else 3)
