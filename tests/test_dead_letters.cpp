// Dead letters end to end: the sim backend's poison inputs, mixed into batches of normal requests,
// land in the daemon's dead-letter file exactly once each while everything else is answered;
// batchctl lists them, the status page counts them, the file rotates at its bound, and without a
// file the daemon still keeps the recent ones (each user seeing only its own).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"
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

std::string dir_of(const std::string& socket) { return fs::path(socket).parent_path().string(); }

using test::batchctl;

// The fields of one dead-letter record that the tests check.
struct Letter {
  std::string sha256, reason, request_id, model;
  std::uint64_t input_bytes = 0;
  std::int64_t uid = -1;
};

Letter parse_letter(simdjson::dom::element record) {
  Letter out;
  std::string_view text;
  REQUIRE(record["input_sha256"].get_string().get(text) == simdjson::SUCCESS);
  out.sha256 = text;
  REQUIRE(record["reason"].get_string().get(text) == simdjson::SUCCESS);
  out.reason = text;
  REQUIRE(record["model"].get_string().get(text) == simdjson::SUCCESS);
  out.model = text;
  REQUIRE(record["request_id"].get_string().get(text) == simdjson::SUCCESS);
  out.request_id = text;
  REQUIRE(record["input_bytes"].get_uint64().get(out.input_bytes) == simdjson::SUCCESS);
  REQUIRE(record["uid"].get_int64().get(out.uid) == simdjson::SUCCESS);
  return out;
}

std::vector<Letter> parse_lines(const std::vector<std::string>& lines) {
  std::vector<Letter> out;
  simdjson::dom::parser parser;
  for (const auto& line : lines) {
    simdjson::dom::element record;
    REQUIRE_MESSAGE(parser.parse(line).get(record) == simdjson::SUCCESS, line);
    out.push_back(parse_letter(record));
  }
  return out;
}

// batchctl dead-letters --json: the counts and the records.
struct Listing {
  std::uint64_t recorded = 0, dropped = 0;
  std::vector<Letter> entries;
};

Listing list_json(const std::string& socket, std::optional<test::RunAs> as = std::nullopt) {
  const test::ProcessOutput run = batchctl({"dead-letters", "--socket", socket, "--json"}, as);
  INFO(run.err);
  REQUIRE(run.exit_code() == 0);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE_MESSAGE(parser.parse(run.out).get(doc) == simdjson::SUCCESS, run.out);
  Listing out;
  REQUIRE(doc["dead_letters"].get_uint64().get(out.recorded) == simdjson::SUCCESS);
  REQUIRE(doc["dropped"].get_uint64().get(out.dropped) == simdjson::SUCCESS);
  simdjson::dom::array entries;
  REQUIRE(doc["entries"].get_array().get(entries) == simdjson::SUCCESS);
  for (simdjson::dom::element entry : entries) out.entries.push_back(parse_letter(entry));
  return out;
}

// Waits until the daemon's status page counts `expected` dead letters; returns what it counts.
std::uint64_t counted(const Client& client, std::uint64_t expected) {
  std::uint64_t seen = 0;
  test::eventually([&] {
    seen = client.daemon_status().dead_letters;
    return seen == expected;
  }, test::grace(5s));
  return seen;
}

std::multiset<std::string> digests(const std::vector<std::string>& inputs) {
  std::multiset<std::string> out;
  for (const auto& input : inputs) out.insert(reference_batchstring(input, 1));
  return out;
}

std::multiset<std::string> digests(const std::vector<Letter>& letters) {
  std::multiset<std::string> out;
  for (const auto& letter : letters) out.insert(letter.sha256);
  return out;
}

}  // namespace

TEST_CASE("poison inputs mixed into batches land in the dead-letter file exactly once each; the rest are answered") {
  const std::string socket = test::temp_socket_path();
  const std::string file = dir_of(socket) + "/dead-letters.jsonl";
  // Two devices: a failing batch is retried on the other, then split until the poison fails alone.
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "2", "--sim-poison", "POISON", "--policy", "fixed",
                                      "--max-batch", "32", "--max-wait-ms", "5", "--dead-letter", file});
  auto client = test::connect(socket);
  REQUIRE(client->submit("a known-good input first", 10s).ok());  // the router's canary

  const std::size_t normal_count = test::scaled(480, 96);
  const std::size_t poison_count = test::scaled(24, 8);
  std::vector<std::string> poisons;
  for (std::size_t i = 0; i + 2 < poison_count; ++i) poisons.push_back("POISON #" + std::to_string(i) + " x");
  // Two requests with the same poison input: each caller's request failed, so two records.
  poisons.push_back("POISON twin");
  poisons.push_back("POISON twin");
  std::vector<std::string> inputs;
  for (std::size_t i = 0; i < normal_count; ++i) inputs.push_back("normal " + std::to_string(i));
  inputs.insert(inputs.end(), poisons.begin(), poisons.end());
  std::mt19937_64 rng(12);
  std::shuffle(inputs.begin(), inputs.end(), rng);

  std::atomic<std::size_t> answered{0}, right{0}, wrong{0}, poisoned{0}, other_errors{0};
  for (const auto& input : inputs) {
    const bool poison = input.starts_with("POISON");
    REQUIRE_FALSE(client->submit_async(input, 20s, [&, input, poison](Result&& r) {
      if (poison) {
        const bool typed = !r.ok() && r.error().code == ErrorCode::kBackendError &&
                           r.error().message.find("poison") != std::string::npos;
        (typed ? poisoned : other_errors).fetch_add(1);
      } else if (r.ok()) {
        (r.output() == sim_expected_output(input, 1) ? right : wrong).fetch_add(1);
      } else {
        other_errors.fetch_add(1);
      }
      answered.fetch_add(1);
    }).has_value());
  }
  REQUIRE(test::eventually([&] { client->poll(); return answered.load() == inputs.size(); }, test::grace(20s)));
  CHECK(right.load() == normal_count);
  CHECK(wrong.load() == 0);
  CHECK(poisoned.load() == poison_count);
  CHECK(other_errors.load() == 0);

  // The status page counts each failed request once.
  CHECK(counted(*client, poison_count) == poison_count);
  const DaemonStatus status = client->daemon_status();
  CHECK(status.dead_letters_dropped == 0);
  CHECK(status.requests_failed == poison_count);

  // The file: one line per poison request, its digest and size, never the input.
  std::vector<std::string> lines;
  CHECK(test::eventually([&] { lines = read_lines(file); return lines.size() >= poison_count; }, test::grace(5s)));
  CHECK(lines.size() == poison_count);
  for (const auto& line : lines) {
    for (const auto& input : poisons) CHECK(line.find(input) == std::string::npos);
  }
  const std::vector<Letter> letters = parse_lines(lines);
  CHECK(digests(letters) == digests(poisons));
  std::map<std::string, std::uint64_t> size_of;
  for (const auto& input : poisons) size_of[reference_batchstring(input, 1)] = input.size();
  std::set<std::string> request_ids;
  for (const Letter& letter : letters) {
    CHECK(letter.input_bytes == size_of[letter.sha256]);
    CHECK(letter.reason == "poison");  // the canary ran on the same devices
    CHECK(letter.model == "batchstring");
    request_ids.insert(letter.request_id);
  }
  CHECK(request_ids.size() == poison_count);  // distinct requests, each once

  // batchctl lists the same records, as JSON and as a table, and counts them in its status.
  const Listing listing = list_json(socket);
  CHECK(listing.recorded == poison_count);
  CHECK(listing.dropped == 0);
  CHECK(digests(listing.entries) == digests(poisons));
  const test::ProcessOutput table = batchctl({"--socket", socket, "dead-letters"});
  REQUIRE(table.exit_code() == 0);
  CHECK(table.out.find(fmt::format("dead letters: {} recorded since the daemon started, 0 dropped", poison_count)) !=
        std::string::npos);
  for (const auto& input : poisons) CHECK(table.out.find(reference_batchstring(input, 1)) != std::string::npos);
  const test::ProcessOutput report = batchctl({"--socket", socket});
  CHECK(report.out.find(fmt::format("dead letters: {} recorded, 0 dropped", poison_count)) != std::string::npos);
}

TEST_CASE("the dead-letter file rotates at its bound, keeping FILE and FILE.1, while the counter counts all") {
  const std::string socket = test::temp_socket_path();
  const std::string file = dir_of(socket) + "/rotating.jsonl";
  // 0.002 MiB: about 2 KB, five or so records a file.
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "100",
                                      "--sim-poison", "POISON", "--max-wait-ms", "0", "--dead-letter", file,
                                      "--dead-letter-max-mib", "0.002"});
  auto client = test::connect(socket);
  REQUIRE(client->submit("known good", 10s).ok());
  const std::size_t count = test::scaled(40, 20);
  std::vector<std::string> poisons;
  for (std::size_t i = 0; i < count; ++i) {
    poisons.push_back("POISON rotating " + std::to_string(i));
    const Result r = client->submit(poisons.back(), 10s);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kBackendError);
  }
  CHECK(counted(*client, count) == count);
  const std::uint64_t bound = static_cast<std::uint64_t>(0.002 * 1024 * 1024);
  std::vector<std::string> kept;
  // The writer thread may still be finishing the last record.
  CHECK(test::eventually([&] {
    kept = read_lines(file + ".1");
    for (const auto& line : read_lines(file)) kept.push_back(line);
    return !kept.empty() && kept.back().find(reference_batchstring(poisons.back(), 1)) != std::string::npos;
  }, test::grace(5s)));
  CHECK(fs::exists(file + ".1"));
  CHECK_FALSE(fs::exists(file + ".2"));
  CHECK(fs::file_size(file) <= bound);
  CHECK(fs::file_size(file + ".1") <= bound);
  CHECK(kept.size() < count);
  // What is kept is the newest records, in order.
  const std::vector<Letter> letters = parse_lines(kept);
  for (std::size_t i = 0; i < letters.size(); ++i) {
    CHECK(letters[i].sha256 == reference_batchstring(poisons[count - letters.size() + i], 1));
  }
  CHECK(client->daemon_status().dead_letters_dropped == 0);
}

TEST_CASE("without a file the daemon keeps the recent dead letters in memory; another user sees only its own") {
  const std::string socket = test::temp_socket_path();
  constexpr unsigned kOtherUser = 12345;
  constexpr unsigned kThirdUser = 12346;
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-poison", "POISON", "--max-wait-ms", "0",
                                      "--allow-uid", std::to_string(kOtherUser)});
  auto client = test::connect(socket);
  // The canary: without a known-good input, failures in a row mark the devices unhealthy, and a
  // later poison input then gets backend_unavailable instead of failing alone.
  REQUIRE(client->submit("known good", 10s).ok());
  const std::vector<std::string> poisons = {"POISON a", "POISON bb", "POISON ccc"};
  for (const auto& input : poisons) CHECK_FALSE(client->submit(input, 10s).ok());
  CHECK(counted(*client, poisons.size()) == poisons.size());
  Listing listing;
  CHECK(test::eventually([&] { listing = list_json(socket); return listing.entries.size() == poisons.size(); },
                         test::grace(5s)));
  CHECK(listing.recorded == poisons.size());
  CHECK(digests(listing.entries) == digests(poisons));
  for (const Letter& letter : listing.entries) CHECK(letter.uid == static_cast<std::int64_t>(::geteuid()));
  if (::geteuid() != 0) {
    MESSAGE("not root: other users' views are not tried (switching user needs root)");
    return;
  }
  const test::ProcessOutput sent = test::send_as(socket, {kOtherUser, kOtherUser}, "POISON from another user");
  CHECK(sent.exit_code() != 0);
  CHECK(counted(*client, poisons.size() + 1) == poisons.size() + 1);
  Listing theirs;
  CHECK(test::eventually([&] { theirs = list_json(socket, test::RunAs{kOtherUser, kOtherUser}); return theirs.entries.size() == 1; },
                         test::grace(5s)));
  REQUIRE(theirs.entries.size() == 1);
  CHECK(theirs.entries[0].uid == static_cast<std::int64_t>(kOtherUser));
  CHECK(theirs.entries[0].sha256 == reference_batchstring("POISON from another user", 1));
  CHECK(list_json(socket).entries.size() == poisons.size() + 1);  // the daemon's own user sees all
  const test::ProcessOutput refused =
      batchctl({"dead-letters", "--socket", socket}, test::RunAs{kThirdUser, kThirdUser});
  CHECK(refused.exit_code() != 0);
  CHECK(refused.err.find("may not use") != std::string::npos);
}
