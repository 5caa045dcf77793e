#include "tools/stress_shape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace batchd::stress {

namespace {

Failure bad_shape(std::string message) { return make_failure(std::errc::invalid_argument, std::move(message)); }

// A finite number >= 0 and nothing else.
bool parse_number(std::string_view text, double& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(out) && out >= 0;
}

// Segments longer than this, or rates above it, are typing mistakes (a year; a billion a second).
constexpr double kMaxSeconds = 365.0 * 86400;
constexpr double kMaxRate = 1e9;

}  // namespace

RateShape::RateShape(std::vector<RateSegment> segments) : segments_(std::move(segments)) {
  double requests = 0;
  double seconds = 0;
  for (const RateSegment& s : segments_) {
    requests_before_.push_back(requests);
    seconds_before_.push_back(seconds);
    requests += (s.from + s.to) / 2 * s.seconds;
    seconds += s.seconds;
  }
  cycle_requests_ = requests;
  cycle_s_ = seconds;
}

RateShape RateShape::constant(double rate) { return RateShape({RateSegment{rate, rate, 1}}); }

Expected<RateShape> RateShape::parse(std::string_view spec) {
  std::vector<RateSegment> segments;
  if (spec.empty()) return bad_shape("expected RATE:SECONDS or FROM..TO:SECONDS, comma-separated");
  for (std::size_t start = 0; start <= spec.size();) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    const std::size_t colon = item.rfind(':');
    if (colon == std::string_view::npos) {
      return bad_shape(fmt::format("\"{}\" is not RATE:SECONDS or FROM..TO:SECONDS", item));
    }
    const std::string_view rates = item.substr(0, colon);
    const std::size_t dots = rates.find("..");
    RateSegment segment;
    const bool rates_ok = dots == std::string_view::npos
                              ? parse_number(rates, segment.from) && ((segment.to = segment.from), true)
                              : parse_number(rates.substr(0, dots), segment.from) &&
                                    parse_number(rates.substr(dots + 2), segment.to);
    if (!rates_ok || segment.from > kMaxRate || segment.to > kMaxRate) {
      return bad_shape(fmt::format("\"{}\": rates are requests per second from 0 to 1e9", item));
    }
    if (!parse_number(item.substr(colon + 1), segment.seconds) || segment.seconds <= 0 ||
        segment.seconds > kMaxSeconds) {
      return bad_shape(fmt::format("\"{}\": a segment lasts more than 0 seconds and at most a year", item));
    }
    segments.push_back(segment);
  }
  RateShape shape(std::move(segments));
  if (shape.cycle_requests_ < 1) return bad_shape("a cycle of the shape must bring at least one request");
  return shape;
}

std::int64_t RateShape::offset_ns(std::uint64_t id) const noexcept {
  const double cycles = std::floor(static_cast<double>(id) / cycle_requests_);
  const double rest = static_cast<double>(id) - cycles * cycle_requests_;
  // The segment during which the integral reaches `rest`: the last one starting at or before it
  // that brings any requests (a silent segment is passed over; so is the rounding's overshoot).
  std::size_t i = segments_.size() - 1;
  while (i > 0 && (requests_before_[i] > rest || segments_[i].from + segments_[i].to == 0)) --i;
  const RateSegment& s = segments_[i];
  const double into = rest - requests_before_[i];
  // Solve from*t + slope*t^2/2 = into for t within the segment.
  const double slope = (s.to - s.from) / s.seconds;
  double t = 0;
  if (into <= 0) {
    t = 0;
  } else if (std::abs(slope) * s.seconds < 1e-9 * std::max(s.from, 1.0)) {
    t = s.from > 0 ? into / s.from : s.seconds;
  } else {
    const double root = std::sqrt(std::max(0.0, s.from * s.from + 2 * slope * into));
    t = 2 * into / (s.from + root);  // the stable form of (root - from) / slope
  }
  t = std::clamp(t, 0.0, s.seconds);
  return std::llround((cycles * cycle_s_ + seconds_before_[i] + t) * 1e9);
}

std::string RateShape::describe() const {
  if (is_constant()) return fmt::format("{}", segments_[0].from);
  std::string text;
  for (const RateSegment& s : segments_) {
    if (!text.empty()) text += ',';
    if (s.from == s.to) {
      fmt::format_to(std::back_inserter(text), "{}:{}", s.from, s.seconds);
    } else {
      fmt::format_to(std::back_inserter(text), "{}..{}:{}", s.from, s.to, s.seconds);
    }
  }
  return text;
}

}  // namespace batchd::stress
