"""hvd.SyncBatchNorm: batch normalization with statistics over the whole batch of every rank
(Horovod's horovod/torch/sync_batch_norm.py), on CPU tensors.

Horovod's version calls torch.batch_norm_stats & co., which PyTorch implements for CUDA only; the
same computation is written out here with plain tensor ops: per-channel count, mean and variance
are allgathered, combined into the global mean and variance, and the backward pass allreduces the
two per-channel sums the input gradient needs."""
import torch
from torch.autograd.function import Function
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from korovod.torch.mpi_ops import Sum, allgather_async, allreduce_async, size, synchronize


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous batch normalization: during training the mean and variance come from
    the inputs of all ranks together (as if one rank saw the whole batch); in evaluation the
    running statistics are used, as in torch.nn.BatchNorm*. Every rank must call forward (and
    backward) the same number of times."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum,
                            self.eps)

    def _maybe_run_sync_bn(self, input):
        if size() == 1:
            return self._run_bn(input)
        momentum = self.momentum
        if momentum is None and self.num_batches_tracked is not None:
            # momentum=None: a cumulative average, as torch's batch norm keeps it
            momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean,
                                    self.running_var, self.eps, momentum)

    def forward(self, input):
        if input.device.type != "cpu":
            raise ValueError("korovod: SyncBatchNorm supports CPU tensors only (got %s)"
                             % input.device)
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        return self._maybe_run_sync_bn(input)


def _channel_view(t, input):
    """A per-channel vector shaped to broadcast against `input` (N, C, ...)."""
    return t.view([1, -1] + [1] * (input.dim() - 2))


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // input.size(1)
        # Statistics in float64: the combination below subtracts squares.
        x = input.double()
        mean = x.mean(dim=dims)
        var = x.var(dim=dims, unbiased=False)

        count_handle = allgather_async(torch.tensor([count], dtype=torch.int64),
                                       name="sync_batch_norm.count")
        mean_handle = allgather_async(mean.unsqueeze(0), name="sync_batch_norm.mean")
        var_handle = allgather_async(var.unsqueeze(0), name="sync_batch_norm.var")
        counts = synchronize(count_handle).double()  # (ranks,)
        means = synchronize(mean_handle)  # (ranks, C)
        variances = synchronize(var_handle)  # (ranks, C)

        total = counts.sum()
        weights = (counts / total).unsqueeze(1)
        global_mean = (weights * means).sum(0)
        # E[x^2] - E[x]^2 over every rank's inputs.
        global_var = (weights * (variances + means * means)).sum(0) - global_mean * global_mean
        global_var = global_var.clamp_min(0)
        invstd = torch.rsqrt(global_var + eps)

        if running_mean is not None and momentum is not None:
            # The running variance is unbiased, as torch's batch norm keeps it.
            unbiased = global_var * (total / (total - 1)) if total > 1 else global_var
            running_mean.mul_(1 - momentum).add_(momentum * global_mean.to(running_mean.dtype))
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))

        mean_c = global_mean.to(input.dtype)
        invstd_c = invstd.to(input.dtype)
        ctx.save_for_backward(input, weight, mean_c, invstd_c)
        ctx.total = total
        out = (input - _channel_view(mean_c, input)) * _channel_view(invstd_c, input)
        if weight is not None:
            out = out * _channel_view(weight, input)
        if bias is not None:
            out = out + _channel_view(bias, input)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd = ctx.saved_tensors
        need_input_grad, need_weight_grad, need_bias_grad = ctx.needs_input_grad[0:3]
        dims = [0] + list(range(2, input.dim()))
        xmu = input - _channel_view(mean, input)
        # This rank's sums; the weight and bias gradients stay local (DistributedOptimizer
        # averages them), as in Horovod.
        sum_dy = grad_output.sum(dim=dims)
        sum_dy_xmu = (grad_output * xmu).sum(dim=dims)
        grad_weight = sum_dy_xmu * invstd if weight is not None and need_weight_grad else None
        grad_bias = sum_dy if weight is not None and need_bias_grad else None

        grad_input = None
        if need_input_grad:
            sum_dy_handle = allreduce_async(sum_dy, op=Sum, name="sync_batch_norm.sum_dy")
            sum_dy_xmu_handle = allreduce_async(sum_dy_xmu, op=Sum,
                                                name="sync_batch_norm.sum_dy_xmu")
            mean_dy = synchronize(sum_dy_handle) / ctx.total
            mean_dy_xmu = synchronize(sum_dy_xmu_handle) / ctx.total
            scale = invstd if weight is None else invstd * weight
            grad_input = (grad_output - _channel_view(mean_dy, input)
                          - xmu * _channel_view(invstd * invstd * mean_dy_xmu, input)) \
                * _channel_view(scale, input)
        return grad_input, grad_weight, grad_bias, None, None, None, None
