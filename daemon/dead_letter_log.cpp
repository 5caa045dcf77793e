#include "daemon/dead_letter_log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <iterator>

#include "backend/reference_batchstring.hpp"
#include "text/json_escape.hpp"

namespace batchd {
namespace {

// RFC 3339 in UTC with milliseconds: 2026-12-01T20:21:55.123Z.
void append_time(std::int64_t unix_ms, std::string& out) {
  const std::int64_t seconds = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms - seconds * 1000);
}

}  // namespace

std::size_t DeadLetterLog::KeyHash::operator()(const Key& key) const noexcept {
  return std::hash<std::uint64_t>{}(key.who * 0x9e3779b97f4a7c15ULL ^ key.what);
}

DeadLetterLog::DeadLetterLog(DeadLetterOptions options) : options_(std::move(options)) {
  if (!options_.path.empty()) file_.emplace(DeadLetterFile::open(options_.path, options_.max_file_bytes).value());
  queue_.reserve(options_.queue_capacity);
}

DeadLetterLog::~DeadLetterLog() { stop(); }

void DeadLetterLog::start() {
  std::lock_guard lock(mu_);
  running_ = true;
  writer_ = std::thread([this] { writer(); });
}

void DeadLetterLog::stop() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

DeadLetterLog::Key DeadLetterLog::key_of(const DeadLetterFacts& facts) noexcept {
  if (facts.request_id != 0) {
    return {(static_cast<std::uint64_t>(facts.uid) << 1) | 1U, facts.request_id};
  }
  return {facts.client_id << 1, (std::uint64_t{facts.slot} << 32) | facts.generation};
}

bool DeadLetterLog::seen_before_locked(const Key& key) {
  if (!seen_.insert(key).second) return true;
  seen_order_.push_back(key);
  if (seen_order_.size() > kRememberedRequests) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  return false;
}

void DeadLetterLog::record(const DeadLetterFacts& facts) noexcept {
  try {
    // Everything costly happens before the lock: the digest, and copying the message.
    Record r;
    r.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    reference_batchstring(facts.input, 1, r.sha256);
    r.input_bytes = facts.input.size();
    r.error.assign(facts.error);
    r.model.assign(facts.model);
    if (options_.include_inputs) r.input.assign(facts.input);
    r.device = facts.device;
    r.devices_tried = facts.devices_tried;
    r.proven = facts.proven;
    r.client_id = facts.client_id;
    r.pid = facts.pid;
    r.uid = facts.uid;
    r.request_id = facts.request_id;
    const Key key = key_of(facts);
    {
      std::lock_guard lock(mu_);
      if (seen_before_locked(key)) {
        ++duplicates_;
        return;
      }
      ++recorded_;
      if (queue_.size() >= options_.queue_capacity) {
        ++dropped_;
        return;
      }
      queue_.push_back(std::move(r));
      ++queued_total_;
    }
    wake_.notify_one();
  } catch (...) {
    // Out of memory: the record is lost, and says so.
    std::lock_guard lock(mu_);
    ++recorded_;
    ++dropped_;
  }
}

void DeadLetterLog::flush() {
  std::unique_lock lock(mu_);
  if (!running_ || std::this_thread::get_id() == writer_.get_id()) return;
  const std::uint64_t target = queued_total_;
  handled_.wait(lock, [&] { return handled_total_ >= target || !running_; });
}

std::string DeadLetterLog::format(const Record& r, bool with_input) {
  std::string out;
  out.reserve(256 + r.error.size() + (with_input ? r.input.size() : 0));
  out.append(R"({"time":")");
  append_time(r.unix_ms, out);
  out.append(R"(","model":")");
  text::append_json_escaped_lossy(r.model, out);
  fmt::format_to(std::back_inserter(out), R"(","reason":"{}","input_sha256":"{}","input_bytes":{},"error":")",
                 r.proven ? "poison" : "repeated_error", std::string_view(r.sha256, sizeof(r.sha256)),
                 r.input_bytes);
  text::append_json_escaped_lossy(r.error, out);
  fmt::format_to(std::back_inserter(out), R"(","device":{},"devices_tried":[)", r.device);
  bool first = true;
  for (unsigned d = 0; d < 64; ++d) {
    if (((r.devices_tried >> d) & 1U) == 0) continue;
    fmt::format_to(std::back_inserter(out), "{}{}", first ? "" : ",", d);
    first = false;
  }
  fmt::format_to(std::back_inserter(out), R"(],"client_id":{},"pid":{},"uid":{},"request_id":)", r.client_id,
                 r.pid, r.uid);
  if (r.request_id != 0) {
    fmt::format_to(std::back_inserter(out), R"("{:016x}")", r.request_id);
  } else {
    out.append("null");
  }
  if (with_input) {
    out.append(R"(,"input":")");
    text::append_json_escaped(r.input, out);  // the daemon took only valid UTF-8
    out.push_back('"');
  }
  out.append("}\n");
  return out;
}

void DeadLetterLog::handle(const Record& record) {
  std::string line = format(record, false);
  if (file_) {
    const std::string with_input = options_.include_inputs ? format(record, true) : std::string();
    if (auto written = file_->append(options_.include_inputs ? with_input : line); !written) {
      {
        std::lock_guard lock(mu_);
        ++dropped_;
      }
      if (!file_failing_) spdlog::error("dead letters are being lost: {}", written.error().message);
      file_failing_ = true;
    } else if (file_failing_) {
      spdlog::info("the dead-letter file {} takes records again", file_->path());
      file_failing_ = false;
    }
  }
  std::lock_guard lock(recent_mu_);
  recent_.push_back(RecentLine{record.uid, std::move(line)});
  if (recent_.size() > options_.recent_entries) recent_.pop_front();
}

void DeadLetterLog::writer() noexcept {
  std::vector<Record> round;
  round.reserve(options_.queue_capacity);
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and everything queued is written
    round.swap(queue_);
    lock.unlock();
    for (const Record& record : round) {
      try {
        handle(record);
      } catch (const std::exception& e) {
        spdlog::error("dead letter not kept: {}", e.what());
        std::lock_guard relock(mu_);
        ++dropped_;
      }
    }
    const std::size_t n = round.size();
    round.clear();
    lock.lock();
    handled_total_ += n;
    handled_.notify_all();
  }
  running_ = false;
  handled_.notify_all();
}

std::string DeadLetterLog::recent(std::optional<std::int64_t> uid) const {
  std::string out;
  std::lock_guard lock(recent_mu_);
  for (const RecentLine& entry : recent_) {
    if (!uid || entry.uid == *uid) out += entry.line;
  }
  return out;
}

std::uint64_t DeadLetterLog::recorded() const noexcept {
  std::lock_guard lock(mu_);
  return recorded_;
}

std::uint64_t DeadLetterLog::dropped() const noexcept {
  std::lock_guard lock(mu_);
  return dropped_;
}

std::uint64_t DeadLetterLog::duplicates() const noexcept {
  std::lock_guard lock(mu_);
  return duplicates_;
}

}  // namespace batchd
