"""ElasticSampler (horovod.torch.elastic.ElasticSampler): a DistributedSampler whose partition
follows the job's size and skips what this epoch already processed."""
import math
import random

import torch.utils.data

from korovod.torch import mpi_ops


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions the dataset across the ranks, again after every reset.

    As in Horovod 0.28, progress is a count of samples processed this epoch by the whole job
    (`processed_num`): every rank records the same count, so rank 0's copy, broadcast by
    TorchState.sync(), is right for everyone. The remaining samples of the epoch's deterministic
    order are re-partitioned across the current ranks by reset().

    Use it in a TorchState, call record_batch() after each batch, and set_epoch() at the end of
    each epoch (not the start, or a restarted epoch would be processed again).

    dataset: of constant length. seed: the same on every rank (shuffle's order).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed

        self.epoch = 0
        self.processed_num = 0
        self.processed_indices = set()  # Horovod < 0.23's field, kept for scripts that read it

        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0

        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: a new order when shuffling, and nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed a batch of `batch_size` samples."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Records that this rank (and so every rank, in step) processed `indices`. Horovod < 0.23
        kept the indices themselves; the count is what the partition needs."""
        indices = set(indices)
        self.processed_indices.update(indices)
        self.processed_num += len(indices) * self.num_replicas

    def get_indices(self, batch_idx, batch_size):
        """This rank's dataset indices of batch `batch_idx` of the current iteration."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        if "processed_num" in state_dict:
            self.processed_num = state_dict["processed_num"]
        else:  # a state saved by Horovod < 0.23: the indices processed by every rank
            self.processed_num = len(state_dict.get("processed_indices", ()))
        self.reset()

    def reset(self):
        """Re-partitions the rest of this epoch across the current hvd.size() ranks."""
        self.num_replicas = mpi_ops.size()
        self.rank = mpi_ops.rank()

        order = list(range(len(self.dataset)))
        if self.shuffle:
            # Every rank draws the same order from the same seed.
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]

        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        # Pad by wrapping around (again, when fewer remain than ranks) so that every rank gets
        # num_samples: the same number of steps.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        assert len(indices) == self.total_size
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(self.indices) == self.num_samples
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
