"""The collectives of one torch process group over its engine process set: what the Backend (torch
>= 2) and ProcessGroup (torch 1.13) classes both call. Each op is named `ptd.<group>.<seq>`, the
group's name and a per-group count, the same on every member since torch issues a group's ops in
the same order everywhere. CPU tensors are submitted where they lie (the client stages them into
the arena unless they are arena tensors already); CUDA tensors go through device.py."""
import torch

from korovod.torch.distributed import device, errors, wire
from korovod.torch.distributed.work import CompletedWork, KorovodWork, _seconds


def _flat(t):
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _unwire(w, like):
    """The engine's bytes `w` read as a tensor of `like`'s dtype and shape."""
    if w.dtype != like.dtype:
        w = w.contiguous().view(like.dtype)
    return w.reshape(like.shape)


def _nbytes(t):
    return t.numel() * t.element_size()


class Collectives:
    """client: the session's korovod._client.Client; psid: the engine process set; group: torch's
    group name; rank/size: this rank's in the group; timeout_s: the group's timeout."""

    def __init__(self, client, psid, group, rank, size, timeout_s):
        self.client, self.psid, self.group = client, psid, group
        self.rank, self.size = rank, size
        self.timeout_s = timeout_s
        self.world = False  # the world group (creator sets it): its end ends the session
        self._seq = 0
        self._orphans = []  # ops started by a call that then failed: their tensors stay alive

    # ---- plumbing ----

    def _begin(self, op, tensor):
        self._seq += 1
        name = "ptd.%s.%d" % (self.group, self._seq)
        return name, errors.OpDesc(self.client.rank, op, "%s (process set %d)" %
                                   (self.group, self.psid), errors.describe(name, tensor))

    def _timeout(self, opts):
        t = _seconds(getattr(opts, "timeout", None)) if opts is not None else None
        return t if t is not None else self.timeout_s

    def _submit_all(self, desc, submits, keep):
        """Calls each submit() -> client handle; a refusal raises the op's error, and the ops
        already started run on with `keep` alive."""
        handles = []
        try:
            for s in submits:
                handles.append(s())
        except RuntimeError as e:
            if handles:
                self._orphans.append((handles, keep))
            raise errors.failed(desc, e) from None
        return handles

    def _work(self, desc, submits, finish, opts, keep):
        return KorovodWork(desc, self._submit_all(desc, submits, keep), finish,
                           self._timeout(opts), keep)

    def _check(self, desc, tensors):
        out = []
        for t in tensors:
            t = wire.local(t)
            try:
                wire.check_device(t)
            except wire.Refused as e:
                raise errors.unsupported(desc, e) from None
            out.append(t)
        return out

    # ---- reductions ----

    def allreduce(self, tensors, opts, kind="allreduce"):
        name, desc = self._begin(kind, tensors[0] if len(tensors) == 1 else None)
        tensors = self._check(desc, tensors)
        plan = []
        try:
            for i, t in enumerate(tensors):
                op, pre = wire.engine_op(opts.reduceOp, t.dtype)
                w, dt = wire.reducible(t)
                buf = w if w.is_contiguous() else w.contiguous()
                plan.append((w, buf, dt, op, pre, name if len(tensors) == 1 else
                             "%s.%d" % (name, i)))
        except wire.Refused as e:
            raise errors.unsupported(desc, e) from None
        submits = []
        for w, buf, dt, op, pre, nm in plan:
            if buf.is_cuda:
                submits.append(device.allreduce(self, buf, dt, op, pre, nm))
            else:
                submits.append(lambda buf=buf, dt=dt, op=op, pre=pre, nm=nm: self.client.allreduce(
                    buf.data_ptr(), buf.data_ptr(), dt, list(buf.shape), nm, op, pre, 1.0,
                    self.psid))

        def finish():
            for w, buf, *_ in plan:
                if buf is not w:
                    w.copy_(buf)
            return list(tensors)

        return self._work(desc, submits, finish, opts, plan)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts, "allreduce_coalesced")

    def _reducescatter(self, desc, name, out, rows, opts):
        """Reduces `rows` (a (size, n) view of every rank's blocks) and writes this rank's row
        into `out`; returns (submit, finish step, keep)."""
        try:
            op, pre = wire.engine_op(opts.reduceOp, rows.dtype)
            w, dt = wire.reducible(rows)
        except wire.Refused as e:
            raise errors.unsupported(desc, e) from None
        src = w.reshape(self.size, -1)
        if src.is_cuda:
            result = torch.empty(src.shape[1:], dtype=src.dtype, device=src.device)
            submit = device.reducescatter(self, src, result, dt, op, pre, name)
            return submit, lambda h: _copy_into(out, result), (src, result)

        def finish(h):
            res = torch.empty(src.shape[1:], dtype=src.dtype)
            h.copy_output(res.data_ptr(), _nbytes(res))
            _copy_into(out, res)

        return (lambda: self.client.reducescatter(src.data_ptr(), dt, list(src.shape), name, op,
                                                  pre, 1.0, self.psid)), finish, src

    def reduce_scatter_tensor(self, outputs, inputs, opts, kind="reduce_scatter_tensor"):
        """outputs[i] (n elements) gets this rank's block of the reduction of inputs[i] (size * n
        elements): torch's _reduce_scatter_base / reduce_scatter_tensor and its coalesced form."""
        name, desc = self._begin(kind, inputs[0] if len(inputs) == 1 else None)
        outputs, inputs = self._check(desc, outputs), self._check(desc, inputs)
        steps = []
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            if inp.numel() != out.numel() * self.size or inp.dtype != out.dtype:
                raise errors.failed(desc, "input %s must have the output's dtype and %d times "
                                    "its %d elements" % (errors.describe(name, inp), self.size,
                                                         out.numel()))
            nm = name if len(inputs) == 1 else "%s.%d" % (name, i)
            steps.append(self._reducescatter(desc, nm, out, _flat(inp).reshape(self.size, -1),
                                             opts))
        return self._finish_steps(desc, steps, outputs, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        return self.reduce_scatter_tensor(outputs, inputs, opts, "reduce_scatter_tensor_coalesced")

    def reduce_scatter(self, outputs, input_lists, opts):
        """List form: outputs[0] gets the reduction of every rank's input_lists[0][rank]."""
        out, blocks = outputs[0], input_lists[0]
        name, desc = self._begin("reduce_scatter", out)
        [out] = self._check(desc, [out])
        blocks = self._check(desc, blocks)
        if len(blocks) != self.size:
            raise errors.failed(desc, "%d input tensors for a group of %d" %
                                (len(blocks), self.size))
        rows = torch.stack([_flat(b) for b in blocks])
        return self._finish_steps(desc, [self._reducescatter(desc, name, out, rows, opts)],
                                  [outputs[0]], opts)

    def _finish_steps(self, desc, steps, result, opts):
        handles = self._submit_all(desc, [s[0] for s in steps], steps)

        def finish():
            for (_submit, step, _keep), h in zip(steps, handles):
                step(h)
            return list(result)

        return KorovodWork(desc, handles, finish, self._timeout(opts), steps)

    def reduce(self, tensors, opts):
        """An allreduce of which only the root keeps the result (other ranks' tensors stay as
        they were)."""
        t = wire.local(tensors[0])
        tmp = t.detach().clone(memory_format=torch.contiguous_format)
        work = self.allreduce([tmp], opts, "reduce")
        root = opts.rootRank
        finish, work._finish = work._finish, None

        def keep_on_root():
            finish()
            if self.rank == root:
                t.copy_(tmp)
            return [t]

        work._finish = keep_on_root
        return work

    # ---- data movement ----

    def broadcast(self, tensors, opts):
        t = tensors[0]
        name, desc = self._begin("broadcast", t)
        [t] = self._check(desc, [t])
        w, dt = wire.movable(t)
        root = int(opts.rootRank)
        if w.is_cuda:
            submit = device.broadcast(self, w, dt, root, name)
        else:
            def submit():
                return self.client.broadcast(w.data_ptr(), dt, list(w.shape), root, name,
                                             self.psid)

        def finish():
            if w.data_ptr() != t.data_ptr() or not t.is_contiguous():
                t.copy_(_unwire(w, t))
            return [tensors[0]]

        return self._work(desc, [submit], finish, opts, w)

    def _allgather_rows(self, desc, name, src):
        """Every rank's `src` stacked: (submit, read(h) -> the (size, *src.shape) result, keep).
        `src` is contiguous, of an engine dtype."""
        shape = [1] + list(src.shape)
        if src.is_cuda:
            out = torch.empty([self.size] + list(src.shape), dtype=src.dtype, device=src.device)
            return device.allgather(self, src, out, self._dtype_of(src), name), \
                (lambda h: out), (src, out)

        def read(h):
            res = torch.empty([self.size] + list(src.shape), dtype=src.dtype)
            h.copy_output(res.data_ptr(), _nbytes(res))
            return res

        return (lambda: self.client.allgather(src.data_ptr(), self._dtype_of(src), shape, name,
                                              self.psid)), read, src

    @staticmethod
    def _dtype_of(w):
        return wire.movable(w)[1]

    def _gather_rows_into(self, desc, name, inp, outs):
        """(submit, step, keep): one engine allgather of `inp` whose row r goes into outs[r]."""
        src, _ = wire.movable(_flat(inp))
        submit, read, keep = self._allgather_rows(desc, name, src)

        def step(h):
            res = read(h)
            for r, o in enumerate(outs):
                o.copy_(_unwire(res[r], o))

        return submit, step, keep

    def allgather(self, output_lists, inputs, opts):
        """List form: output_lists[0][r] gets rank r's inputs[0]."""
        outs, inp = output_lists[0], inputs[0]
        name, desc = self._begin("allgather", inp)
        [inp] = self._check(desc, [inp])
        outs = self._check(desc, outs)
        if len(outs) != self.size or any(o.numel() != inp.numel() for o in outs):
            raise errors.failed(desc, "needs %d output tensors of %d elements" %
                                (self.size, inp.numel()))
        return self._finish_steps(desc, [self._gather_rows_into(desc, name, inp, outs)],
                                  [list(output_lists[0])], opts)

    def allgather_coalesced(self, output_lists, inputs, opts):
        """dist.all_gather_coalesced: output_lists[r][i] gets rank r's inputs[i]; one engine
        allgather per input, submitted together."""
        name, desc = self._begin("allgather_coalesced", inputs[0] if len(inputs) == 1 else None)
        inputs = self._check(desc, inputs)
        if len(output_lists) != self.size or any(len(o) != len(inputs) for o in output_lists):
            raise errors.failed(desc, "needs %d output lists of %d tensors" %
                                (self.size, len(inputs)))
        steps = []
        for i, inp in enumerate(inputs):
            outs = self._check(desc, [row[i] for row in output_lists])
            if any(o.numel() != inp.numel() for o in outs):
                raise errors.failed(desc, "output %d needs %d elements per rank" %
                                    (i, inp.numel()))
            steps.append(self._gather_rows_into(desc, "%s.%d" % (name, i), inp, outs))
        return self._finish_steps(desc, steps, output_lists, opts)

    def allgather_into_tensor(self, outputs, inputs, opts, kind="all_gather_into_tensor"):
        """outputs[i] (size * n elements) gets every rank's inputs[i] (n elements) in rank order:
        torch's _allgather_base / all_gather_into_tensor and its coalesced form."""
        name, desc = self._begin(kind, inputs[0] if len(inputs) == 1 else None)
        outputs, inputs = self._check(desc, outputs), self._check(desc, inputs)
        steps = []
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            if out.numel() != inp.numel() * self.size or out.dtype != inp.dtype:
                raise errors.failed(desc, "output of %s %s for %d ranks' input %s" % (
                    out.dtype, list(out.shape), self.size, errors.describe(name, inp)))
            nm = name if len(inputs) == 1 else "%s.%d" % (name, i)
            src, _ = wire.movable(_flat(inp))
            submit, read, keep = self._allgather_rows(desc, nm, src)
            steps.append((submit, self._gathered_into(out, read, src), keep))
        return self._finish_steps(desc, steps, outputs, opts)

    def _gathered_into(self, out, read, src):
        def step(h):
            if not src.is_cuda and out.is_contiguous() and not out.is_cuda:
                h.copy_output(out.data_ptr(), _nbytes(out))  # straight into the output
            else:
                _copy_into(out, read(h))
        return step

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        return self.allgather_into_tensor(outputs, inputs, opts, "allgather_into_tensor_coalesced")

    def _alltoall(self, desc, name, src, splits, out_rows):
        """src: (rows, ...) contiguous; splits: rows to each rank; returns (submit, read(h) ->
        (received rows tensor, received splits), keep)."""
        dt = self._dtype_of(src)
        if src.is_cuda:
            out = torch.empty([out_rows] + list(src.shape[1:]), dtype=src.dtype,
                              device=src.device)
            return device.alltoall(self, src, out, dt, splits, name), \
                (lambda h: (out, list(h.received_splits))), (src, out)

        def read(h):
            got = list(h.received_splits)
            res = torch.empty([sum(got)] + list(src.shape[1:]), dtype=src.dtype)
            h.copy_output(res.data_ptr(), _nbytes(res))
            return res, got

        return (lambda: self.client.alltoall(src.data_ptr(), dt, list(src.shape), splits, name,
                                             self.psid)), read, src

    def all_to_all_single(self, output, inp, output_splits, input_splits, opts):
        name, desc = self._begin("all_to_all_single", inp)
        [output, inp] = self._check(desc, [output, inp])
        d0 = inp.shape[0] if inp.dim() else 1
        splits = [int(s) for s in input_splits] or [d0 // self.size] * self.size
        if sum(splits) != d0 or len(splits) != self.size:
            raise errors.failed(desc, "input splits %s do not cover dimension 0 (%d) for %d ranks"
                                % (splits, d0, self.size))
        expect = [int(s) for s in output_splits] or None
        src, _ = wire.movable(inp)
        out_rows = output.shape[0] if output.dim() else 1
        submit, read, keep = self._alltoall(desc, name, src, splits, out_rows)
        handles = self._submit_all(desc, [submit], keep)

        def finish():
            res, got = read(handles[0])
            if expect is not None and got != expect:
                raise ValueError("received splits %s, output_split_sizes %s" % (got, expect))
            _copy_into(output, res)
            return [output]

        return KorovodWork(desc, handles, finish, self._timeout(opts), keep)

    def alltoall(self, outputs, inputs, opts):
        """List form: outputs[r] gets rank r's inputs[this rank]."""
        name, desc = self._begin("alltoall", None)
        outputs, inputs = self._check(desc, outputs), self._check(desc, inputs)
        if len(inputs) != self.size or len(outputs) != self.size:
            raise errors.failed(desc, "needs %d input and output tensors" % self.size)
        flat = [wire.movable(_flat(t))[0].reshape(-1) for t in inputs]
        src = torch.cat(flat) if flat else torch.empty(0, dtype=torch.uint8)
        src = src.contiguous()
        sizes = [f.numel() for f in flat]
        out_bytes = [wire.movable(_flat(o))[0].numel() for o in outputs]
        submit, read, keep = self._alltoall(desc, name, src, sizes, sum(out_bytes))
        handles = self._submit_all(desc, [submit], keep)

        def finish():
            res, got = read(handles[0])
            if got != out_bytes:
                raise ValueError("received %s elements from the ranks, outputs hold %s" %
                                 (got, out_bytes))
            for o, part in zip(outputs, torch.split(res, got)):
                o.copy_(_unwire(part, o))
            return list(outputs)

        return KorovodWork(desc, handles, finish, self._timeout(opts), keep)

    def gather(self, output_lists, inputs, opts):
        """Every rank's inputs[0] to the root's output_lists[0] (an all_to_all sending to the root
        only)."""
        inp, root = inputs[0], int(opts.rootRank)
        name, desc = self._begin("gather", inp)
        [inp] = self._check(desc, [inp])
        src, _ = wire.movable(_flat(inp))
        src = src.reshape(-1)
        splits = [src.numel() if r == root else 0 for r in range(self.size)]
        outs = output_lists[0] if self.rank == root else []
        submit, read, keep = self._alltoall(desc, name, src, splits,
                                            src.numel() * self.size if outs else 0)
        handles = self._submit_all(desc, [submit], keep)

        def finish():
            res, got = read(handles[0])
            for o, part in zip(outs, torch.split(res, got)):
                o.copy_(_unwire(part, o))
            return [list(outs)]

        return KorovodWork(desc, handles, finish, self._timeout(opts), keep)

    def scatter(self, outputs, input_lists, opts):
        """The root's input_lists[0][r] to rank r's outputs[0] (an all_to_all from the root)."""
        out, root = outputs[0], int(opts.rootRank)
        name, desc = self._begin("scatter", out)
        [out] = self._check(desc, [out])
        w = wire.movable(_flat(out))[0]
        if self.rank == root:
            parts = [wire.movable(_flat(t))[0].reshape(-1) for t in input_lists[0]]
            src = torch.cat(parts).contiguous()
            splits = [p.numel() for p in parts]
        else:  # sends nothing, in the dtype the root sends
            src = torch.empty(0, dtype=w.dtype, device=out.device)
            splits = [0] * self.size
        n = w.numel()
        submit, read, keep = self._alltoall(desc, name, src, splits, n)
        handles = self._submit_all(desc, [submit], keep)

        def finish():
            res, _ = read(handles[0])
            out.copy_(_unwire(res, out))
            return [out]

        return KorovodWork(desc, handles, finish, self._timeout(opts), keep)

    def barrier(self, opts):
        name, desc = self._begin("barrier", None)
        return self._work(desc, [lambda: self.client.barrier(self.psid, name)], lambda: [], opts,
                          None)

    def point_to_point(self, op):
        _name, desc = self._begin(op, None)
        raise errors.unsupported(desc, "the korovod engine has collectives only, no "
                                 "point-to-point operations (send/recv); use all_to_all_single "
                                 "or broadcast, or a gloo group for point-to-point")

    def completed(self, op, result):
        _name, desc = self._begin(op, None)
        return CompletedWork(desc, result)


def _copy_into(dst, src):
    dst.copy_(_unwire(src, dst))
