// Argument checks, pre/post-processing (copies, scaling) and algorithm choice for each collective.
// A bad argument is an InvalidArgument and leaves the communicator usable; a transport failure
// breaks it (peers are in an unknown state) and names the peer.
#include "runtime/collectives/collectives.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/algorithms/algorithms.h"
#include "runtime/reduce/reduce_kernels.h"
#include "runtime/world/communicator.h"

namespace korovod {
namespace {

bool ValidType(DataType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(kLastDataType);
}
bool ValidOp(ReduceOp op) {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kProduct);
}

// Resolves the set and checks what every collective needs.
StatusOr<const ProcessSet*> Prepare(Communicator& comm, const ProcessSet* set, const char* what) {
  if (!comm.broken().ok()) {
    return Status(comm.broken().code(), std::string(what) + ": communicator is broken by an " +
                                            "earlier failure: " + comm.broken().message());
  }
  const ProcessSet* s = set ? set : &comm.world();
  if (!s->contains_me()) {
    return FailedPrecondition(std::string(what) + ": rank " + std::to_string(comm.rank()) +
                              " is not a member of the process set");
  }
  for (int r : s->ranks()) {
    if (r >= comm.size()) {
      return InvalidArgument(std::string(what) + ": process set names rank " + std::to_string(r) +
                             " outside the world of size " + std::to_string(comm.size()));
    }
  }
  return s;
}

Status Run(Communicator& comm, const char* what, Status s) {
  if (s.ok()) return s;
  return comm.MarkBroken(
      s.WithContext(std::string(what) + " on rank " + std::to_string(comm.rank())));
}

Status CheckCounts(std::span<const size_t> counts, int n, const char* what, const char* name) {
  if (static_cast<int>(counts.size()) != n) {
    return InvalidArgument(std::string(what) + ": " + name + " has " +
                           std::to_string(counts.size()) + " entries for a set of " +
                           std::to_string(n) + " ranks");
  }
  return OkStatus();
}

size_t Total(std::span<const size_t> counts) {
  size_t t = 0;
  for (size_t c : counts) t += c;
  return t;
}

}  // namespace

const char* AllreduceAlgorithmName(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kAuto:
      return "auto";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case AllreduceAlgorithm::kSharedMemory:
      return "shared_memory";
    case AllreduceAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

Status Allreduce(Communicator& comm, const AllreduceOptions& o) {
  constexpr const char* kWhat = "allreduce";
  KV_ASSIGN_OR_RETURN(const ProcessSet* set, Prepare(comm, o.set, kWhat));
  if (!ValidType(o.type) || !ValidOp(o.op))
    return InvalidArgument("allreduce: invalid dtype or op");
  if (o.count > 0 && (o.input == nullptr || o.output == nullptr)) {
    return InvalidArgument("allreduce: null buffer for " + std::to_string(o.count) + " elements");
  }
  if (o.count == 0) return OkStatus();
  const size_t bytes = o.count * DataTypeSize(o.type);
  auto* out = static_cast<std::byte*>(o.output);
  const double postscale = o.postscale;
  const int divisor = o.op == ReduceOp::kAverage ? set->size() : 1;
  SharedWindows* windows = comm.transport().shared_windows();
  AllreduceAlgorithm algo = o.algorithm;
  const bool hierarchical = comm.hierarchy().on && set->size() == comm.size();
  if (algo == AllreduceAlgorithm::kAuto) {
    algo = bytes <= comm.small_allreduce_max_bytes() ? AllreduceAlgorithm::kRecursiveDoubling
           : hierarchical                            ? AllreduceAlgorithm::kHierarchical
           : windows != nullptr                      ? AllreduceAlgorithm::kSharedMemory
                                                     : AllreduceAlgorithm::kRing;
  }
  if (algo == AllreduceAlgorithm::kHierarchical && !hierarchical) {
    return InvalidArgument("allreduce: the hierarchical algorithm needs the world set of a world " +
                           std::string("whose hierarchy is on (here: ") + comm.hierarchy().reason +
                           ")");
  }
  if (algo == AllreduceAlgorithm::kSharedMemory && set->size() > 1) {
    if (windows == nullptr) {
      return InvalidArgument(std::string("allreduce: the shared_memory algorithm needs the shm ") +
                             "transport with a window (this one is " + comm.transport_name() + ")");
    }
    AlgorithmContext ctx{comm, *set, comm.OpDeadline(bytes)};
    // Straight from the input into the window: no copy into the output first.
    Status s = SharedMemoryAllreduce(ctx, *windows, static_cast<const std::byte*>(o.input), out,
                                     o.count, o.type, o.op, o.prescale, postscale, divisor);
    if (s.ok()) return s;
    return Run(comm, kWhat,
               s.WithContext(std::to_string(bytes) + " bytes, " + DataTypeName(o.type) + " " +
                             ReduceOpName(o.op)));
  }
  if (o.input != o.output) std::memcpy(out, o.input, bytes);
  ScaleInPlace(out, o.count, o.type, o.prescale);
  if (set->size() == 1) {
    ScaleInPlace(out, o.count, o.type, postscale, divisor);
    return OkStatus();
  }
  AlgorithmContext ctx{comm, *set, comm.OpDeadline(bytes)};
  Status s;
  if (algo == AllreduceAlgorithm::kHierarchical) {
    AlgorithmContext local{comm, comm.local_set(), ctx.deadline, comm.local_transport()};
    AlgorithmContext cross{comm, comm.cross_set(), ctx.deadline};
    s = HierarchicalAllreduce(local, cross, out, o.count, o.type, o.op, postscale, divisor,
                              comm.small_allreduce_max_bytes());
  } else if (algo == AllreduceAlgorithm::kRing) {
    s = RingAllreduce(ctx, out, o.count, o.type, o.op, postscale, divisor);
  } else {
    PhaseScope phase(ctx, "RECURSIVE_DOUBLING");
    s = RecursiveDoublingAllreduce(ctx, out, o.count, o.type, o.op, postscale, divisor);
  }
  if (s.ok()) return s;  // the context string is built only on failure: this is the hot path
  return Run(comm, kWhat,
             s.WithContext(std::to_string(bytes) + " bytes, " + DataTypeName(o.type) + " " +
                           ReduceOpName(o.op)));
}

Status Allgather(Communicator& comm, const AllgatherOptions& o) {
  constexpr const char* kWhat = "allgather";
  KV_ASSIGN_OR_RETURN(const ProcessSet* set, Prepare(comm, o.set, kWhat));
  KV_RETURN_IF_ERROR(CheckCounts(o.counts, set->size(), kWhat, "counts"));
  if (!ValidType(o.type)) return InvalidArgument("allgather: invalid dtype");
  const size_t esize = DataTypeSize(o.type);
  const size_t mine = o.counts[set->rank()];
  if ((mine > 0 && o.input == nullptr) || (Total(o.counts) > 0 && o.output == nullptr)) {
    return InvalidArgument("allgather: null buffer");
  }
  const BlockLayout blocks = BlocksOf(o.counts.data(), set->size(), esize);
  auto* out = static_cast<std::byte*>(o.output);
  if (mine > 0) std::memmove(out + blocks[set->rank()], o.input, mine * esize);
  if (set->size() == 1) return OkStatus();
  AlgorithmContext ctx{comm, *set, comm.OpDeadline(Total(o.counts) * esize)};
  if (comm.hierarchy().on && set->size() == comm.size() && comm.host_layout().contiguous()) {
    AlgorithmContext local{comm, comm.local_set(), ctx.deadline, comm.local_transport()};
    AlgorithmContext cross{comm, comm.cross_set(), ctx.deadline};
    const bool leader = comm.local_set().rank() == 0;
    return Run(comm, kWhat,
               HierarchicalAllgather(local, leader ? &cross : nullptr, out, blocks,
                                     comm.host_layout().HostFirst()));
  }
  PhaseScope phase(ctx, "RING_ALLGATHER");
  return Run(comm, kWhat, RingAllgather(ctx, out, blocks));
}

Status Broadcast(Communicator& comm, const BroadcastOptions& o) {
  constexpr const char* kWhat = "broadcast";
  KV_ASSIGN_OR_RETURN(const ProcessSet* set, Prepare(comm, o.set, kWhat));
  if (!ValidType(o.type)) return InvalidArgument("broadcast: invalid dtype");
  if (o.root < 0 || o.root >= set->size()) {
    return InvalidArgument("broadcast: root " + std::to_string(o.root) + " is not a rank of the " +
                           std::to_string(set->size()) + "-rank set");
  }
  if (o.count > 0 && o.buffer == nullptr) return InvalidArgument("broadcast: null buffer");
  AlgorithmContext ctx{comm, *set, comm.OpDeadline(o.count * DataTypeSize(o.type))};
  auto* buf = static_cast<std::byte*>(o.buffer);
  const size_t len = o.count * DataTypeSize(o.type);
  if (comm.hierarchy().on && set->size() == comm.size()) {
    // Across hosts among the ranks with the root's local index, then inside every host.
    const HostLayout& layout = comm.host_layout();
    const int root = set->global_rank(o.root);
    const int root_local = layout.local_rank(root);
    AlgorithmContext local{comm, comm.local_set(), ctx.deadline, comm.local_transport()};
    AlgorithmContext cross{comm, comm.cross_set(), ctx.deadline};
    const bool in_cross = comm.local_set().rank() == root_local;
    const std::vector<int>& cr = comm.cross_set().ranks();
    const int cross_root = static_cast<int>(std::find(cr.begin(), cr.end(), root) - cr.begin());
    return Run(comm, kWhat,
               HierarchicalBroadcast(in_cross ? &cross : nullptr, local, buf, len, cross_root,
                                     root_local));
  }
  return Run(comm, kWhat, Broadcast(ctx, buf, len, o.root));
}

Status Alltoall(Communicator& comm, const AlltoallOptions& o) {
  constexpr const char* kWhat = "alltoall";
  KV_ASSIGN_OR_RETURN(const ProcessSet* set, Prepare(comm, o.set, kWhat));
  KV_RETURN_IF_ERROR(CheckCounts(o.send_counts, set->size(), kWhat, "send_counts"));
  KV_RETURN_IF_ERROR(CheckCounts(o.recv_counts, set->size(), kWhat, "recv_counts"));
  if (!ValidType(o.type)) return InvalidArgument("alltoall: invalid dtype");
  const size_t esize = DataTypeSize(o.type);
  const size_t send_total = Total(o.send_counts) * esize;
  if ((send_total > 0 && o.input == nullptr) || (Total(o.recv_counts) > 0 && o.output == nullptr)) {
    return InvalidArgument("alltoall: null buffer");
  }
  if (o.send_counts[set->rank()] != o.recv_counts[set->rank()]) {
    return InvalidArgument("alltoall: this rank sends itself " +
                           std::to_string(o.send_counts[set->rank()]) + " elements but expects " +
                           std::to_string(o.recv_counts[set->rank()]));
  }
  const auto* in = static_cast<const std::byte*>(o.input);
  if (o.input == o.output && send_total > 0) {  // in place: send from a copy
    std::byte* copy = comm.Scratch(1, send_total);
    std::memcpy(copy, in, send_total);
    in = copy;
  }
  AlgorithmContext ctx{comm, *set, comm.OpDeadline(send_total)};
  PhaseScope phase(ctx, "PAIRWISE_EXCHANGE");
  return Run(comm, kWhat,
             PairwiseAlltoall(ctx, in, BlocksOf(o.send_counts.data(), set->size(), esize),
                              static_cast<std::byte*>(o.output),
                              BlocksOf(o.recv_counts.data(), set->size(), esize)));
}

Status ReduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  constexpr const char* kWhat = "reducescatter";
  KV_ASSIGN_OR_RETURN(const ProcessSet* set, Prepare(comm, o.set, kWhat));
  KV_RETURN_IF_ERROR(CheckCounts(o.recv_counts, set->size(), kWhat, "recv_counts"));
  if (!ValidType(o.type) || !ValidOp(o.op)) {
    return InvalidArgument("reducescatter: invalid dtype or op");
  }
  const size_t esize = DataTypeSize(o.type);
  const size_t total = Total(o.recv_counts);
  const size_t mine = o.recv_counts[set->rank()];
  if ((total > 0 && o.input == nullptr) || (mine > 0 && o.output == nullptr)) {
    return InvalidArgument("reducescatter: null buffer");
  }
  const BlockLayout blocks = BlocksOf(o.recv_counts.data(), set->size(), esize);
  std::byte* work = comm.Scratch(1, total * esize);
  if (total > 0) std::memcpy(work, o.input, total * esize);
  ScaleInPlace(work, total, o.type, o.prescale);
  if (set->size() > 1) {
    AlgorithmContext ctx{comm, *set, comm.OpDeadline(total * esize)};
    PhaseScope phase(ctx, "RING_REDUCE_SCATTER");
    KV_RETURN_IF_ERROR(Run(comm, kWhat, RingReduceScatter(ctx, work, blocks, o.type, o.op)));
  }
  const int divisor = o.op == ReduceOp::kAverage ? set->size() : 1;
  std::byte* own = work + blocks[set->rank()];
  ScaleInPlace(own, mine, o.type, o.postscale, divisor);
  if (mine > 0) std::memcpy(o.output, own, mine * esize);
  return OkStatus();
}

Status Barrier(Communicator& comm, const ProcessSet* set) {
  constexpr const char* kWhat = "barrier";
  KV_ASSIGN_OR_RETURN(const ProcessSet* s, Prepare(comm, set, kWhat));
  AlgorithmContext ctx{comm, *s, comm.OpDeadline()};
  PhaseScope phase(ctx, "DISSEMINATION_BARRIER");
  return Run(comm, kWhat, DisseminationBarrier(ctx));
}

}  // namespace korovod
