// Priority over gRPC is the operator's grant, per caller (issue 33), as over HTTP: Triton's
// "priority" parameter is a claim, capped at what the call's credential (authorization: Bearer,
// x-api-key) or a trusted proxy's x-batchd-priority-grant grants, and counted in batchd-grpc's
// --metrics-listen. What runs at which class is read where it lands: the daemon's requests taken
// by class.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <future>

#include "backend/reference_batchstring.hpp"
#include "grpc_frontend/call_grant.hpp"
#include "grpc_frontend/infer_request.hpp"
#include "oip/grpc_service.grpc.pb.h"
#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view kOpsToken = "ops-token-5d1c2b9a7e3f4a60";
using Metadata = std::vector<std::pair<std::string, std::string>>;

// ModelInfer of one string, with Triton's priority parameter if given.
inference::ModelInferRequest one_string_request(const std::string& input,
                                                const std::optional<inference::InferParameter>& priority) {
  inference::ModelInferRequest request;
  request.set_model_name("batchstring");
  auto* tensor = request.add_inputs();
  tensor->set_name("INPUT");
  tensor->set_datatype("BYTES");
  tensor->add_shape(1);
  tensor->mutable_contents()->add_bytes_contents(input);
  if (priority) (*request.mutable_parameters())["priority"] = *priority;
  return request;
}

std::string token_file() {
  const std::string path = temp_socket_path("priority-tokens.toml");
  std::ofstream(path) << "[[token]]\nname = \"ops\"\ntoken = \"" << kOpsToken << "\"\nmax_priority = \"high\"\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

// batchd-grpc with a token file and --metrics-listen, up once it listens and answers.
class GrpcStack {
 public:
  explicit GrpcStack(const std::vector<std::string>& extra = {})
      : socket_(temp_socket_path()), daemon_(socket_, {"--backend", "cpu", "--max-wait-ms", "1"}),
        metrics_port_(free_port()) {
    const std::string port_file = temp_socket_path("grpc.port");
    std::vector<std::string> argv{built_binary("BATCHD_GRPC_BIN"), "--socket", socket_, "--listen", "127.0.0.1:0",
                                  "--port-file", port_file, "--log-level", "warn", "--priority-tokens", token_file(),
                                  "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = spawn(argv);
    std::optional<std::uint16_t> port;
    REQUIRE(eventually([&] { return (port = read_port(port_file)).has_value(); }, grace(10s)));
    target_ = "127.0.0.1:" + std::to_string(*port);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
    REQUIRE(eventually([&] { return infer("probe", std::nullopt, {}).ok(); }, grace(10s)));
    watcher_ = connect(socket_);
  }

  // The daemon's counts once the probe shows in them (it republishes every few tens of ms).
  [[nodiscard]] ClassCounts settled_counts() const {
    ClassCounts counts{};
    REQUIRE(eventually([&] {
      counts = watcher_->daemon_status().requests_taken_by_class;
      return counts[0] + counts[1] + counts[2] > 0;
    }, 10s));
    return counts;
  }
  ~GrpcStack() {
    ::kill(pid_, SIGTERM);
    int status = -1;
    if (!eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 30s)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "batchd-grpc: " << describe_exit(status));
  }
  GrpcStack(const GrpcStack&) = delete;
  GrpcStack& operator=(const GrpcStack&) = delete;

  // One inference of one string; its answer checked when it succeeds.
  grpc::Status infer(const std::string& input, std::optional<inference::InferParameter> priority,
                     const Metadata& metadata) {
    const inference::ModelInferRequest request = one_string_request(input, priority);
    grpc::ClientContext call;
    call.set_deadline(std::chrono::system_clock::now() + 20s);
    for (const auto& [key, value] : metadata) call.AddMetadata(key, value);
    inference::ModelInferResponse response;
    grpc::Status status = stub_->ModelInfer(&call, request, &response);
    if (status.ok()) {
      REQUIRE(response.raw_output_contents_size() == 1);
      CHECK(response.raw_output_contents(0).substr(4) == reference_batchstring(input, 1));
    }
    return status;
  }

  [[nodiscard]] double metric(const std::string& series) const {
    HttpClient client(metrics_port_);
    const auto response = client.round_trip(make_request("GET", "/metrics"));
    REQUIRE(response.has_value());
    const std::size_t at = response->body.find("\n" + series + " ");
    REQUIRE_MESSAGE(at != std::string::npos, series << " is not in batchd-grpc's /metrics");
    return std::stod(response->body.substr(at + series.size() + 2));
  }

  [[nodiscard]] const std::string& target() const noexcept { return target_; }
  [[nodiscard]] Client& watcher() const noexcept { return *watcher_; }

 private:
  std::string socket_;
  DaemonProcess daemon_;
  std::uint16_t metrics_port_;
  pid_t pid_ = -1;
  std::string target_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<Client> watcher_;
};

inference::InferParameter level(std::uint64_t value) {
  inference::InferParameter p;
  p.set_uint64_param(value);
  return p;
}

inference::InferParameter named(const std::string& value) {
  inference::InferParameter p;
  p.set_string_param(value);
  return p;
}

const std::string kHighToNormal = R"(batchd_grpc_priority_downgrades_total{claimed="high",granted="normal"})";

ClassCounts plus(ClassCounts counts, std::uint64_t high, std::uint64_t normal, std::uint64_t low) {
  counts[0] += high;
  counts[1] += normal;
  counts[2] += low;
  return counts;
}

}  // namespace

TEST_CASE("Triton's priority levels and batchd's class names, as batchd-grpc reads them") {
  CHECK(grpcfront::priority_of_level(0) == Priority::kNormal);
  CHECK(grpcfront::priority_of_level(1) == Priority::kHigh);
  CHECK(grpcfront::priority_of_level(2) == Priority::kNormal);
  CHECK(grpcfront::priority_of_level(3) == Priority::kLow);
  CHECK(grpcfront::priority_of_level(~0ULL) == Priority::kLow);
  const auto parsed = [](std::optional<inference::InferParameter> p) {
    const inference::ModelInferRequest request = one_string_request("x", p);
    grpcfront::ParsedInfer out;
    const grpc::Status status = grpcfront::parse_infer_request(request, oip::default_catalog(), {}, 0, out);
    return std::make_pair(status.error_code(), out.priority);
  };
  CHECK(parsed(std::nullopt) == std::make_pair(grpc::StatusCode::OK, Priority::kNormal));
  CHECK(parsed(level(1)) == std::make_pair(grpc::StatusCode::OK, Priority::kHigh));
  CHECK(parsed(named("low")) == std::make_pair(grpc::StatusCode::OK, Priority::kLow));
  inference::InferParameter negative;
  negative.set_int64_param(-1);
  CHECK(parsed(negative).first == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(parsed(named("urgent")).first == grpc::StatusCode::INVALID_ARGUMENT);
  inference::InferParameter flag;
  flag.set_bool_param(true);
  CHECK(parsed(flag).first == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("gRPC peers: IPv4, IPv6 (brackets plain or percent-encoded), anything else none") {
  CHECK(grpcfront::peer_ip("ipv4:10.1.2.3:5000") == grants::parse_ip("10.1.2.3"));
  CHECK(grpcfront::peer_ip("ipv6:[::1]:5000") == grants::parse_ip("::1"));
  CHECK(grpcfront::peer_ip("ipv6:%5B::1%5D:5000") == grants::parse_ip("::1"));
  CHECK(grpcfront::peer_ip("ipv6:[::ffff:127.0.0.1]:1") == grants::parse_ip("127.0.0.1"));
  CHECK_FALSE(grpcfront::peer_ip("unix:/run/x.sock").has_value());
  CHECK_FALSE(grpcfront::peer_ip("ipv4:garbage:1").has_value());
}

TEST_CASE("a remote flood claiming priority 1 over gRPC runs at normal and is counted; a light client keeps being "
          "served; a token granted high runs at high") {
  GrpcStack stack;
  const ClassCounts before = stack.settled_counts();
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> flood_ok{0}, flood_failed{0};
  std::vector<std::thread> flood;
  for (int t = 0; t < 3; ++t) {
    flood.emplace_back([&, t] {
      for (std::uint64_t i = 0; !stop.load(); ++i) {
        const std::string input = std::to_string(t) + ":" + std::to_string(i) + std::string(60000, 'f');
        (stack.infer(input, level(1), {}).ok() ? flood_ok : flood_failed).fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  auto light = std::async(std::launch::async, [&] {
    return run_stress({"--grpc", stack.target(), "--rate", "100", "--duration", "2", "--timeout-ms", "20000"});
  });
  const std::uint64_t granted = 40;
  const Metadata bearer{{"authorization", "Bearer " + std::string(kOpsToken)}};
  for (std::uint64_t i = 0; i < granted; ++i) CHECK(stack.infer("granted " + std::to_string(i), level(1), bearer).ok());
  const StressRun served = light.get();
  stop.store(true);
  for (auto& t : flood) t.join();
  INFO("light: ", served.process.out, served.process.err);
  REQUIRE(served.process.exit_code() == 0);
  CHECK(flood_ok.load() > 0);
  CHECK(flood_failed.load() == 0);
  CHECK(served.field("errors") == 0);
  CHECK(served.field("p99_us") < 2'000'000 * slowdown());  // loose: the bench holds the bar
  CHECK(stack.metric(kHighToNormal) == static_cast<double>(flood_ok.load()));
  const ClassCounts expected =
      plus(before, granted, flood_ok.load() + static_cast<std::uint64_t>(served.field("sent")), 0);
  CHECK(taken_by_class(stack.watcher(), expected) == expected);
}

TEST_CASE("gRPC: x-api-key, a wrong token (no grant, not refused), the class by name, and a proxy's grant from a "
          "listed network") {
  SUBCASE("trusted") {
    GrpcStack stack({"--trusted-proxy", "127.0.0.1"});
    const ClassCounts before = stack.settled_counts();
    CHECK(stack.infer("a", level(1), {{"x-api-key", std::string(kOpsToken)}}).ok());
    CHECK(stack.infer("b", named("high"), {{"authorization", "Bearer wrong"}}).ok());
    CHECK(stack.infer("c", named("low"), {}).ok());
    CHECK(stack.infer("d", level(1), {{"x-batchd-priority-grant", "high"}}).ok());
    CHECK(stack.infer("e", level(2), {{"x-batchd-priority-grant", "low"}}).ok());
    const ClassCounts expected = plus(before, 2, 1, 2);
    CHECK(taken_by_class(stack.watcher(), expected) == expected);
    CHECK(stack.metric(kHighToNormal) == 1);
    CHECK(stack.metric(R"(batchd_grpc_priority_downgrades_total{claimed="normal",granted="low"})") == 1);
    CHECK(stack.metric("batchd_grpc_priority_credentials_ignored_total") == 1);
  }
  SUBCASE("not trusted") {
    GrpcStack stack({"--trusted-proxy", "10.0.0.0/8"});
    const ClassCounts before = stack.settled_counts();
    CHECK(stack.infer("d", level(1), {{"x-batchd-priority-grant", "high"}}).ok());
    const ClassCounts expected = plus(before, 0, 1, 0);
    CHECK(taken_by_class(stack.watcher(), expected) == expected);
    CHECK(stack.metric("batchd_grpc_priority_credentials_ignored_total") == 1);
  }
}
