// The arithmetic of the CUDA batchstring: SHA-256 (FIPS 180-4) and lowercase hex, as
// __host__ __device__ functions. The kernel runs them on the GPU; the host tests compile the very
// same functions with g++ and compare them with OpenSSL, so a machine without a GPU still checks
// every bit of the kernel's arithmetic. No CUDA header is needed to include this file.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BATCHD_HD __host__ __device__ __forceinline__
#else
#define BATCHD_HD inline
#endif
// Full unrolling keeps the message schedule in registers on the device. Only the device pass
// sees the pragma: the host compiler would warn about it (and unrolls on its own at -O2).
#if defined(__CUDA_ARCH__)
#define BATCHD_UNROLL _Pragma("unroll")
#else
#define BATCHD_UNROLL
#endif

namespace batchd::kernels::sha256 {

inline constexpr std::uint32_t kDigestHexChars = 64;

// FIPS 180-4's round constants, written once for both tables: HostRoundConstants below, and the
// kernel's __constant__ one in sha256_kernel.cu.
#define BATCHD_SHA256_ROUND_CONSTANTS                                                             \
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, \
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,         \
      0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,         \
      0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3,         \
      0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,         \
      0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70,         \
      0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,         \
      0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee,         \
      0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2

// Where the functions below read the round constants, as a template argument `K` with a static
// at(t): HostRoundConstants on the CPU (the host tests, the fake runtime), and on the GPU a
// __constant__ table, which sha256_kernel.cu defines once: device code may not read a host array,
// and a __constant__ variable defined in a header would be one more copy in every translation
// unit that includes it (and a duplicate symbol with relocatable device code).
struct HostRoundConstants {
  static constexpr std::uint32_t kTable[64] = {BATCHD_SHA256_ROUND_CONSTANTS};
  // Host only: not constexpr, so nvcc never asks whether device code could call it.
  static std::uint32_t at(int t) { return kTable[t]; }
};

BATCHD_HD std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// The chaining value: eight words, kept in registers on the device.
struct State {
  std::uint32_t h[8];
};

BATCHD_HD State initial_state() {
  return {{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
           0x5be0cd19}};
}

// One 64-byte block as 16 big-endian words. The schedule is a rolling window of 16 words, so a
// fully unrolled loop keeps it in registers instead of a 64-word array in local memory.
template <class K>
BATCHD_HD void compress(State& state, const std::uint32_t (&block)[16]) {
  std::uint32_t w[16];
  BATCHD_UNROLL
  for (int i = 0; i < 16; ++i) w[i] = block[i];
  std::uint32_t a = state.h[0], b = state.h[1], c = state.h[2], d = state.h[3];
  std::uint32_t e = state.h[4], f = state.h[5], g = state.h[6], h = state.h[7];
  BATCHD_UNROLL
  for (int t = 0; t < 64; ++t) {
    if (t >= 16) {
      const std::uint32_t w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
      const std::uint32_t s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
      const std::uint32_t s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
      w[t & 15] += s0 + w[(t - 7) & 15] + s1;
    }
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                             K::at(t) + w[t & 15];
    const std::uint32_t t2 =
        (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state.h[0] += a, state.h[1] += b, state.h[2] += c, state.h[3] += d;
  state.h[4] += e, state.h[5] += f, state.h[6] += g, state.h[7] += h;
}

// __byte_perm(x, y, selector) on the GPU (one PRMT instruction): byte i of the result is byte
// ((selector >> 4i) & 7) of the eight bytes y:x, x's lowest first. The host computes the same.
BATCHD_HD std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, selector);
#else
  const std::uint64_t pool = (std::uint64_t{y} << 32) | x;
  std::uint32_t result = 0;
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t from = (selector >> (4 * i)) & 7;
    result |= static_cast<std::uint32_t>((pool >> (8 * from)) & 0xFF) << (8 * i);
  }
  return result;
#endif
}

// The selector that takes the big-endian word starting `shift` (0-3) bytes into the aligned
// word x, continuing into y: SHA-256 reads its message as big-endian words, and the GPU and x86
// load little-endian ones.
BATCHD_HD std::uint32_t big_endian_selector(std::uint32_t shift) {
  return (shift << 12) | ((shift + 1) << 8) | ((shift + 2) << 4) | (shift + 3);
}

#if !defined(__CUDA_ARCH__)
// Host only: words load_word was asked for that hold no byte of the input. The GPU reads them
// whole, and only a word with an input byte is sure to lie inside the batch buffer, so the host
// tests require this to stay 0.
inline thread_local std::uint64_t stray_word_loads = 0;
#endif

// The aligned 32-bit word at address `word`, as a little-endian load reads it. The GPU reads it
// whole: every byte of an aligned word that holds an input byte lies inside the batch buffer
// (cudaMalloc'd, its size a multiple of 256), so at most the neighbours' bytes come along, and
// hash_bytes masks them out. The host reads only the bytes inside [begin, end), the input, and
// puts 0xA5 in the others, so a host test fails if anything outside an input reaches a digest
// (and reads nothing outside the caller's buffer).
BATCHD_HD std::uint32_t load_word(std::uintptr_t word, std::uintptr_t begin, std::uintptr_t end) {
#if defined(__CUDA_ARCH__)
  (void)begin, (void)end;
  // Through the read-only data cache: the batch buffer does not change while the kernel runs.
  return __ldg(reinterpret_cast<const unsigned int*>(word));
#else
  if (std::max(word, begin) >= std::min(word + 4, end)) ++stray_word_loads;
  std::uint32_t value = 0;
  for (std::uintptr_t at = word + 4; at-- > word;) {
    const bool inside = at >= begin && at < end;
    value = (value << 8) | (inside ? *reinterpret_cast<const unsigned char*>(at) : 0xA5U);
  }
  return value;
#endif
}

// Where an input lies and how its bytes sit against aligned words: every message word is one
// byte_perm of two aligned loads (an input may start at any byte of the batch buffer).
struct InputWords {
  std::uintptr_t begin, end;  // the input's bytes
  std::uintptr_t base;        // the aligned word its first byte is in
  std::uint32_t shift;        // begin - base
  std::uint32_t selector;     // big_endian_selector(shift)

  BATCHD_HD static InputWords of(const unsigned char* data, std::uint32_t length) {
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    const auto shift = static_cast<std::uint32_t>(begin & 3);
    return {begin, begin + length, begin - shift, shift, big_endian_selector(shift)};
  }

  // The 16 message words of the 64 input bytes from `offset` (a multiple of 64, all inside the
  // input): 16 aligned loads, and a 17th when the input is unaligned.
  BATCHD_HD void full_block(std::uint32_t offset, std::uint32_t (&block)[16]) const {
    std::uint32_t words[17];
    BATCHD_UNROLL
    for (int k = 0; k < 17; ++k) {
      // Word 16 holds none of the block's bytes when the input is aligned: it may lie past the
      // buffer, so it is not read.
      words[k] = (k < 16 || shift != 0) ? load_word(base + offset + 4 * k, begin, end) : 0;
    }
    BATCHD_UNROLL
    for (int j = 0; j < 16; ++j) block[j] = byte_perm(words[j], words[j + 1], selector);
  }

  // The last message block's words: the `tail_bytes` (< 64) input bytes from `offset`, then the
  // 0x80 marker, then zeros. Only the aligned words that hold a tail byte are read; bytes past
  // the input that came along with them are masked out. No register array is indexed by a
  // runtime value, so the block stays in registers.
  BATCHD_HD void tail_block(std::uint32_t offset, std::uint32_t tail_bytes,
                            std::uint32_t (&block)[16]) const {
    std::uint32_t words[17];
    BATCHD_UNROLL
    for (std::uint32_t k = 0; k < 17; ++k) {
      // Word k holds tail bytes 4k - shift .. 4k - shift + 3 (word 0: none when the tail is empty).
      const bool holds_tail = tail_bytes > 0 && 4 * k < shift + tail_bytes;
      words[k] = holds_tail ? load_word(base + offset + 4 * k, begin, end) : 0;
    }
    BATCHD_UNROLL
    for (int j = 0; j < 16; ++j) {
      const std::uint32_t word = byte_perm(words[j], words[j + 1], selector);
      const int left = static_cast<int>(tail_bytes) - 4 * j;  // input bytes from this word on
      if (left >= 4) {
        block[j] = word;
      } else if (left <= 0) {
        block[j] = left == 0 ? 0x80000000U : 0U;
      } else {  // 1-3 input bytes, then the marker
        block[j] = (word & (~0U << (32 - 8 * left))) | (0x80U << (24 - 8 * left));
      }
    }
  }
};

// SHA-256 of `length` bytes at `data` (any alignment; see load_word for what may be read).
template <class K>
BATCHD_HD State hash_bytes(const unsigned char* data, std::uint32_t length) {
  const InputWords input = InputWords::of(data, length);
  State state = initial_state();
  std::uint32_t block[16];
  const std::uint32_t full_blocks = length / 64;
  for (std::uint32_t blk = 0; blk < full_blocks; ++blk) {
    input.full_block(64 * blk, block);
    compress<K>(state, block);
  }
  const std::uint32_t tail_bytes = length % 64;
  input.tail_block(64 * full_blocks, tail_bytes, block);
  if (tail_bytes >= 56) {  // no room for the 64-bit length: it goes in a block of its own
    compress<K>(state, block);
    BATCHD_UNROLL
    for (int j = 0; j < 16; ++j) block[j] = 0;
  }
  const std::uint64_t length_bits = std::uint64_t{length} * 8;
  block[14] = static_cast<std::uint32_t>(length_bits >> 32);
  block[15] = static_cast<std::uint32_t>(length_bits);
  compress<K>(state, block);
  return state;
}

BATCHD_HD std::uint32_t hex_char(std::uint32_t nibble) {
  return nibble < 10 ? '0' + nibble : 'a' - 10 + nibble;
}

// Four hex characters of a 16-bit value, packed big-endian as SHA-256 reads message words.
BATCHD_HD std::uint32_t hex_word(std::uint32_t value16) {
  return (hex_char((value16 >> 12) & 0xF) << 24) | (hex_char((value16 >> 8) & 0xF) << 16) |
         (hex_char((value16 >> 4) & 0xF) << 8) | hex_char(value16 & 0xF);
}

// The digest's four hex characters for message word j (half a digest word), as hash_hex_of
// hashes them and write_hex stores them.
BATCHD_HD std::uint32_t hex_word_of(const State& digest, int j) {
  return hex_word((j % 2 == 0) ? (digest.h[j / 2] >> 16) : (digest.h[j / 2] & 0xFFFF));
}

// SHA-256 of the 64-character hex text of `digest`, without materialising the text: each message
// word is four hex characters, i.e. one half of a digest word.
template <class K>
BATCHD_HD State hash_hex_of(const State& digest) {
  State state = initial_state();
  std::uint32_t block[16];
  BATCHD_UNROLL
  for (int j = 0; j < 16; ++j) block[j] = hex_word_of(digest, j);
  compress<K>(state, block);
  BATCHD_UNROLL
  for (int j = 0; j < 16; ++j) block[j] = 0;
  block[0] = 0x80000000U;           // the marker right after the 64 text bytes
  block[15] = kDigestHexChars * 8;  // the message length in bits
  compress<K>(state, block);
  return state;
}

// Writes exactly kDigestHexChars lowercase hex characters to `out`, which is 16-byte aligned
// (answers lie 64 bytes apart in a cudaMalloc'd buffer): the GPU stores them as four 16-byte
// vectors instead of 64 single bytes.
BATCHD_HD void write_hex(const State& digest, char* out) {
  // In memory order, hex_word's first character in the lowest byte: each word byte-swapped.
  std::uint32_t text[16];
  BATCHD_UNROLL
  for (int j = 0; j < 16; ++j) {
    text[j] = byte_perm(hex_word_of(digest, j), 0, big_endian_selector(0));
  }
#if defined(__CUDA_ARCH__)
  uint4* vectors = reinterpret_cast<uint4*>(out);
  BATCHD_UNROLL
  for (int q = 0; q < 4; ++q) {
    vectors[q] = make_uint4(text[4 * q], text[4 * q + 1], text[4 * q + 2], text[4 * q + 3]);
  }
#else
  static_assert(std::endian::native == std::endian::little, "the host path stores as the GPU");
  std::memcpy(out, text, sizeof text);
#endif
}

// The whole batchstring of one input: `cost` (>= 1) rounds, round i hashing the hex of round i-1.
template <class K>
BATCHD_HD void batchstring_one(const unsigned char* data, std::uint32_t length, unsigned cost,
                               char* out) {
  State digest = hash_bytes<K>(data, length);
  for (unsigned round = 1; round < cost; ++round) digest = hash_hex_of<K>(digest);
  write_hex(digest, out);
}

}  // namespace batchd::kernels::sha256
