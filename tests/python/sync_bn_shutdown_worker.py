"""Run under korovodrun: hvd.SyncBatchNorm on CPU matches torch.nn.BatchNorm1d over the whole
batch of every rank (outputs, running statistics, gradients), and hvd.shutdown() with ops still
in flight neither crashes nor writes into their tensors; prints 'rank R sync bn shutdown OK'."""
import gc

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

hvd.init()
r, n = hvd.rank(), hvd.size()

# Horovod's test_horovod_sync_batch_norm, on CPU: rank r holds sample r of the batch.
batches = [
    torch.stack([torch.tensor([[k, k + 1], [k * 2, k * 2 + 1], [k * 3, k * 3 + 1],
                               [k * 4, k * 4 + 1]]) for k in range(n)]).float(),
    torch.stack([torch.tensor([[k + 1], [k * 2 + 1], [k * 3 + 1], [k * 4 + 1]])
                 for k in range(n)]).float(),
]
for ts in batches:
    sync_bn = hvd.SyncBatchNorm(num_features=4)
    bn = torch.nn.BatchNorm1d(num_features=4)
    ts1 = ts.clone().requires_grad_()
    ts2 = ts.clone().requires_grad_()
    sync_out = sync_bn(ts1[r].unsqueeze(0))
    bn_out = bn(ts2)
    assert torch.allclose(sync_out, bn_out[r].unsqueeze(0), atol=1e-5), (sync_out, bn_out)
    assert torch.allclose(sync_bn.running_mean, bn.running_mean, atol=1e-5)
    assert torch.allclose(sync_bn.running_var, bn.running_var, atol=1e-5)
    sync_out.sum().backward()
    bn_out.mean(dim=0).sum().backward()
    assert torch.allclose(hvd.allreduce(sync_bn.weight.grad), bn.weight.grad, atol=1e-5)
    assert torch.allclose(hvd.allreduce(sync_bn.bias.grad), bn.bias.grad, atol=1e-5)
    assert torch.allclose(hvd.allreduce(ts1.grad), ts2.grad, atol=1e-5), (ts1.grad, ts2.grad)
    # Evaluation uses the running statistics, as BatchNorm does.
    sync_bn.eval()
    bn.eval()
    assert torch.allclose(sync_bn(ts[r].unsqueeze(0)), bn(ts)[r].unsqueeze(0), atol=1e-5)

# momentum=None (cumulative average) and affine=False, over two batches.
sync_bn = hvd.SyncBatchNorm(3, momentum=None, affine=False)
bn = torch.nn.BatchNorm1d(3, momentum=None, affine=False)
for step in range(2):
    full = torch.arange(n * 3 * 2, dtype=torch.float32).reshape(n, 3, 2) * (step + 1)
    assert torch.allclose(sync_bn(full[r:r + 1]), bn(full)[r:r + 1], atol=1e-5)
assert torch.allclose(sync_bn.running_mean, bn.running_mean, atol=1e-4)
assert torch.allclose(sync_bn.running_var, bn.running_var, atol=1e-4)

# Ops in flight at shutdown: rank 0 starts broadcasts and an allreduce only it will ever
# submit (they cannot complete), and broadcasts the others complete right around its shutdown;
# it then drops every reference to their tensors. Nothing may crash, and a later synchronize()
# raises HorovodInternalError.
hvd.barrier()
orphan = hvd.allreduce_async(torch.ones(1000), name="only.rank0") if r == 0 else None
racing = [hvd.broadcast_async(torch.full((20000,), float(r)), 0, name="racing.%d" % i)
          for i in range(20)]
if r != 0:
    for h in racing:
        assert torch.equal(hvd.synchronize(h), torch.zeros(20000))
hvd.shutdown()
assert not hvd.is_initialized()
gc.collect()
garbage = [torch.full((20000,), 7.0) for _ in range(50)]  # reuses freed memory
assert all(torch.equal(g, torch.full((20000,), 7.0)) for g in garbage)
if r == 0:
    try:
        hvd.synchronize(orphan)
        raise AssertionError("an op abandoned at shutdown synchronized")
    except HorovodInternalError:
        pass
print("rank %d sync bn shutdown OK" % r, flush=True)
