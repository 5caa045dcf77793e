#include "tracing/trace_settings.hpp"

#include <charconv>
#include <stdexcept>

namespace batchd::tracing {

namespace {

constexpr std::string_view kLevel = "trace_level";
constexpr std::string_view kRate = "trace_rate";
constexpr std::string_view kCount = "trace_count";
constexpr std::string_view kMode = "trace_mode";
constexpr std::string_view kOpenTelemetry = "opentelemetry";

// A change checked, not yet applied: each field set where the update names that setting.
struct Parsed {
  bool level = false, rate = false, count = false;
  std::optional<bool> on;
  std::optional<std::uint64_t> rate_value;
  std::optional<std::int64_t> count_value;
};

const std::string& one_value(const TraceSetting& setting) {
  if (setting.value->size() != 1) {
    throw std::invalid_argument(setting.name + " takes one value, not " + std::to_string(setting.value->size()));
  }
  return setting.value->front();
}

template <typename Int>
Int parse_int(const TraceSetting& setting, Int least) {
  const std::string& text = one_value(setting);
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || value < least) {
    throw std::invalid_argument(setting.name + " must be an integer of at least " + std::to_string(least) + ", not \"" +
                                text.substr(0, 64) + "\"");
  }
  return value;
}

Parsed parse(std::span<const TraceSetting> changes) {
  Parsed parsed;
  for (const TraceSetting& change : changes) {
    const std::string_view name = change.name;
    if (name == kLevel) {
      parsed.level = true;
      if (!change.value) continue;
      bool off = false, timestamps = false;
      for (const std::string& level : *change.value) {
        if (level == "OFF") {
          off = true;
        } else if (level == "TIMESTAMPS") {
          timestamps = true;
        } else if (level == "TENSORS") {
          throw std::invalid_argument("trace_level TENSORS is not served: batchd's spans carry no tensors");
        } else {
          throw std::invalid_argument("trace_level takes OFF or TIMESTAMPS, not \"" + level.substr(0, 64) + "\"");
        }
      }
      if (off == timestamps) throw std::invalid_argument("trace_level takes one of OFF and TIMESTAMPS");
      parsed.on = timestamps;
    } else if (name == kRate) {
      parsed.rate = true;
      if (change.value) parsed.rate_value = parse_int<std::uint64_t>(change, 0);
    } else if (name == kCount) {
      parsed.count = true;
      if (change.value) parsed.count_value = parse_int<std::int64_t>(change, -1);
    } else if (name == kMode) {
      if (change.value && one_value(change) != kOpenTelemetry) {
        throw std::invalid_argument("trace_mode is opentelemetry: batchd exports spans over OTLP");
      }
    } else if (name == "trace_file" || name == "log_frequency") {
      throw std::invalid_argument(change.name + " is not served: batchd exports spans over OTLP (trace_mode "
                                  "opentelemetry), to the collector its flags name, and writes no trace file");
    } else {
      throw std::invalid_argument("no trace setting is named \"" + change.name.substr(0, 64) + "\"");
    }
  }
  return parsed;
}

std::vector<TraceSetting> settings_list(bool on, std::uint64_t rate, std::int64_t count) {
  return {{std::string(kLevel), std::vector<std::string>{on ? "TIMESTAMPS" : "OFF"}},
          {std::string(kRate), std::vector<std::string>{std::to_string(rate)}},
          {std::string(kCount), std::vector<std::string>{std::to_string(count)}},
          {std::string(kMode), std::vector<std::string>{std::string(kOpenTelemetry)}}};
}

}  // namespace

bool is_list_setting(std::string_view name) noexcept { return name == kLevel; }

std::vector<TraceSetting> trace_settings_off() { return settings_list(false, 0, -1); }

TraceSettings::TraceSettings(bool on, std::uint64_t rate, std::int64_t count) noexcept
    : start_on_(on), start_rate_(rate), start_count_(count), on_(on), global_(rate, count) {}

bool TraceSettings::decide(std::string_view model, bool caller_sampled) noexcept {
  if (!model.empty() && any_model_.load(std::memory_order_relaxed)) {
    const std::lock_guard lock(mutex_);
    const auto found = models_.find(model);
    if (found != models_.end()) {
      ModelTrace& own = found->second;
      if (!own.on.value_or(on_.load(std::memory_order_relaxed))) return false;
      if (!caller_sampled && !(own.own_rate ? own.own.pick() : global_.pick())) return false;
      return own.own_count ? own.own.take() : global_.take();
    }
  }
  if (!on_.load(std::memory_order_relaxed)) return false;
  return caller_sampled ? global_.take() : global_.sample();
}

std::vector<TraceSetting> TraceSettings::render(const ModelTrace* model) const {
  const bool on = on_.load(std::memory_order_relaxed);
  if (model == nullptr) return settings_list(on, global_.rate(), global_.count_left());
  return settings_list(model->on.value_or(on), model->own_rate ? model->own.rate() : global_.rate(),
                       model->own_count ? model->own.count_left() : global_.count_left());
}

std::vector<TraceSetting> TraceSettings::get(std::string_view model) const {
  const std::lock_guard lock(mutex_);
  const auto found = model.empty() ? models_.end() : models_.find(model);
  return render(found != models_.end() ? &found->second : nullptr);
}

std::vector<TraceSetting> TraceSettings::update(std::string_view model, std::span<const TraceSetting> changes) {
  const Parsed parsed = parse(changes);
  const std::lock_guard lock(mutex_);
  if (model.empty()) {
    if (parsed.level) on_.store(parsed.on.value_or(start_on_), std::memory_order_relaxed);
    if (parsed.rate) global_.set_rate(parsed.rate_value.value_or(start_rate_));
    if (parsed.count) global_.set_count(parsed.count_value.value_or(start_count_));
    return render(nullptr);
  }
  auto found = models_.find(model);
  if (found == models_.end()) {
    if (models_.size() >= kMaxModels) {
      throw std::invalid_argument("trace settings are held for " + std::to_string(kMaxModels) +
                                  " models already; clear one first");
    }
    found = models_.try_emplace(std::string(model)).first;
  }
  ModelTrace& own = found->second;
  if (changes.empty()) {  // Triton's way to drop a model's settings
    own.on.reset();
    own.own_rate = own.own_count = false;
  } else {
    if (parsed.level) own.on = parsed.on;
    if (parsed.rate) {
      own.own_rate = parsed.rate_value.has_value();
      own.own.set_rate(parsed.rate_value.value_or(0));
    }
    if (parsed.count) {
      own.own_count = parsed.count_value.has_value();
      own.own.set_count(parsed.count_value.value_or(-1));
    }
  }
  std::vector<TraceSetting> now = render(&own);
  if (!own.on && !own.own_rate && !own.own_count) models_.erase(found);
  any_model_.store(!models_.empty(), std::memory_order_relaxed);
  return now;
}

}  // namespace batchd::tracing
