"""Run under korovodrun (2 or more ranks): DistributedOptimizer's sparse gradients,
sparse_as_dense, groups / num_groups, default names over several param groups, and
broadcast_optimizer_state for every torch.optim optimizer; prints 'rank R optimizer features OK'."""
import warnings

import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()


def rank_inputs():
    # Different rows of the embedding on every rank, some shared.
    return torch.tensor([[r % 10, (r + 3) % 10, 7]])


def embedding_grad_after_step(sparse_as_dense):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=1.0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    opt.zero_grad()
    (emb(rank_inputs()) * (r + 1)).sum().backward()
    before = emb.weight.detach().clone()
    opt.step()
    assert emb.weight.grad.is_sparse  # the gradient stays sparse either way
    return before - emb.weight.detach()  # lr 1: the averaged gradient


# Sparse gradients: allreduced sparse (or dense with sparse_as_dense); both give the average of
# every rank's dense gradient.
dense_grad = torch.zeros(10, 3)
for row in rank_inputs()[0].tolist():
    dense_grad[row] += r + 1
expected = hvd.allreduce(dense_grad, op=hvd.Average)
for sparse_as_dense in (False, True):
    got = embedding_grad_after_step(sparse_as_dense)
    assert torch.allclose(got, expected, atol=1e-6), (sparse_as_dense, got, expected)

# SparseAdam through DistributedOptimizer (Horovod's test_sparse_embeddings).
emb = torch.nn.Embedding(10, 3, sparse=True)
opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1))
emb(rank_inputs()).sum().backward()
opt.step()


def train(groups=None, num_groups=0, steps=3):
    """A small model trained on rank-dependent data; returns its parameters."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    if groups == "lists":
        groups = [[model[0].weight, model[2].weight], [model[0].bias]]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # num_groups
        # Names per configuration: the engine's response cache does not yet renegotiate a
        # group whose member changed shape under the same name (a group of other members).
        tag = "%s.%s." % (groups if isinstance(groups, (int, str)) else None, num_groups)
        opt = hvd.DistributedOptimizer(opt, named_parameters=[
            (tag + k, v) for k, v in model.named_parameters()], groups=groups,
            num_groups=num_groups)
    torch.manual_seed(100 + r)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# groups (a count, lists of parameters) and num_groups: grouped allreduces, same result.
reference = train()
for kwargs in (dict(groups=2), dict(groups="lists"), dict(num_groups=3)):
    got = train(**kwargs)
    assert torch.allclose(got, reference, atol=1e-6), kwargs
    gathered = hvd.allgather(got.unsqueeze(0))
    assert all(torch.equal(gathered[0], g) for g in gathered), kwargs  # replicas identical


# Default names (no named_parameters) over two param groups do not collide.
a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
opt = torch.optim.SGD([{"params": a.parameters()}, {"params": b.parameters(), "lr": 0.5}], lr=0.1)
opt = hvd.DistributedOptimizer(opt)
names = sorted(opt._parameter_names.values())
assert len(set(names)) == 4, names
(a(torch.ones(1, 3) * r) + b(torch.ones(1, 3))).sum().backward()
opt.step()
expected = hvd.allreduce(torch.full((3, 3), float(r)), op=hvd.Average)
assert torch.allclose(a.weight.grad, expected), a.weight.grad


# broadcast_optimizer_state: root's state and hyperparameters on every rank, for every
# torch.optim optimizer (LBFGS refused, as Horovod does).
optimizers = sorted((c for c in torch.optim.Optimizer.__subclasses__()
                     if c.__module__.startswith("torch.optim")), key=lambda c: c.__name__)
for cls in optimizers:
    torch.manual_seed(2)
    # Muon (the newest torch) takes 2-D parameters only: no bias for it.
    model = torch.nn.Linear(4, 3, bias=cls.__name__ != "Muon")
    lr = 0.01 * (r + 1)
    opt = cls(model.parameters(), lr=lr) if cls is not torch.optim.SparseAdam else None
    if cls is torch.optim.SparseAdam:
        emb = torch.nn.Embedding(5, 2, sparse=True)
        opt = cls(list(emb.parameters()), lr=lr)
        model = emb
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    if cls is torch.optim.LBFGS:
        try:
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            raise AssertionError("LBFGS state went through")
        except ValueError:
            continue
    if r == 0:  # only root has stepped: the others' state is empty until the broadcast
        for p in model.parameters():
            p.grad = torch.ones_like(p).to_sparse() if cls is torch.optim.SparseAdam \
                else torch.ones_like(p)
        super(opt.__class__, opt).step()
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    state = opt.state_dict()
    assert state["param_groups"][0]["lr"] == 0.01, (cls.__name__, state["param_groups"])
    flat = [v for s in state["state"].values() for v in s.values() if torch.is_tensor(v)]
    mine = torch.cat([v.detach().double().flatten() for v in flat]) if flat else torch.zeros(1)
    everyone = hvd.allgather(mine.unsqueeze(0))
    assert all(torch.equal(everyone[0], e) for e in everyone), cls.__name__

hvd.barrier()
print("rank %d optimizer features OK" % r, flush=True)
