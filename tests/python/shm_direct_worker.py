"""Run under korovodrun with every rank on this host (the shm transport) and KOROVOD_TIMELINE
set: a 4 MiB arena tensor, a 4 MiB ordinary tensor (staged into the arena by the client) and a
burst of 24 gradients that the engine fuses. Checks every result and prints
'rank R shm direct OK'; the test then reads the timeline to see how each was reduced."""
import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
expected = n * (n + 1) / 2

a = hvd.arena_empty((1 << 20,), torch.float32).fill_(float(r + 1))
hvd.allreduce_(a, op=hvd.Sum, name="direct.arena")
assert torch.all(a == expected), a

t = torch.full((1 << 20,), float(r + 1))
out = hvd.allreduce(t, op=hvd.Sum, name="direct.staged")
assert torch.all(out == expected), out

grads = [torch.full((65536 + i,), float(r + 1)) for i in range(24)]
handles = [hvd.allreduce_async(g, op=hvd.Average, name="direct.burst.%d" % i)
           for i, g in enumerate(grads)]
for h, g in zip(handles, grads):
    res = hvd.synchronize(h)
    assert torch.all(res == expected / n), res

print("rank %d shm direct OK" % r, flush=True)
hvd.shutdown()
