// A round trip through the generated Sidecar service over a unix socket, with a tiny in-test
// implementation of Hello only, and the protocol version check it relies on.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "korovod/sidecar/v1/sidecar.grpc.pb.h"
#include "sidecar/control/grpc_status.h"
#include "sidecar/control/protocol_version.h"

namespace korovod::sidecar {
namespace {

namespace v1 = ::korovod::sidecar::v1;

class HelloOnlySidecar final : public v1::Sidecar::Service {
 public:
  grpc::Status Hello(grpc::ServerContext*, const v1::HelloRequest* request,
                     v1::HelloReply* reply) override {
    Status version = CheckProtocolVersion(request->protocol_version(), kSidecarProtocolVersion);
    if (!version.ok()) return ToGrpcStatus(version);
    reply->set_protocol_version(kSidecarProtocolVersion);
    reply->set_rank(3);
    reply->set_size(8);
    reply->set_local_rank(1);
    reply->set_local_size(2);
    reply->set_cross_rank(1);
    reply->set_cross_size(4);
    reply->set_arena_name("/korovod-arena-test");
    reply->set_arena_bytes(uint64_t{1} << 30);
    reply->set_session_id("session-" + std::to_string(request->client_pid()));
    return grpc::Status::OK;
  }
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "korovod-grpc-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class SidecarGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    socket_path_ = dir_.path() + "/sidecar.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_EQ(chmod(socket_path_.c_str(), 0660), 0);
    auto channel =
        grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials());
    stub_ = v1::Sidecar::NewStub(channel);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  grpc::Status Hello(uint32_t version, v1::HelloReply* reply) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::HelloRequest req;
    req.set_protocol_version(version);
    req.set_client_pid(static_cast<int32_t>(getpid()));
    req.set_client_name("sidecar_grpc_test");
    return stub_->Hello(&ctx, req, reply);
  }

  TempDir dir_;
  std::string socket_path_;
  HelloOnlySidecar service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Sidecar::Stub> stub_;
};

TEST_F(SidecarGrpcTest, SocketIsGroupOnly) {
  struct stat st {};
  ASSERT_EQ(stat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(SidecarGrpcTest, HelloWithSameVersion) {
  v1::HelloReply reply;
  grpc::Status s = Hello(kSidecarProtocolVersion, &reply);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(reply.protocol_version(), kSidecarProtocolVersion);
  EXPECT_EQ(reply.rank(), 3);
  EXPECT_EQ(reply.size(), 8);
  EXPECT_EQ(reply.local_rank(), 1);
  EXPECT_EQ(reply.local_size(), 2);
  EXPECT_EQ(reply.cross_rank(), 1);
  EXPECT_EQ(reply.cross_size(), 4);
  EXPECT_EQ(reply.arena_name(), "/korovod-arena-test");
  EXPECT_EQ(reply.arena_bytes(), uint64_t{1} << 30);
  EXPECT_EQ(reply.session_id(), "session-" + std::to_string(getpid()));
}

TEST_F(SidecarGrpcTest, HelloWithOtherVersionFailsNamingBoth) {
  v1::HelloReply reply;
  grpc::Status s = Hello(kSidecarProtocolVersion + 1, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("version " + std::to_string(kSidecarProtocolVersion + 1)),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("version " + std::to_string(kSidecarProtocolVersion)),
            std::string::npos)
      << s.error_message();
  Status back = FromGrpcStatus(s);
  EXPECT_EQ(back.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), s.error_message());
}

TEST_F(SidecarGrpcTest, UnimplementedRpcIsUnimplemented) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetStatsReply reply;
  grpc::Status s = stub_->GetStats(&ctx, v1::GetStatsRequest(), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST(ProtocolVersionTest, CheckProtocolVersion) {
  EXPECT_TRUE(CheckProtocolVersion(1, 1).ok());
  Status s = CheckProtocolVersion(7, 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("client speaks sidecar protocol version 7"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("this sidecar speaks version 1"), std::string::npos) << s.message();
  EXPECT_EQ(kSidecarProtocolVersion, 1u);
}

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kDeadlineExceeded, StatusCode::kUnavailable,
        StatusCode::kPermissionDenied, StatusCode::kInternal, StatusCode::kFailedPrecondition,
        StatusCode::kAborted, StatusCode::kUnimplemented}) {
    Status back = FromGrpcStatus(ToGrpcStatus(Status(c, "why")));
    EXPECT_EQ(back.code(), c);
    EXPECT_EQ(back.message(), "why");
  }
  EXPECT_TRUE(ToGrpcStatus(OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  Status cancelled = FromGrpcStatus(grpc::Status(grpc::StatusCode::CANCELLED, "gone"));
  EXPECT_EQ(cancelled.code(), StatusCode::kUnavailable);
  EXPECT_EQ(cancelled.message(), "CANCELLED: gone");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "x")).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace korovod::sidecar
