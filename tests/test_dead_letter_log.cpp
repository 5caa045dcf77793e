// The dead-letter log alone (daemon/dead_letter_log.hpp): its JSON lines, one record per failed
// request, rotation by size, the in-memory records and their per-user view, and a full queue
// that drops and counts instead of waiting.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "daemon/dead_letter_log.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string fresh_path(const std::string& name) {
  return (fs::path(test::temp_socket_path()).parent_path() / name).string();
}

// A request of client 1 (pid 100, uid 1000) numbered `n`.
DeadLetterFacts facts(std::string_view input, std::uint64_t n, std::string_view error = "poison input") {
  DeadLetterFacts f;
  f.model = "batchstring";
  f.input = input;
  f.error = error;
  f.device = 1;
  f.devices_tried = 0b11;
  f.proven = true;
  f.client_id = 1;
  f.pid = 100;
  f.uid = 1000;
  f.request_id = n;
  f.slot = static_cast<std::uint32_t>(n);
  f.generation = 1;
  return f;
}

struct Parsed {
  simdjson::dom::parser parser;
  simdjson::dom::object record;
  explicit Parsed(const std::string& line) {
    REQUIRE(parser.parse(line).get(record) == simdjson::SUCCESS);
  }
  std::string text(const char* key) {
    std::string_view v;
    REQUIRE(record[key].get_string().get(v) == simdjson::SUCCESS);
    return std::string(v);
  }
  std::uint64_t number(const char* key) {
    std::uint64_t v = 0;
    REQUIRE(record[key].get_uint64().get(v) == simdjson::SUCCESS);
    return v;
  }
  bool has(const char* key) { return record[key].error() == simdjson::SUCCESS; }
};

}  // namespace

TEST_CASE("a record is one JSON line: time, digest and size, the error escaped, devices, client; never the input") {
  const std::string path = fresh_path("dead.jsonl");
  DeadLetterLog log(DeadLetterOptions{.path = path});
  log.start();
  const std::string input = "POISON h\xc3\xa9llo";
  log.record(facts(input, 0xabcdef, "bad \"quote\"\n\x01 and \xff not UTF-8"));
  DeadLetterFacts blind = facts("POISON two", 7);
  blind.proven = false;
  blind.request_id = 0;  // an older client: the session, slot and generation name it
  log.record(blind);
  log.flush();
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 2);
  Parsed first(lines[0]);
  const std::string time = first.text("time");
  CHECK(time.size() == 24);  // 2026-12-01T20:21:55.123Z
  CHECK(time[4] == '-');
  CHECK(time[10] == 'T');
  CHECK(time[19] == '.');
  CHECK(time.back() == 'Z');
  CHECK(first.text("model") == "batchstring");
  CHECK(first.text("reason") == "poison");
  CHECK(first.text("input_sha256") == reference_batchstring(input, 1));
  CHECK(first.number("input_bytes") == input.size());
  // Invalid UTF-8 keeps its ASCII, the rest shows as '?'; quotes and controls survive escaping.
  CHECK(first.text("error") == "bad \"quote\"\n\x01 and ? not UTF-8");
  CHECK(first.number("device") == 1);
  CHECK(first.number("client_id") == 1);
  CHECK(first.number("pid") == 100);
  CHECK(first.number("uid") == 1000);
  CHECK(first.text("request_id") == "0000000000abcdef");
  CHECK_FALSE(first.has("input"));
  CHECK(lines[0].find("h\xc3\xa9llo") == std::string::npos);
  simdjson::dom::array tried;
  REQUIRE(first.record["devices_tried"].get_array().get(tried) == simdjson::SUCCESS);
  CHECK(tried.size() == 2);
  Parsed second(lines[1]);
  CHECK(second.text("reason") == "repeated_error");
  simdjson::dom::element id;
  REQUIRE(second.record["request_id"].get(id) == simdjson::SUCCESS);
  CHECK(id.is_null());
  CHECK(log.recorded() == 2);
  CHECK(log.dropped() == 0);
  // The in-memory records are the same lines.
  CHECK(log.recent(std::nullopt) == lines[0] + "\n" + lines[1] + "\n");
}

TEST_CASE("each failing request is recorded once; distinct requests with the same input each count") {
  DeadLetterLog log(DeadLetterOptions{});  // memory only
  log.start();
  log.record(facts("POISON", 1));
  log.record(facts("POISON", 1));  // the same request again (e.g. re-run after a re-attach)
  DeadLetterFacts other_session = facts("POISON", 1);
  other_session.client_id = 2;  // a new attachment of the same client: its request id still matches
  log.record(other_session);
  log.record(facts("POISON", 2));  // another request, same input
  DeadLetterFacts other_user = facts("POISON", 1);
  other_user.uid = 1001;  // another user's request that happens to share the id
  log.record(other_user);
  // Without request ids: the session, slot and generation.
  DeadLetterFacts old_client = facts("POISON", 0);
  old_client.slot = 5;
  log.record(old_client);
  log.record(old_client);
  old_client.generation = 2;  // the slot's next request
  log.record(old_client);
  log.flush();
  CHECK(log.recorded() == 5);
  CHECK(log.duplicates() == 3);
  CHECK(log.dropped() == 0);
  std::string recent = log.recent(std::nullopt);
  CHECK(std::count(recent.begin(), recent.end(), '\n') == 5);
}

TEST_CASE("rotation at the size bound keeps FILE and FILE.1 only, and the counter counts every record") {
  const std::string path = fresh_path("rotated.jsonl");
  constexpr std::uint64_t kBound = 2000;
  DeadLetterLog log(DeadLetterOptions{.path = path, .max_file_bytes = kBound});
  log.start();
  constexpr std::uint64_t kRecords = 60;
  for (std::uint64_t n = 1; n <= kRecords; ++n) log.record(facts("POISON " + std::to_string(n), n));
  log.flush();
  CHECK(log.recorded() == kRecords);
  CHECK(log.dropped() == 0);
  REQUIRE(fs::exists(path));
  REQUIRE(fs::exists(path + ".1"));
  CHECK_FALSE(fs::exists(path + ".2"));
  CHECK(fs::file_size(path) <= kBound);
  CHECK(fs::file_size(path + ".1") <= kBound);
  // FILE.1 holds the records just before FILE's, and FILE ends with the newest.
  std::vector<std::string> lines = read_lines(path + ".1");
  const std::size_t older = lines.size();
  for (const auto& line : read_lines(path)) lines.push_back(line);
  REQUIRE(lines.size() > 1);
  CHECK(lines.size() < kRecords);
  CHECK(older > 0);
  std::uint64_t expected = kRecords - lines.size() + 1;
  for (const auto& line : lines) {
    Parsed p(line);
    CHECK(p.text("request_id") == fmt::format("{:016x}", expected));
    ++expected;
  }
  // The daemon restarts: the file is appended to, and still rotated at the bound.
  log.stop();
  DeadLetterLog again(DeadLetterOptions{.path = path, .max_file_bytes = kBound});
  again.start();
  for (std::uint64_t n = 1; n <= 10; ++n) again.record(facts("AGAIN " + std::to_string(n), n));
  again.flush();
  CHECK(fs::file_size(path) <= kBound);
  CHECK_FALSE(fs::exists(path + ".2"));
  CHECK(read_lines(path).back().find(fmt::format("{:016x}", 10)) != std::string::npos);
}

TEST_CASE("a full queue drops and counts instead of waiting for the writer") {
  const std::string path = fresh_path("full.jsonl");
  DeadLetterLog log(DeadLetterOptions{.path = path, .queue_capacity = 4});
  // Not started: nothing drains the queue, as when the writer is stuck on a slow disk.
  const auto started = std::chrono::steady_clock::now();
  for (std::uint64_t n = 1; n <= 10; ++n) log.record(facts("POISON " + std::to_string(n), n));
  CHECK(std::chrono::steady_clock::now() - started < test::grace(1s));
  CHECK(log.recorded() == 10);
  CHECK(log.dropped() == 6);
  log.start();
  log.flush();
  CHECK(read_lines(path).size() == 4);
  // Room again once the writer ran.
  log.record(facts("POISON 11", 11));
  log.flush();
  CHECK(read_lines(path).size() == 5);
  CHECK(log.dropped() == 6);
}

TEST_CASE("memory keeps the last records; a user sees only its own; inputs only with the opt-in, and only in the file") {
  const std::string path = fresh_path("inputs.jsonl");
  DeadLetterLog log(DeadLetterOptions{.path = path, .recent_entries = 3, .include_inputs = true});
  log.start();
  for (std::uint64_t n = 1; n <= 5; ++n) {
    const std::string input = "POISON \"" + std::to_string(n) + "\"";
    DeadLetterFacts f = facts(input, n);
    f.uid = n % 2 == 0 ? 2000 : 1000;
    log.record(f);
  }
  log.stop();  // writes what is queued
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 5);
  Parsed last(lines.back());
  CHECK(last.text("input") == "POISON \"5\"");
  const std::string recent = log.recent(std::nullopt);
  CHECK(std::count(recent.begin(), recent.end(), '\n') == 3);
  CHECK(recent.find("\"input\"") == std::string::npos);
  CHECK(recent.find(fmt::format("{:016x}", 3)) != std::string::npos);
  CHECK(recent.find(fmt::format("{:016x}", 2)) == std::string::npos);
  const std::string mine = log.recent(2000);
  CHECK(std::count(mine.begin(), mine.end(), '\n') == 1);  // request 4; 2 fell out of memory
  CHECK(mine.find(fmt::format("{:016x}", 4)) != std::string::npos);
}

TEST_CASE("a dead-letter file that cannot be opened stops the start with its reason") {
  const std::string path = fresh_path("no/such/dir/dead.jsonl");
  try {
    DeadLetterLog log(DeadLetterOptions{.path = path});
    FAIL("opened " << path);
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
