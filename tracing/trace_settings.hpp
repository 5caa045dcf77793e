// Triton's trace settings at a door (its trace extension: /v2/trace/setting and gRPC TraceSetting):
// the global ones and any model's own, read and changed at run time, and the decision they make for
// each request. A model's own setting replaces the global one for that model; one it does not set
// follows the global one as it changes. Thread-safe: while no model has settings of its own the
// decision is lock-free; once one has, each decision for a named model takes a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracing/trace_sampler.hpp"

namespace batchd::tracing {

// One setting by Triton's name, its value as strings (trace_level's is a list; the others hold
// one). In an update, no value clears the setting: a model's then follows the global one, and a
// global one goes back to what the process started with.
struct TraceSetting {
  std::string name;
  std::optional<std::vector<std::string>> value;
};

// Whether Triton writes this setting's value as a list of strings rather than as one string.
[[nodiscard]] bool is_list_setting(std::string_view name) noexcept;

// What a door with tracing off answers a read with: trace_level OFF.
[[nodiscard]] std::vector<TraceSetting> trace_settings_off();

class TraceSettings {
 public:
  TraceSettings(bool on, std::uint64_t rate, std::int64_t count) noexcept;

  // Whether a request for `model` (empty: none named) is traced; `caller_sampled`: its caller's
  // context says so, which the rate does not overrule (the level and the count still do).
  [[nodiscard]] bool decide(std::string_view model, bool caller_sampled) noexcept;

  // Every setting as `model` sees it (empty: the global ones).
  [[nodiscard]] std::vector<TraceSetting> get(std::string_view model) const;
  // Applies `changes` to `model`'s settings (empty: the global ones); a model's update that names
  // no setting clears all of its own. Returns what get() then says. Throws std::invalid_argument
  // saying why a change is refused, having applied none.
  std::vector<TraceSetting> update(std::string_view model, std::span<const TraceSetting> changes);

  // Models with settings of their own at most: each is a name a caller chose.
  static constexpr std::size_t kMaxModels = 1024;

 private:
  struct ModelTrace {
    std::optional<bool> on;
    bool own_rate = false;
    bool own_count = false;
    TraceSampler own{0, -1};  // its rate where own_rate, its count where own_count
  };
  std::vector<TraceSetting> render(const ModelTrace* model) const;

  const bool start_on_;
  const std::uint64_t start_rate_;
  const std::int64_t start_count_;
  std::atomic<bool> on_;
  TraceSampler global_;
  std::atomic<bool> any_model_{false};
  mutable std::mutex mutex_;  // guards models_, and orders updates
  std::map<std::string, ModelTrace, std::less<>> models_;
};

}  // namespace batchd::tracing
