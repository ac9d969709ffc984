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
  for (auto& lane : lanes_) {
    Lane* raw = lane.get();
    lane->thread = std::jthread([this, raw](std::stop_token stop) { Loop(*raw, stop); });
  }
}

CollectiveLanes::~CollectiveLanes() {
  Drain();
  for (auto& lane : lanes_) lane->thread.request_stop();
  work_.notify_all();
  for (auto& lane : lanes_) lane->thread.join();
}

void CollectiveLanes::Dispatch(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lanes_[next_]->queue.push_back(std::move(job));
    next_ = (next_ + 1) % lanes_.size();
  }
  work_.notify_all();
}

void CollectiveLanes::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] {
    for (const auto& lane : lanes_) {
      if (lane->busy || !lane->queue.empty()) return false;
    }
    return true;
  });
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

void CollectiveLanes::Loop(Lane& lane, std::stop_token stop) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!work_.wait(lock, stop, [&] { return !lane.queue.empty(); })) return;
    Job job = std::move(lane.queue.front());
    lane.queue.pop_front();
    lane.busy = true;
    peak_busy_ = std::max(peak_busy_, ++busy_);
    lock.unlock();
    Run(lane, job);
    lock.lock();
    lane.busy = false;
    --busy_;
    if (lane.queue.empty()) idle_.notify_all();
  }
}

void CollectiveLanes::Run(Lane& lane, Job& job) {
  std::vector<OpExecutor::Item> items;
  items.reserve(job.responses.size());
  for (size_t k = 0; k < job.responses.size(); ++k) {
    items.push_back({&job.responses[k], job.ops[k].get(), {}});
  }
  Status failed = health();
  uint64_t bytes = 0;
  uint64_t segments = 0;
  if (failed.ok()) {
    const uint64_t before = lane.executor.pipelined_segments();
    Status st = lane.executor.Run(lane.comm->world(), items, &bytes);
    segments = lane.executor.pipelined_segments() - before;
    if (!st.ok()) {
      // Peers learn of it through the shared mesh, and so do this rank's other lanes and its
      // engine thread (PeerMesh::failure): none waits out a deadline.
      failed = lane.comm->MarkBroken(st);
      std::lock_guard<std::mutex> lock(mu_);
      if (health_.ok()) health_ = failed;
    }
  }
  finish_(job, items, failed, bytes, segments);
}

}  // namespace korovod
