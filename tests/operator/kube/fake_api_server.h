// An in-process stand-in for the Kubernetes API server: an httplib::Server on 127.0.0.1 with a
// random port, handlers scripted per test, and a scriptable watch stream.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "operator/kube/api_client.h"

namespace korovod::kube::testing {

// A metav1.Status failure body, as the API server sends it.
std::string StatusBody(int code, const std::string& reason, const std::string& message);

class FakeApiServer {
 public:
  FakeApiServer();
  ~FakeApiServer();  // stops the server and joins its thread

  // Register handlers first, then Start().
  httplib::Server& server() { return server_; }
  void Start();
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<ApiClient> Client(KubeConfig config = {}, ApiClientOptions options = {}) const;
  bool running() const { return server_.is_running(); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// Lines (watch events) pushed by a test and streamed to whichever watch request is connected.
class FakeWatchStream {
 public:
  explicit FakeWatchStream(const FakeApiServer& server) : server_(server) {}
  ~FakeWatchStream() { Shutdown(); }

  void Push(const std::string& type, const nlohmann::json& object);
  // Ends the current connection (the client sees the server close the watch).
  void DropConnection();
  void Shutdown();
  // Serves a watch request: call from the server's handler.
  void Serve(const httplib::Request& req, httplib::Response& res);
  // The query parameters of every watch request served, in order.
  std::vector<httplib::Params> requests() const;
  bool WaitForRequests(size_t n, std::chrono::milliseconds timeout) const;

 private:
  const FakeApiServer& server_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<std::string> lines_;
  int generation_ = 0;
  bool shutdown_ = false;
  std::vector<httplib::Params> requests_;
};

// Waits up to `timeout` for `pred`, polling; for conditions set on other threads.
bool Eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace korovod::kube::testing
