#include "runtime/core/collective_lanes.h"

#include <algorithm>

namespace korovod {

CollectiveLanes::CollectiveLanes(std::vector<std::unique_ptr<Communicator>> comms, bool pipeline,
                                 Finish finish)
    : finish_(std::move(finish)) {
  for (auto& c : comms) {
    auto lane = std::make_unique<Lane>(std::move(c));
    lane->executor.set_pipeline(pipeline);
    lanes_.push_back(std::move(lane));
  }
}

void CollectiveLanes::Dispatch(Job job) {
  Lane* lane = lanes_[next_].get();
  next_ = (next_ + 1) % lanes_.size();
  // SerialWorker takes copyable tasks; the job owns its ops.
  auto owned = std::make_shared<Job>(std::move(job));
  lane->worker.Post([this, lane, owned] { Run(*lane, *owned); });
}

void CollectiveLanes::Drain() {
  for (auto& lane : lanes_) lane->worker.Drain();
}

Status CollectiveLanes::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

int CollectiveLanes::peak_busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_busy_;
}

void CollectiveLanes::Fail(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (health_.ok() && !why.ok()) health_ = why;
}

void CollectiveLanes::set_timeline(Timeline* t) {
  for (auto& lane : lanes_) lane->executor.set_timeline(t);
}

void CollectiveLanes::Tune(size_t small_allreduce_max_bytes, size_t tcp_stripe_min) {
  for (auto& lane : lanes_) lane->comm->Tune(small_allreduce_max_bytes, tcp_stripe_min);
}

void CollectiveLanes::Run(Lane& lane, Job& job) {
  std::vector<OpExecutor::Item> items;
  items.reserve(job.responses.size());
  for (size_t k = 0; k < job.responses.size(); ++k) {
    items.push_back({&job.responses[k], job.ops[k].get(), {}});
  }
  Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = health_;
    peak_busy_ = std::max(peak_busy_, ++busy_);
  }
  uint64_t bytes = 0;
  uint64_t segments = 0;
  if (failed.ok()) {
    const uint64_t before = lane.executor.pipelined_segments();
    Status st = lane.executor.Run(lane.comm->world(), items, &bytes);
    segments = lane.executor.pipelined_segments() - before;
    // Peers learn of a failure through the shared mesh, and so do this rank's other lanes and its
    // engine thread (PeerMesh::failure): none waits out a deadline.
    if (!st.ok()) failed = lane.comm->MarkBroken(st);
  }
  if (!failed.ok()) Fail(failed);
  finish_(job, items, failed, bytes, segments);
  std::lock_guard<std::mutex> lock(mu_);
  --busy_;
}

}  // namespace korovod
