"""hvd.elastic (korovod.elastic, korovod.torch.elastic) in one process, without a sidecar: the
collectives and the membership query are stand-ins.

Run: PYTHONPATH=python:build/python python3 -m pytest -q tests/python/test_elastic_api.py
"""
import pytest
import torch

import korovod.elastic as kelastic
from korovod.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from korovod.torch import functions, mpi_ops
import korovod.torch.elastic as tel
from korovod.torch.elastic import ElasticSampler, TorchState


class FakeBcast:
    """bcast_object: returns `answer` (rank 0's object) when set, else the object itself."""

    def __init__(self):
        self.calls = []
        self.answer = None

    def __call__(self, obj):
        self.calls.append(obj)
        return obj if self.answer is None else self.answer


class Membership:
    def __init__(self, epoch=0, formed=0, version=0, update=0):
        self.value = (epoch, formed, version, update)

    def __call__(self):
        return self.value


def object_state(membership=None, **kwargs):
    bcast = FakeBcast()
    state = kelastic.ObjectState(bcast, lambda: 0, get_membership=membership or Membership(),
                                 **kwargs)
    return state, bcast


@pytest.fixture
def world(monkeypatch):
    """A job of `size` ranks seen from `rank`, with no sidecar behind it."""
    w = {"rank": 0, "size": 1}
    monkeypatch.setattr(mpi_ops, "rank", lambda: w["rank"])
    monkeypatch.setattr(mpi_ops, "size", lambda: w["size"])
    return w


# --- State / ObjectState -------------------------------------------------------------------

def test_object_state_save_restore():
    state, _ = object_state(epoch=1, losses=[1.0])
    state.epoch = 5
    state.losses.append(2.0)
    state.restore()
    assert state.epoch == 1 and state.losses == [1.0]

    state.epoch = 2
    state.losses.append(3.0)
    state.save()
    state.losses.append(4.0)  # after the save: undone by restore, the snapshot is a copy
    state.restore()
    assert state.epoch == 2 and state.losses == [1.0, 3.0]
    state.losses.append(5.0)  # the restored list is a copy too
    state.restore()
    assert state.losses == [1.0, 3.0]


def test_object_state_sync_takes_rank0_state():
    state, bcast = object_state(epoch=1, batch=0)
    state.epoch = 9  # uncommitted: sync sends the committed state, as Horovod does
    bcast.answer = {"epoch": 4, "batch": 7}
    state.sync()
    assert bcast.calls == [{"epoch": 1, "batch": 0}]
    assert (state.epoch, state.batch) == (4, 7)
    state.epoch = 0
    state.restore()  # the synced state is the committed one
    assert state.epoch == 4


def test_object_state_without_attributes_does_not_broadcast():
    state, bcast = object_state()
    state.sync()
    assert bcast.calls == []


def test_commit_when_not_elastic_saves_without_a_collective():
    state, bcast = object_state(Membership(0, 0, 0, 0), epoch=1)
    state.epoch = 3
    state.commit()
    assert bcast.calls == []
    state.epoch = 4
    state.restore()
    assert state.epoch == 3


def test_check_host_updates_nothing_moved():
    state, bcast = object_state(Membership(1, 5, 5, 0), epoch=1)
    state.commit()
    state.check_host_updates()
    assert bcast.calls == [(5, 5, 0), (5, 5, 0)]


def test_check_host_updates_removed_skips_sync_and_fires_once():
    m = Membership(1, 5, 7, 1)
    state, bcast = object_state(m, epoch=1)
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync is True
    assert bcast.calls == [(5, 7, 1)]
    state.check_host_updates()  # the same change is not reported twice
    assert bcast.calls[-1] == (7, 7, 0)


@pytest.mark.parametrize("update", [2, 3])
def test_check_host_updates_added_or_mixed_syncs(update):
    state, _ = object_state(Membership(2, 3, 4, update), epoch=1)
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.check_host_updates()
    assert e.value.skip_sync is False


def test_check_host_updates_after_a_new_epoch_formed():
    m = Membership(1, 5, 7, 1)
    state, _ = object_state(m)
    with pytest.raises(HostsUpdatedInterrupt):
        state.check_host_updates()
    m.value = (2, 7, 7, 0)  # the reset formed epoch 2 at version 7
    state.check_host_updates()
    m.value = (2, 7, 9, 2)
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.check_host_updates()
    assert e.value.skip_sync is False


def test_check_host_updates_follows_rank0():
    state, bcast = object_state(Membership(1, 5, 5, 0))
    bcast.answer = (5, 6, 1)  # rank 0 already sees version 6
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.check_host_updates()
    assert e.value.skip_sync is True
    bcast.answer = None
    state.check_host_updates()  # 6 is now known here as well
    assert bcast.calls[-1] == (6, 6, 0)


def test_host_update_result_bits():
    r = kelastic.HostUpdateResult
    assert (r.no_update, r.removed, r.added, r.mixed) == (0, 1, 2, 3)
    assert r.removed | r.added == r.mixed


def test_abstract_state():
    state = kelastic.State(FakeBcast(), lambda: 0, get_membership=Membership())
    for method in (state.save, state.restore, state.sync):
        with pytest.raises(NotImplementedError):
            method()
    state.reset()  # optional for subclasses


# --- run_fn ---------------------------------------------------------------------------------

class Recorder(kelastic.ObjectState):
    def __init__(self, **kwargs):
        self.log = []
        super().__init__(FakeBcast(), lambda: 0, get_membership=Membership(), **kwargs)

    def save(self):
        self.log.append("save")
        super().save()

    def restore(self):
        self.log.append("restore")
        super().restore()

    def sync(self):
        self.log.append("sync")
        super().sync()

    def reset(self):
        self.log.append("reset_state")


@pytest.fixture
def elastic_job(monkeypatch):
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")


def test_run_fn_in_a_static_job_lets_the_internal_error_end_the_trainer(monkeypatch):
    # No next epoch can form without the lost rank: retrying would spin on a broken world.
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    state = Recorder(step=0)
    resets = []

    def train(state):
        raise HorovodInternalError("rank 1 died")

    with pytest.raises(HorovodInternalError, match="rank 1 died"):
        kelastic.run_fn(train, lambda: resets.append(1))(state)
    assert resets == []


def test_run_fn_internal_error_restores_resets_and_syncs(elastic_job):
    state = Recorder(step=0)
    state.register_reset_callbacks([lambda: state.log.append("callback")])
    resets = []

    def train(state, limit, scale=1):
        state.log.append("train")
        while state.step < limit:
            state.step += 1
            if state.step == 2:
                state.commit()
            if state.step == 3 and not resets:
                raise HorovodInternalError("a rank died")
        return state.step * scale

    wrapped = kelastic.run_fn(train, lambda: (resets.append(1), state.log.append("reset")))
    assert wrapped.__name__ == "train"
    assert wrapped(state, 4, scale=10) == 40
    assert resets == [1]
    assert state.log == ["sync", "train", "save", "restore", "reset", "reset_state", "callback",
                         "sync", "train"]


def test_run_fn_removed_hosts_reset_without_sync():
    state = Recorder()
    raised = []

    def train(state):
        state.log.append("train")
        if len(raised) < 2:
            raised.append(1)
            raise HostsUpdatedInterrupt(skip_sync=len(raised) == 1)
        return "done"

    wrapped = kelastic.run_fn(train, lambda: state.log.append("reset"))
    assert wrapped(state) == "done"
    # skip_sync=True: no sync before the retry; skip_sync=False: a sync.
    assert state.log == ["sync", "train", "reset", "reset_state", "train", "reset", "reset_state",
                         "sync", "train"]


def test_run_fn_failed_sync_is_retried(elastic_job):
    state = Recorder()
    failures = [HorovodInternalError("sync broke")]
    real_sync = state.sync

    def sync():
        real_sync()
        if failures:
            raise failures.pop()

    state.sync = sync
    wrapped = kelastic.run_fn(lambda s: "ok", lambda: state.log.append("reset"))
    assert wrapped(state) == "ok"
    assert state.log == ["sync", "restore", "reset", "reset_state", "sync"]


def test_run_fn_other_errors_propagate():
    state = Recorder()

    def train(state):
        raise ValueError("user bug")

    with pytest.raises(ValueError):
        kelastic.run_fn(train, lambda: None)(state)


def test_torch_run_resets_by_shutdown_and_init(monkeypatch):
    calls = []
    monkeypatch.setattr(mpi_ops, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(mpi_ops, "init", lambda *a, **k: calls.append("init"))
    state = Recorder()
    attempts = []

    @tel.run
    def train(state):
        attempts.append(1)
        if len(attempts) == 1:
            raise HostsUpdatedInterrupt(True)
        return len(attempts)

    assert train(state) == 2
    assert calls == ["shutdown", "init"]


# --- TorchState -----------------------------------------------------------------------------

def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer


def _step(model, optimizer):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_torch_state_save_restore(world):
    model, optimizer = _model_and_optimizer()
    state = TorchState(model, optimizer, epoch=0, batch=0)
    assert state.model is model and state.optimizer is optimizer

    _step(model, optimizer)
    state.epoch, state.batch = 1, 3
    state.save()
    saved = _params(model)
    momentum = [optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]

    _step(model, optimizer)
    optimizer.param_groups[0]["lr"] = 0.5
    state.epoch = 2
    assert any(not torch.equal(a, b) for a, b in zip(saved, _params(model)))

    state.restore()
    assert state.model is model and state.optimizer is optimizer  # restored in place
    assert all(torch.equal(a, b) for a, b in zip(saved, _params(model)))
    assert all(torch.equal(m, optimizer.state[p]["momentum_buffer"])
               for m, p in zip(momentum, model.parameters()))
    assert optimizer.param_groups[0]["lr"] == 0.1
    assert (state.epoch, state.batch) == (1, 3)
    # The restored optimizer still steers the model's own parameters.
    _step(model, optimizer)
    assert any(not torch.equal(a, b) for a, b in zip(saved, _params(model)))


def test_torch_state_without_optimizer_and_assignment(world):
    model, optimizer = _model_and_optimizer()
    state = TorchState(model=model, step=0)
    assert state.optimizer is None
    other, _ = _model_and_optimizer()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    state.model = other  # adopted and saved
    assert state.model is other
    expected = _params(other)
    with torch.no_grad():
        for p in other.parameters():
            p.zero_()
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(expected, _params(other)))


def test_torch_state_sync_uses_korovod_broadcasts(world, monkeypatch):
    model, optimizer = _model_and_optimizer()
    sampler = ElasticSampler(list(range(10)), shuffle=False)
    calls = []

    def broadcast_parameters(params, root_rank, **kw):
        calls.append(("parameters", root_rank))
        assert set(params) == set(model.state_dict())
        for t in params.values():
            t.fill_(0.25)  # rank 0's values

    def broadcast_optimizer_state(opt, root_rank, **kw):
        calls.append(("optimizer", root_rank))
        assert opt is optimizer

    def broadcast_object(obj, root_rank=0, name=None, **kw):
        if not isinstance(obj, dict):
            calls.append(("object", root_rank, obj))
            return obj
        calls.append(("object", root_rank, sorted(obj)))
        if "processed_num" in obj:
            return dict(obj, processed_num=4)
        return dict(obj, epoch=7)

    monkeypatch.setattr(functions, "broadcast_parameters", broadcast_parameters)
    monkeypatch.setattr(functions, "broadcast_optimizer_state", broadcast_optimizer_state)
    monkeypatch.setattr(functions, "broadcast_object", broadcast_object)
    state = TorchState(model, optimizer, sampler=sampler, epoch=1)
    state.sync()
    assert ("parameters", 0) in calls and ("optimizer", 0) in calls
    assert ("object", 0, ["epoch", "processed_num"]) in calls
    assert ("object", 0, ["epoch"]) in calls  # the plain attributes
    assert state.epoch == 7
    assert all(torch.all(p == 0.25) for p in model.parameters())
    assert sampler.processed_num == 4 and sampler.remaining_indices == list(range(4, 10))

    # commit: save, then the membership check broadcasts through broadcast_object too.
    monkeypatch.setattr(mpi_ops, "_membership", lambda: (1, 2, 3, 1), raising=False)
    calls.clear()
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync is True
    assert calls == [("object", 0, (2, 3, 1))]


def test_torch_state_lr_scheduler_is_restored(world):
    model, optimizer = _model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    state = TorchState(model, optimizer, scheduler=scheduler)
    _step(model, optimizer)
    scheduler.step()
    state.save()
    _step(model, optimizer)
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    state.restore()
    assert state.scheduler is scheduler and scheduler.last_epoch == 1
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)


@pytest.mark.parametrize("make,losses", [
    (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5), [None, None]),
    # No improvement after the first loss: each later step halves lr.
    (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0),
     [1.0, 2.0, 3.0]),
], ids=["StepLR", "ReduceLROnPlateau"])
def test_torch_state_restores_the_users_scheduler_in_place(world, make, losses):
    """Issue 32's repro: commit, two scheduler steps, restore. On torch >= 2.0 StepLR no longer
    derives from _LRScheduler; taken for a plain object, it was restored as a deep copy, the
    user's scheduler left detached at 0.25. Here the user's object itself goes back, lr with it."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = make(optimizer)
    state = TorchState(model, optimizer, scheduler=scheduler)
    assert type(state._handlers["scheduler"]).__name__ == "LRSchedulerStateHandler"

    def step(loss):
        optimizer.step()
        scheduler.step() if loss is None else scheduler.step(loss)

    state.commit()
    for loss in losses:
        step(loss)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)
    assert scheduler.last_epoch == len(losses)
    state.restore()
    assert state.scheduler is scheduler and state.optimizer is optimizer
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1.0)
    assert scheduler.last_epoch == 0
    # The restored scheduler still steers the user's optimizer, from where it was committed.
    for loss in losses[:2]:
        step(loss)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 if losses[0] else 0.25)


def test_torch_state_reset_repartitions_sampler(world):
    sampler = ElasticSampler(list(range(12)), shuffle=False)
    state = TorchState(sampler=sampler)
    world["size"], world["rank"] = 3, 2
    state.on_reset()
    assert (sampler.num_replicas, sampler.rank) == (3, 2)
    assert list(sampler) == [2, 5, 8, 11]


# --- ElasticSampler -------------------------------------------------------------------------

def _partitions(world, n, size, **kwargs):
    out = []
    for r in range(size):
        world["size"], world["rank"] = size, r
        out.append(list(ElasticSampler(list(range(n)), **kwargs)))
    return out


@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_partitions_the_dataset(world, shuffle):
    parts = _partitions(world, 10, 3, shuffle=shuffle, seed=3)
    assert [len(p) for p in parts] == [4, 4, 4]
    flat = [i for p in parts for i in p]
    assert set(flat) == set(range(10)) and len(flat) == 12  # padded by wrapping around
    if not shuffle:
        assert parts[0] == [0, 3, 6, 9]
    else:
        assert _partitions(world, 10, 3, shuffle=True, seed=3) == parts  # the same on every rank


def test_sampler_epochs_shuffle_differently(world):
    world["size"] = 1
    sampler = ElasticSampler(list(range(20)), seed=1)
    first = list(sampler)
    sampler.set_epoch(1)
    assert sorted(list(sampler)) == list(range(20)) and list(sampler) != first


def test_sampler_record_batch_and_state_round_trip(world):
    world["size"], world["rank"] = 2, 1
    sampler = ElasticSampler(list(range(20)), shuffle=False)
    assert len(sampler) == 10
    it = list(sampler)
    assert sampler.get_indices(1, 3) == it[3:6]
    sampler.record_batch(0, 3)
    sampler.record_batch(1, 3)
    assert sampler.processed_num == 12
    assert sampler.state_dict() == {"epoch": 0, "processed_num": 12}

    # A reset after a resize re-partitions what is left of the epoch.
    world["size"], world["rank"] = 4, 3
    other = ElasticSampler(list(range(20)), shuffle=False)
    other.load_state_dict(sampler.state_dict())
    assert other.remaining_indices == list(range(12, 20))
    assert len(other) == 2 and list(other) == [15, 19]

    sampler.record_indices([0, 2])  # two samples here, and as many on every other rank
    assert sampler.processed_num == 16
    sampler.set_epoch(1)
    assert sampler.state_dict() == {"epoch": 1, "processed_num": 0}
    assert len(sampler) == 5


def test_sampler_pads_when_fewer_remain_than_ranks(world):
    world["size"], world["rank"] = 4, 3
    sampler = ElasticSampler(list(range(9)), shuffle=False)
    sampler.load_state_dict({"epoch": 0, "processed_num": 8})
    assert len(sampler) == 1 and list(sampler) == [8]


def test_sampler_in_a_data_loader(world):
    world["size"], world["rank"] = 2, 0
    dataset = torch.arange(10)
    sampler = ElasticSampler(dataset, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, sampler=sampler)
    batches = [b.tolist() for b in loader]
    assert batches == [[0, 2], [4, 6], [8]]


# --- Horovod's module paths -----------------------------------------------------------------

def test_horovod_paths_resolve_to_korovod():
    import horovod.torch as hvd
    import korovod.torch as kvd
    assert hvd.elastic is tel and kvd.elastic is tel
    assert hvd.elastic.run is tel.run
    assert hvd.elastic.TorchState is TorchState
    assert hvd.elastic.ElasticSampler is ElasticSampler
    assert hvd.elastic.ObjectState is kelastic.ObjectState
    assert hvd.elastic.State is kelastic.State

    from horovod.torch.elastic import ElasticSampler as HS, TorchState as HT, run
    from horovod.torch.elastic.sampler import ElasticSampler as HS2
    from horovod.torch.elastic.state import TorchState as HT2
    assert HS is HS2 is ElasticSampler and HT is HT2 is TorchState and run is tel.run

    import horovod.common.elastic as hce
    assert hce.State is kelastic.State and hce.ObjectState is kelastic.ObjectState
    assert hce.run_fn is kelastic.run_fn

    from horovod.common.exceptions import HorovodInternalError as HIE, HostsUpdatedInterrupt as HUI
    assert HIE is HorovodInternalError and HUI is HostsUpdatedInterrupt
