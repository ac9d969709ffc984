// WatchDecoder across every chunk boundary, and Watch against a fake server: events, 410 as a
// response and as an ERROR event, and a prompt cancel.
#include "operator/kube/watch.h"

#include <gtest/gtest.h>

#include "operator/kube/resource.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using testing::FakeApiServer;
using testing::FakeWatchStream;

const char kStream[] =
    R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}})"
    "\n"
    R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"2"},"x":"é\n"}})"
    "\r\n"
    "\n"
    R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3"}}})"
    "\n"
    R"({"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"4"}}})"
    "\n"
    R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})"
    "\n";

std::vector<std::string> Decode(const std::vector<std::string_view>& chunks) {
  WatchDecoder decoder;
  std::vector<std::string> out;
  for (std::string_view chunk : chunks) {
    Status s = decoder.Feed(chunk, [&](WatchEvent e) {
      out.push_back(
          std::string(WatchEventTypeName(e.type)) + ":" +
          e.object.value("metadata", nlohmann::json::object()).value("resourceVersion", "") +
          std::to_string(e.object.value("code", 0)));
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(decoder.pending(), 0u);
  return out;
}

TEST(WatchDecoderTest, EverySplitPointGivesTheSameEvents) {
  const std::string_view all(kStream);
  const std::vector<std::string> expected = {"ADDED:10", "MODIFIED:20", "BOOKMARK:30", "DELETED:40",
                                             "ERROR:410"};
  ASSERT_EQ(Decode({all}), expected);
  for (size_t i = 0; i <= all.size(); ++i) {
    ASSERT_EQ(Decode({all.substr(0, i), all.substr(i)}), expected) << "split at " << i;
  }
  for (size_t i = 0; i < all.size(); i += 7) {
    for (size_t j = i; j <= all.size(); j += 5) {
      ASSERT_EQ(Decode({all.substr(0, i), all.substr(i, j - i), all.substr(j)}), expected)
          << "split at " << i << " and " << j;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < all.size(); ++i) bytes.push_back(all.substr(i, 1));
  EXPECT_EQ(Decode(bytes), expected);
}

TEST(WatchDecoderTest, MalformedAndUnknownAreErrors) {
  WatchDecoder decoder;
  Status s = decoder.Feed("{not json}\n", [](WatchEvent) {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("{not json}"), std::string::npos);
  WatchDecoder decoder2;
  s = decoder2.Feed(R"({"type":"RENAMED","object":{}})"
                    "\n",
                    [](WatchEvent) {});
  EXPECT_NE(s.message().find("RENAMED"), std::string::npos);
  WatchDecoder decoder3;
  EXPECT_TRUE(decoder3.Feed(R"({"type":"ADDED")", [](WatchEvent) {}).ok());
  EXPECT_GT(decoder3.pending(), 0u);
}

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.server().Get(
        "/api/v1/namespaces/ns/pods", [this](const httplib::Request& req, httplib::Response& res) {
          if (req.get_param_value("resourceVersion") == "old") {
            res.status = 410;
            res.set_content(testing::StatusBody(410, "Gone", "too old"), "application/json");
            return;
          }
          stream_.Serve(req, res);
        });
    fake_.Start();
    client_ = fake_.Client();
  }
  void TearDown() override { stream_.Shutdown(); }

  FakeApiServer fake_;
  FakeWatchStream stream_{fake_};
  std::unique_ptr<ApiClient> client_;
};

TEST_F(WatchTest, DeliversEventsUntilTheServerCloses) {
  WatchOptions options;
  options.resource_version = "5";
  options.label_selector = "app=x";
  options.timeout_seconds = 30;
  stream_.Push("ADDED", {{"metadata", {{"name", "a"}, {"resourceVersion", "6"}}}});
  stream_.Push("BOOKMARK", {{"metadata", {{"resourceVersion", "7"}}}});
  std::vector<std::string> got;
  std::thread closer([&] {
    testing::Eventually([&] { return stream_.requests().size() == 1; });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stream_.DropConnection();
  });
  ApiResult r = Watch(
      *client_, kPods.Path("ns"), options,
      [&](WatchEvent e) {
        got.push_back(WatchEventTypeName(e.type));
        return true;
      },
      nullptr);
  closer.join();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, (std::vector<std::string>{"ADDED", "BOOKMARK"}));
  const auto params = stream_.requests().at(0);
  EXPECT_EQ(params.find("watch")->second, "true");
  EXPECT_EQ(params.find("resourceVersion")->second, "5");
  EXPECT_EQ(params.find("labelSelector")->second, "app=x");
  EXPECT_EQ(params.find("allowWatchBookmarks")->second, "true");
  EXPECT_EQ(params.find("timeoutSeconds")->second, "30");
}

TEST_F(WatchTest, GoneAsResponseAndAsErrorEvent) {
  WatchOptions options;
  options.resource_version = "old";
  ApiResult r = Watch(
      *client_, kPods.Path("ns"), options, [](WatchEvent) { return true; }, nullptr);
  EXPECT_TRUE(IsGone(r));
  EXPECT_EQ(r.http_code(), 410);

  options.resource_version = "8";
  stream_.Push("ERROR", {{"kind", "Status"},
                         {"code", 410},
                         {"reason", "Expired"},
                         {"message", "too old resource version: 8 (20)"}});
  r = Watch(
      *client_, kPods.Path("ns"), options, [](WatchEvent) { return true; }, nullptr);
  EXPECT_TRUE(IsGone(r));
  EXPECT_NE(r.status().message().find("too old resource version"), std::string::npos);
}

TEST_F(WatchTest, CancelIsPrompt) {
  Canceller canceller;
  WatchOptions options;
  options.timeout_seconds = 300;
  ApiResult result = nlohmann::json();
  std::thread watcher([&] {
    result = Watch(
        *client_, kPods.Path("ns"), options, [](WatchEvent) { return true; }, &canceller);
  });
  ASSERT_TRUE(stream_.WaitForRequests(1, std::chrono::seconds(5)));
  const auto start = std::chrono::steady_clock::now();
  canceller.Cancel();
  watcher.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(result.status().code(), StatusCode::kAborted);
  // A cancelled canceller stops later watches before they connect.
  ApiResult again = Watch(
      *client_, kPods.Path("ns"), options, [](WatchEvent) { return true; }, &canceller);
  EXPECT_EQ(again.status().code(), StatusCode::kAborted);
  EXPECT_EQ(stream_.requests().size(), 1u);
}

TEST_F(WatchTest, HandlerCanEndTheWatch) {
  stream_.Push("ADDED", {{"metadata", {{"name", "a"}, {"resourceVersion", "1"}}}});
  stream_.Push("ADDED", {{"metadata", {{"name", "b"}, {"resourceVersion", "2"}}}});
  int seen = 0;
  ApiResult r = Watch(
      *client_, kPods.Path("ns"), WatchOptions{}, [&](WatchEvent) { return ++seen < 1; }, nullptr);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace korovod::kube
