"""Run under korovodrun (3 ranks or more): Horovod's process set semantics in both modes, the
int16/bool dtypes, reducescatter on a process set and collectives while a rank has joined.
argv[1]: "dynamic" (HOROVOD_DYNAMIC_PROCESS_SETS=1), "static" (sets given to hvd.init) or
"static_duplicate" (a duplicate in hvd.init's list). Prints 'rank R process sets MODE OK'."""
import os
import sys

import torch

import korovod.torch as hvd

mode = sys.argv[1]


def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        return str(e)
    raise AssertionError("%s did not raise %s" % (fn.__name__, exc.__name__))


if mode == "static":
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    low, high = hvd.ProcessSet([1, 0]), hvd.ProcessSet([2, 1])
    hvd.init(process_sets=[low, high])
    r, n = hvd.rank(), hvd.size()
    assert low.ranks == [0, 1] and high.ranks == [1, 2]
    assert 0 < low.process_set_id < high.process_set_id
    for ps in (low, high):
        if ps.included():
            got = hvd.allreduce(torch.full((3,), float(r + 1)), op=hvd.Sum, process_set=ps)
            assert torch.equal(got, torch.full((3,), float(sum(m + 1 for m in ps.ranks)))), got
            assert ps.size() == 2 and ps.rank() == ps.ranks.index(r)
        else:
            assert raises(ValueError, ps.rank) == "Process is not part of provided process set."
    # Dynamic changes need HOROVOD_DYNAMIC_PROCESS_SETS, as in Horovod.
    assert "HOROVOD_DYNAMIC_PROCESS_SETS" in raises(ValueError, hvd.add_process_set, [0, 2])
    assert "HOROVOD_DYNAMIC_PROCESS_SETS" in raises(ValueError, hvd.remove_process_set, low)
    assert hvd.remove_process_set(hvd.global_process_set) is False
elif mode == "static_duplicate":
    first, again, other = hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 0]), hvd.ProcessSet([0, 2])
    msg = raises(ValueError, hvd.init, process_sets=[first, again, other])
    assert "entry number 1 is a duplicate" in msg, msg
    assert again.process_set_id is None and other.process_set_id > first.process_set_id > 0
    r, n = hvd.rank(), hvd.size()
    if first.included():  # the unique entries were registered
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=first)
        assert torch.equal(got, torch.full((2,), 2.0)), got
else:
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    # int16 and bool (logical or for sum and max, and for min and product).
    x = torch.tensor([r, -r, 300 * r], dtype=torch.int16)
    tri = sum(range(n))
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum),
                       torch.tensor([tri, -tri, 300 * tri], dtype=torch.int16))
    assert hvd.allgather(x).dtype == torch.int16
    b = torch.tensor([r == 0, True, False])
    assert torch.equal(hvd.allreduce(b, op=hvd.Sum), torch.tensor([True, True, False]))
    assert torch.equal(hvd.allreduce(b, op=hvd.Min), torch.tensor([n == 1, True, False]))
    assert torch.equal(hvd.broadcast(b, root_rank=0), torch.tensor([True, True, False]))

    even = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odd = hvd.add_process_set([k for k in range(n) if k % 2 == 1])
    assert "duplicate" in raises(ValueError, hvd.add_process_set, list(range(n)))
    assert "duplicate" in raises(ValueError, hvd.add_process_set, even.ranks)
    mine = even if r % 2 == 0 else odd
    # Reducescatter on a set: rows split over the set's ranks, the first getting one more.
    m, pos = mine.size(), mine.rank()
    rows = 2 * m + 1
    rs = hvd.reducescatter(torch.full((rows, 2), float(r + 1)), op=hvd.Sum, process_set=mine)
    want_rows = 2 + (1 if pos == 0 else 0)
    assert rs.shape == (want_rows, 2), rs.shape
    assert torch.equal(rs, torch.full((want_rows, 2), float(sum(k + 1 for k in mine.ranks)))), rs
    rsi = hvd.reducescatter(torch.ones(m * 2, dtype=torch.int16), op=hvd.Sum, process_set=mine)
    assert torch.equal(rsi, torch.full((2,), m, dtype=torch.int16)), rsi
    # Removal: collective, invalidates, and the same ranks can come back under a new id.
    old_id = odd.process_set_id
    assert hvd.remove_process_set(odd) is True
    assert odd.process_set_id is None and odd.size() is None
    assert hvd.remove_process_set(odd) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    if r % 2 == 1:
        raises(ValueError, hvd.allreduce, torch.ones(1), process_set=odd)
    odd2 = hvd.add_process_set([k for k in range(n) if k % 2 == 1])
    assert odd2.process_set_id > old_id
    assert hvd.remove_process_set(odd2) and hvd.remove_process_set(even)
    # While rank 0 has joined: allgather and broadcast fail on the others, allreduce averages
    # over the whole world (rank 0 adds zeros).
    if r == 0:
        last = hvd.join()
    else:
        msg = raises(RuntimeError, hvd.allgather, torch.ones(2, 2))
        assert "has joined" in msg and "rank 0" in msg, msg
        msg = raises(RuntimeError, hvd.broadcast, torch.ones(2), root_rank=1, name="bc_joined")
        assert "bc_joined" in msg and "has joined" in msg, msg
        avg = hvd.allreduce(torch.full((2,), float(n)), name="avg_joined")
        assert torch.equal(avg, torch.full((2,), float(n - 1))), avg
        last = hvd.join()
    assert last != 0 and hvd.allgather_object(last) == [last] * n
hvd.barrier()
print("rank %d process sets %s OK" % (r, mode), flush=True)
