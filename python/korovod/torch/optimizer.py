"""hvd.DistributedOptimizer: allreduces each gradient as soon as backward produces it."""
import contextlib
import os
import warnings

import torch

from korovod.torch import mpi_ops
from korovod.torch.compression import Compression
from korovod.torch.functions import broadcast_object


def _split_list(items, n):
    """Splits `items` into n nearly even consecutive chunks (Horovod's split_list)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=mpi_ops.Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=mpi_ops.global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            # Indexed by group and position: names stay distinct across param groups.
            named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                                for i, param_group in enumerate(self.param_groups)
                                for j, v in enumerate(param_group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        dups = {k for k, _ in named_parameters if [n for n, _ in named_parameters].count(k) > 1}
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             "Found duplicates: %s" % ", ".join(sorted(dups)))
        all_param_ids = {id(v) for group in self.param_groups for v in group["params"]}
        named_param_ids = {id(v) for _, v in named_parameters}
        unnamed = all_param_ids - named_param_ids
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named. Python object ids: %s" % sorted(unnamed))
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step
                                 for _, v in sorted(named_parameters)}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        # p -> (handle, ctx), or for a group of parameters allreduced together:
        # tuple of p -> (handle, ctxs)
        self._handles = {}
        # p -> its gradient's arena tensor (see _adopt_grad), kept while p.grad is replaced or
        # set to None so that the next adoption reuses the block.
        self._arena_grads = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or groups > 0):
                raise ValueError("groups should be a non-negative integer or a list of list of "
                                 "torch.Tensor.")
            if isinstance(groups, list):
                grouped_ids = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in grouped_ids:
                            raise ValueError("A parameter can only appear once in groups.")
                        grouped_ids.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        # As Horovod: a rank outside the process set, or a job of one rank, allreduces nothing
        # as gradients arrive (synchronize() still reduces over a one-rank set).
        if self.process_set.included() is not False and (
                mpi_ops.size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    @staticmethod
    def find_duplicates(lst):
        seen, dups = set(), set()
        for el in lst:
            if el in seen:
                dups.add(el)
            seen.add(el)
        return dups

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _register_hooks(self):
        if self._groups is not None:
            p_list = [p for param_group in self.param_groups for p in param_group["params"]
                      if p.requires_grad]
            # Every rank orders the parameters as rank 0 does, so groups match across ranks.
            names = broadcast_object([self._parameter_names.get(p) for p in p_list], root_rank=0,
                                     name="DistributedOptimizer.groups",
                                     process_set=self.process_set)
            p_list = sorted(p_list, key=lambda p: names.index(self._parameter_names.get(p)))
            if isinstance(self._groups, list):
                p_groups, grouped = [], set()
                p_list_ids = {id(p) for p in p_list}
                for group in self._groups:
                    p_groups.append([p for p in group if id(p) in p_list_ids])
                    grouped.update(id(p) for p in p_groups[-1])
                p_groups += [[p] for p in p_list if id(p) not in grouped]
            else:
                p_groups = _split_list(p_list, self._groups)
            for group in (tuple(g) for g in p_groups if g):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._grad_accs.append(self._hook_gradient(p))

    # "post_accumulate_grad_hook" on torch >= 2.1, else "grad_accumulator" (see _hook_gradient).
    hook_kind = ("post_accumulate_grad_hook"
                 if hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
                 else "grad_accumulator")

    def _hook_gradient(self, p):
        """Runs this optimizer's hook for `p` each time backward has accumulated p.grad; returns
        what must live as long as the hook. torch >= 2.1 has a hook for exactly that
        (register_post_accumulate_grad_hook, which torch.compile's compiled autograd also
        knows); before it, as Horovod, a hook on p's gradient accumulator node, which torch
        keeps only while something holds it."""
        hook = self._make_hook(p)
        if self.hook_kind == "post_accumulate_grad_hook":
            return p.register_post_accumulate_grad_hook(lambda _p: hook())
        with torch.enable_grad():  # under no_grad() the expansion would have no grad_fn
            grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
        grad_acc.register_hook(hook)
        return grad_acc

    def _scale_factors(self):
        if self.op == mpi_ops.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _adopt_grad(self, p):
        """Makes p.grad an arena tensor, so that its allreduce reads and writes it where it lies
        (no copy into the arena and back). Costs one copy when p.grad is not one yet: the first
        step, or after the user replaced it; afterwards backward accumulates into it in place
        and zero_grad() zeroes it in place. p.grad stays as it is when the heap has no room to
        spare (its allreduce is then staged, as any tensor's)."""
        g = p.grad
        if g is None or g.is_sparse or mpi_ops.is_arena_tensor(g):
            return
        kept = self._arena_grads.get(p)
        if (kept is not None and kept.shape == g.shape and kept.dtype == g.dtype and
                mpi_ops.is_arena_tensor(kept)):
            with torch.no_grad():
                kept.copy_(g)
        else:
            kept = mpi_ops._arena_copy(g)
            if kept is None:
                self._arena_grads.pop(p, None)
                return
            self._arena_grads[p] = kept
        p.grad = kept

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # An unused parameter still takes part: every rank must allreduce every gradient.
            kept = self._arena_grads.get(p)
            if kept is not None and kept.shape == p.shape and kept.dtype == p.dtype:
                p.grad = kept.zero_()
            else:
                p.grad = p.data.new(p.size()).zero_()
        if self._compression is Compression.none:
            self._adopt_grad(p)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                handle = mpi_ops.sparse_allreduce_async(tensor, name=name, op=self.op,
                                                        process_set=self.process_set)
                return handle, None
            tensor = tensor.to_dense()
        prescale, postscale = self._scale_factors()
        tensor_compressed, ctx = self._compression.compress(tensor)
        handle = mpi_ops.allreduce_async_(tensor_compressed, name=name, op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        if self._compression is Compression.none:
            for p in ps:
                self._adopt_grad(p)
        name = self._parameter_names.get(ps[0])
        tensors_compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        prescale, postscale = self._scale_factors()
        handle = mpi_ops.grouped_allreduce_async_(list(tensors_compressed), name=name, op=self.op,
                                                  prescale_factor=prescale,
                                                  postscale_factor=postscale,
                                                  process_set=self.process_set)
        return handle, ctxs

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    # A group goes as one grouped allreduce once all its gradients are ready.
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        if not self.process_set.included():
            self._synchronized = True
            return
        started = set()
        for key in self._handles:
            started.update(key) if isinstance(key, tuple) else started.add(key)
        for p in self._requires_update - started:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, tuple):
                outputs = mpi_ops.synchronize(handle)
                for gp, output, gctx in zip(key, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    self._set_grad(gp, self._compression.decompress(output, gctx))
                self._group_counts[key] = 0
                continue
            p = key
            output = mpi_ops.synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            group = self._p_to_group.get(p)
            if group is not None:
                self._group_counts[group] = 0
            if p.grad.is_sparse:
                aggregated = self._compression.decompress(output, ctx)
                if not aggregated.is_sparse:
                    aggregated = aggregated.to_sparse()
                p.grad.zero_().add_(aggregated)
            else:
                self._set_grad(p, self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @staticmethod
    def _set_grad(p, value):
        if value is not p.grad:
            p.grad.copy_(value)

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize().")
        # Arena gradients are zeroed in place even when set_to_none: dropped, the next backward
        # pass would produce a fresh tensor to copy into the arena again. (Every gradient is
        # allreduced, a missing one as zeros, so step() sees the same values either way.)
        arena = [(p, p.grad) for p in self._arena_grads if p.grad is self._arena_grads[p]]
        result = super(self.__class__, self).zero_grad(*args, **kwargs)
        for p, g in arena:
            if p.grad is None:
                p.grad = g.zero_()
        return result


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=mpi_ops.global_process_set):
    """Wraps `optimizer`: gradients are averaged (op) over the ranks of process_set before
    step(). Same signature and meaning as horovod.torch.DistributedOptimizer: `groups` (a number
    of groups, or lists of parameters) allreduces gradients in grouped allreduces, `num_groups` is
    its deprecated spelling, sparse gradients are allreduced sparse (allgather of indices and
    values) unless sparse_as_dense. op=Adasum (Horovod's delta optimizer) raises
    NotImplementedError; hvd.allreduce(op=hvd.Adasum) itself works."""
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == mpi_ops.Adasum:
        raise NotImplementedError(
            "korovod: DistributedOptimizer(op=hvd.Adasum), Horovod's Adasum delta optimizer, is "
            "not built; hvd.allreduce(tensor, op=hvd.Adasum) is")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
