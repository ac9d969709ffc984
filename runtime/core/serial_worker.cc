#include "runtime/core/serial_worker.h"

namespace korovod {

SerialWorker::SerialWorker() : thread_([this](std::stop_token stop) { Loop(stop); }) {}

SerialWorker::~SerialWorker() {
  Drain();
  thread_.request_stop();
}

void SerialWorker::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  work_.notify_one();
}

void SerialWorker::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return tasks_.empty() && !busy_; });
}

void SerialWorker::Loop(std::stop_token stop) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!work_.wait(lock, stop, [&] { return !tasks_.empty(); })) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    if (tasks_.empty()) done_.notify_all();
  }
}

}  // namespace korovod
