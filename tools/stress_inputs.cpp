#include "tools/stress_inputs.hpp"

#include <algorithm>
#include <random>

namespace batchd::stress {

namespace {

// Enough bodies that consecutive requests differ in length and content, within kPoolBytes at the
// largest lengths: 4,096 bodies of 60 KB took 240 MiB, and a minute to make under TSan (each
// request's id prefix keeps the bodies sent apart anyway).
constexpr std::size_t kPoolBodies = 4096;
constexpr std::size_t kMinPoolBodies = 64;
constexpr std::uint64_t kPoolBytes = std::uint64_t{16} << 20;

std::size_t pool_bodies(std::uint32_t max_bytes) {
  return std::clamp<std::size_t>(kPoolBytes / std::max<std::uint32_t>(max_bytes, 1), kMinPoolBodies, kPoolBodies);
}
// The id is written as up to this many hex digits: 2^32 distinct prefixes, far more than can
// ever be in flight at once.
constexpr std::size_t kIdDigits = 8;
// Short inputs give the id at most half their bytes (but at least this many digits, 16^4 being
// still well above the requests one client can have in flight), so they keep some multibyte text.
constexpr std::size_t kMinIdDigits = 4;

std::size_t id_digits(std::size_t input_bytes) {
  return std::min(kIdDigits, std::max(input_bytes / 2, std::min(input_bytes, kMinIdDigits)));
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A random code point that encodes to exactly `width` bytes (surrogates are not valid UTF-8).
char32_t random_code_point(unsigned width, std::mt19937_64& rng) {
  auto pick = [&](char32_t lo, char32_t hi) {
    return std::uniform_int_distribution<char32_t>(lo, hi)(rng);
  };
  switch (width) {
    case 1: return pick(0x20, 0x7E);
    case 2: return pick(0x80, 0x7FF);
    case 3: {
      const char32_t cp = pick(0x800, 0xFFFF - 0x800);
      return cp >= 0xD800 ? cp + 0x800 : cp;
    }
    default: return pick(0x10000, 0x10FFFF);
  }
}

std::string random_body(std::uint32_t bytes, std::mt19937_64& rng) {
  std::string body;
  body.reserve(bytes);
  // The id prefix goes here at send time; ASCII placeholders keep the body valid meanwhile.
  body.append(id_digits(bytes), '0');
  std::uniform_int_distribution<unsigned> width_dist(1, 4);
  while (body.size() < bytes) {
    unsigned width = width_dist(rng);
    if (width > bytes - body.size()) width = 1;  // pad with ASCII so the length is exact
    append_code_point(body, random_code_point(width, rng));
  }
  return body;
}

}  // namespace

InputPool::InputPool(std::uint32_t min_bytes, std::uint32_t max_bytes, std::uint64_t seed)
    : max_bytes_(max_bytes) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> length_dist(min_bytes, max_bytes);
  const std::size_t bodies = pool_bodies(max_bytes);
  bodies_.reserve(bodies);
  for (std::size_t i = 0; i < bodies; ++i) bodies_.push_back(random_body(length_dist(rng), rng));
}

InputPool::InputPool(std::vector<std::string> replay) : bodies_(std::move(replay)), max_bytes_(0), verbatim_(true) {
  for (const std::string& body : bodies_) max_bytes_ = std::max(max_bytes_, static_cast<std::uint32_t>(body.size()));
}

void InputPool::build(std::uint64_t id, std::string& out) const {
  static constexpr char kHex[] = "0123456789abcdef";
  out.assign(bodies_[id % bodies_.size()]);
  if (verbatim_) return;
  const std::size_t digits = id_digits(out.size());
  // Lowest digits last, so a prefix shortened by a short input still varies from id to id.
  std::uint64_t rest = id;
  for (std::size_t i = digits; i-- > 0; rest >>= 4) out[i] = kHex[rest & 0xF];
}

}  // namespace batchd::stress
