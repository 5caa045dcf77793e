// The C ABI: connect, submit, errors by status (timeout, too large, overloaded), against the
// batchd binary. (tests/check_installed_client.sh builds a C program against the installed header.)
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/batchd_client.h"
#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"
#include "tests/helpers.hpp"

extern "C" int c_api_roundtrip(const char* socket_path, const char* input, char* out, size_t out_size);
extern "C" const char* c_api_status_name(int status);

TEST_CASE("the C ABI returns the reference answer and names its errors") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--max-wait-ms", "0", "--cost", "3"});
  char out[128];
  REQUIRE(c_api_roundtrip(path.c_str(), "hello from C", out, sizeof(out)) == BATCHD_OK);
  CHECK(std::string(out) == batchd::reference_batchstring("hello from C", 3));

  CHECK(c_api_roundtrip(path.c_str(), "\xff not utf-8", out, sizeof(out)) == BATCHD_INVALID_UTF8);
  CHECK(std::strstr(out, "UTF-8") != nullptr);
  CHECK(std::string(batchd_status_name(BATCHD_INVALID_UTF8)) == "invalid_utf8");
  CHECK(std::string(batchd_status_name(BATCHD_TIMEOUT)) == "timeout");
  CHECK(std::string(batchd_status_name(BATCHD_UNKNOWN_MODEL)) == "unknown_model");
  CHECK(std::string(c_api_status_name(99)) == "unknown");

  const std::string missing = batchd::test::temp_socket_path("missing.sock");
  batchd_status status = BATCHD_OK;
  CHECK(batchd_client_connect(missing.c_str(), 100, &status) == nullptr);
  CHECK(status == BATCHD_DAEMON_UNAVAILABLE);
  char* output = nullptr;
  size_t len = 0;
  CHECK(batchd_submit(nullptr, "x", 1, 10, &output, &len) == BATCHD_INVALID_ARGUMENT);
}

namespace {

// A C ABI client handle, closed at the end of the scope.
struct CClient {
  batchd_client* handle = nullptr;
  explicit CClient(const std::string& socket) {
    batchd_status status = BATCHD_OK;
    handle = batchd_client_connect(socket.c_str(), 5000, &status);
    REQUIRE(handle != nullptr);
    REQUIRE(status == BATCHD_OK);
  }
  ~CClient() { batchd_client_close(handle); }
  CClient(const CClient&) = delete;
  CClient& operator=(const CClient&) = delete;
};

// One batchd_submit: its status, and its answer (or message), freed with batchd_free.
struct Submitted {
  batchd_status status = BATCHD_PROTOCOL_ERROR;
  std::string text;
};

Submitted submit(batchd_client* client, const std::string& input, std::uint32_t timeout_ms) {
  char* output = nullptr;
  size_t len = 0;
  Submitted s;
  s.status = batchd_submit(client, input.data(), input.size(), timeout_ms, &output, &len);
  REQUIRE(output != nullptr);
  s.text.assign(output, len);
  batchd_free(output);
  return s;
}

}  // namespace

TEST_CASE("the C ABI: a request whose deadline passes gets BATCHD_TIMEOUT, and the client goes on") {
  const std::string path = batchd::test::temp_socket_path();
  // Each batch takes a second on the sim backend.
  batchd::test::DaemonProcess daemon(path, {"--backend", "sim", "--sim-fixed-us", "1000000",
                                            "--max-wait-ms", "0"});
  CClient client(path);
  const Submitted late = submit(client.handle, "too slow", 100);
  CHECK(late.status == BATCHD_TIMEOUT);
  CHECK(late.text.find("100 ms") != std::string::npos);
  CHECK(std::string(batchd_status_name(late.status)) == "timeout");
  const Submitted patient = submit(client.handle, "patient", 20000);
  CHECK(patient.status == BATCHD_OK);
  CHECK(patient.text == batchd::sim_expected_output("patient", 1));
}

TEST_CASE("the C ABI: an input over the daemon's --max-input-bytes gets BATCHD_TOO_LARGE") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "cpu", "--max-wait-ms", "0",
                                            "--max-input-bytes", "100"});
  CClient client(path);
  const Submitted too_large = submit(client.handle, std::string(101, 'x'), 5000);
  CHECK(too_large.status == BATCHD_TOO_LARGE);
  CHECK(too_large.text == "input of 101 bytes exceeds the daemon's limit of 100 bytes");
  CHECK(std::string(batchd_status_name(too_large.status)) == "too_large");
  const Submitted fits = submit(client.handle, std::string(100, 'x'), 5000);
  CHECK(fits.status == BATCHD_OK);
  CHECK(fits.text == batchd::reference_batchstring(std::string(100, 'x'), 1));
}

TEST_CASE("the C ABI: BATCHD_OVERLOADED when every slot of the handle is busy") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "sim", "--sim-fixed-us", "1000000",
                                            "--max-wait-ms", "0", "--slots-per-client", "1"});
  CClient client(path);
  // Two callers at once on one handle with one slot: while one request runs for a second, the
  // other is refused at once.
  std::latch start(2);
  Submitted results[2];
  std::vector<std::thread> callers;
  for (int i = 0; i < 2; ++i) {
    callers.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = submit(client.handle, "caller " + std::to_string(i), 20000);
    });
  }
  for (auto& t : callers) t.join();
  const int ok = results[0].status == BATCHD_OK ? 0 : 1;
  const Submitted& refused = results[1 - ok];
  CHECK(results[ok].status == BATCHD_OK);
  CHECK(results[ok].text == batchd::sim_expected_output("caller " + std::to_string(ok), 1));
  CHECK(refused.status == BATCHD_OVERLOADED);
  CHECK(refused.text.find("all 1 request slots of this client are in flight") != std::string::npos);
  CHECK(std::string(batchd_status_name(BATCHD_OVERLOADED)) == "overloaded");
  // The slot is free again.
  const Submitted again = submit(client.handle, "again", 20000);
  CHECK(again.status == BATCHD_OK);
  CHECK(again.text == batchd::sim_expected_output("again", 1));
}

TEST_CASE("the C ABI: BATCHD_OVERLOADED when the daemon's backlog would outlast the deadline") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "sim", "--sim-devices", "1", "--sim-fixed-us",
                                            "300000", "--max-wait-ms", "0"});
  // A steady load of 300 ms batches keeps the daemon's measure of its batch time current.
  CClient loader(path);
  std::atomic<bool> stop{false};
  std::atomic<int> loaded{0};
  std::thread load([&] {
    while (!stop.load()) {
      if (submit(loader.handle, "load", 20000).status == BATCHD_OK) loaded.fetch_add(1);
    }
  });
  CHECK(batchd::test::eventually([&] { return loaded.load() >= 2; }, std::chrono::seconds(20)));
  CClient client(path);
  // At least two batch times ahead, against 100 ms: refused at once rather than left to time out.
  const Submitted hopeless = submit(client.handle, "hopeless", 100);
  CHECK(hopeless.status == BATCHD_OVERLOADED);
  CHECK(hopeless.text.find("backlog would outlast this request's deadline") != std::string::npos);
  const Submitted patient = submit(client.handle, "patient", 20000);
  CHECK(patient.status == BATCHD_OK);
  CHECK(patient.text == batchd::sim_expected_output("patient", 1));
  stop.store(true);
  load.join();
}

TEST_CASE("the C ABI: batchd_submit_many answers each request with its own status and output") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "cpu", "--max-wait-ms", "5", "--cost", "2",
                                            "--max-input-bytes", "64"});
  CClient client(path);
  std::vector<std::string> inputs;
  for (int i = 0; i < 40; ++i) inputs.push_back("many-" + std::to_string(i));
  inputs[7] = "\xfe not utf-8";
  inputs[23] = std::string(65, 'x');  // one byte over the limit
  std::vector<batchd_request> requests(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    requests[i].input = inputs[i].data();
    requests[i].input_len = inputs[i].size();
  }
  REQUIRE(batchd_submit_many(client.handle, requests.data(), requests.size(), 5000) == BATCHD_OK);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const batchd_request& r = requests[i];
    REQUIRE(r.output != nullptr);
    const std::string text(r.output, r.output_len);
    batchd_free(r.output);
    if (i == 7) {
      CHECK(r.status == BATCHD_INVALID_UTF8);
    } else if (i == 23) {
      CHECK(r.status == BATCHD_TOO_LARGE);
    } else {
      CHECK(r.status == BATCHD_OK);
      CHECK(text == batchd::reference_batchstring(inputs[i], 2));
    }
  }
  CHECK(batchd_submit_many(nullptr, requests.data(), 1, 10) == BATCHD_INVALID_ARGUMENT);
  batchd_request bad{nullptr, 3, BATCHD_OK, nullptr, 0};
  CHECK(batchd_submit_many(client.handle, &bad, 1, 10) == BATCHD_INVALID_ARGUMENT);
  CHECK(batchd_submit_many(client.handle, nullptr, 0, 10) == BATCHD_OK);
}

extern "C" int c_api_priority_round(const char* socket_path, batchd_priority priority, size_t count,
                                    size_t* answered);

TEST_CASE("the C ABI: batchd_submit_with_priority and batchd_submit_many_with_priority carry the class") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto watcher = batchd::test::connect(path);  // reads the daemon's counters
  batchd::test::ClassCounts expected{};
  const auto index = [](batchd::Priority p) { return static_cast<std::size_t>(p); };
  struct Case {
    batchd_priority c;
    batchd::Priority cpp;
    std::size_t many;
  };
  for (const Case c : {Case{BATCHD_PRIORITY_HIGH, batchd::Priority::kHigh, 2},
                       Case{BATCHD_PRIORITY_NORMAL, batchd::Priority::kNormal, 4},
                       Case{BATCHD_PRIORITY_LOW, batchd::Priority::kLow, 6}}) {
    CAPTURE(batchd::priority_name(c.cpp));
    size_t answered = 0;
    CHECK(c_api_priority_round(path.c_str(), c.c, c.many, &answered) == BATCHD_OK);
    CHECK(answered == c.many + 1);
    expected[index(c.cpp)] += c.many + 1;
    CHECK(batchd::test::taken_by_class(*watcher, expected) == expected);
  }
  // The plain calls send normal.
  CClient client(path);
  const Submitted plain = submit(client.handle, "plain", 5000);
  CHECK(plain.status == BATCHD_OK);
  CHECK(plain.text == batchd::reference_batchstring("plain", 1));
  batchd_request one{"x", 1, BATCHD_PROTOCOL_ERROR, nullptr, 0};
  REQUIRE(batchd_submit_many(client.handle, &one, 1, 5000) == BATCHD_OK);
  CHECK(one.status == BATCHD_OK);
  batchd_free(one.output);
  expected[index(batchd::Priority::kNormal)] += 2;
  CHECK(batchd::test::taken_by_class(*watcher, expected) == expected);

  // A class outside the enum is refused at once, and nothing is touched or sent.
  const auto bad = static_cast<batchd_priority>(3);
  char* output = nullptr;
  size_t len = 7;
  CHECK(batchd_submit_with_priority(client.handle, "x", 1, 1000, &output, &len, bad) == BATCHD_INVALID_ARGUMENT);
  CHECK(output == nullptr);
  CHECK(len == 7);
  batchd_request untouched{"x", 1, BATCHD_TIMEOUT, nullptr, 0};
  CHECK(batchd_submit_many_with_priority(client.handle, &untouched, 1, 1000, bad) == BATCHD_INVALID_ARGUMENT);
  CHECK(untouched.status == BATCHD_TIMEOUT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // two status publications
  CHECK(watcher->daemon_status().requests_taken_by_class == expected);
}

extern "C" int c_api_traced(const char* socket_path, const char* traceparent);

TEST_CASE("the C ABI: batchd_submit_traced takes a W3C traceparent, and refuses what is not one") {
  const std::string path = batchd::test::temp_socket_path();
  batchd::test::DaemonProcess daemon(path, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto watcher = batchd::test::connect(path);
  CHECK(c_api_traced(path.c_str(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") == BATCHD_OK);
  CHECK(c_api_traced(path.c_str(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00") == BATCHD_OK);
  CHECK(c_api_traced(path.c_str(), nullptr) == BATCHD_OK);
  CHECK(c_api_traced(path.c_str(), "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01") ==
        BATCHD_INVALID_ARGUMENT);
  CHECK(c_api_traced(path.c_str(), "not a traceparent") == BATCHD_INVALID_ARGUMENT);
  // The refused ones were never sent (the page is published every few tens of milliseconds).
  CHECK(batchd::test::eventually([&] { return watcher->daemon_status().requests_taken == 3; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(watcher->daemon_status().requests_taken == 3);
}
