#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube::testing {

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                        {"code", code},     {"reason", reason},   {"message", message}}
      .dump();
}

FakeApiServer::FakeApiServer() { port_ = server_.bind_to_any_port("127.0.0.1"); }

FakeApiServer::~FakeApiServer() {
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

void FakeApiServer::Start() {
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  Eventually([this] { return server_.is_running(); });
}

std::unique_ptr<ApiClient> FakeApiServer::Client(KubeConfig config,
                                                 ApiClientOptions options) const {
  config.server = url();
  auto client = ApiClient::FromConfig(std::move(config), std::move(options));
  return client.ok() ? std::move(client).value() : nullptr;
}

void FakeWatchStream::Push(const std::string& type, const nlohmann::json& object) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.push_back(nlohmann::json{{"type", type}, {"object", object}}.dump() + "\n");
  cv_.notify_all();
}

void FakeWatchStream::DropConnection() {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  cv_.notify_all();
}

void FakeWatchStream::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

std::vector<httplib::Params> FakeWatchStream::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

bool FakeWatchStream::WaitForRequests(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
}

void FakeWatchStream::Serve(const httplib::Request& req, httplib::Response& res) {
  int generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(req.params);
    generation = generation_;
    cv_.notify_all();
  }
  res.set_chunked_content_provider(
      "application/json", [this, generation](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(50),
                     [&] { return !lines_.empty() || generation_ != generation || shutdown_; });
        if (generation_ != generation || shutdown_ || !server_.running()) {
          sink.done();
          return true;
        }
        while (!lines_.empty()) {
          const std::string line = std::move(lines_.front());
          lines_.pop_front();
          if (!sink.write(line.data(), line.size())) return false;
        }
        return true;
      });
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace korovod::kube::testing
