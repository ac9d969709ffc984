"""An unmodified Horovod-docs-style training script (synthetic data)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import horovod.torch as hvd

hvd.init()
torch.manual_seed(42)

dataset = torch.utils.data.TensorDataset(torch.randn(512, 20), torch.randint(0, 3, (512,)))
train_sampler = torch.utils.data.distributed.DistributedSampler(
    dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=train_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


model = Net()
optimizer = optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.5)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

for epoch in range(3):
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % 4 == 0:
            print("Train Epoch: {} [{}/{}]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_sampler), loss.item()))
    avg = hvd.allreduce(torch.tensor(loss.item()), name="avg_loss")
    if hvd.rank() == 0:
        print("epoch %d average loss %.6f" % (epoch, avg.item()))
print("done rank %d" % hvd.rank())
