// The C ABI: connect, submit, errors by status, against the batchd binary.
#include <doctest/doctest.h>

#include <cstring>

#include "client_lib/batchd_client.h"
#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"

extern "C" int c_api_roundtrip(const char* socket_path, const char* input, char* out, size_t out_size);

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
  CHECK(std::string(batchd_status_name(static_cast<batchd_status>(99))) == "unknown");

  const std::string missing = batchd::test::temp_socket_path("missing.sock");
  batchd_status status = BATCHD_OK;
  CHECK(batchd_client_connect(missing.c_str(), 100, &status) == nullptr);
  CHECK(status == BATCHD_DAEMON_UNAVAILABLE);
  char* output = nullptr;
  size_t len = 0;
  CHECK(batchd_submit(nullptr, "x", 1, 10, &output, &len) == BATCHD_INVALID_ARGUMENT);
}
