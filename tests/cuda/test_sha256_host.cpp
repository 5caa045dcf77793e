// The CUDA kernel's arithmetic (kernels/sha256_kernel.cuh), compiled for the CPU and checked
// against OpenSSL through the reference batchstring. Runs without a GPU, so every machine checks
// what the GPU will compute; also checks how the cuda backend refuses to start without one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "kernels/cuda_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "kernels/sha256_kernel.cuh"
#include "shm/layout.hpp"
#include "tests/cuda/cuda_test_inputs.hpp"
#include "tests/doctest_expected.hpp"

namespace {

namespace sha256 = batchd::kernels::sha256;

// Also fails the test if the hashing asked for a word that holds none of the input's bytes: on
// the GPU such a word may lie past the batch buffer.
std::string kernel_batchstring(std::string_view input, unsigned cost) {
  std::string out(sha256::kDigestHexChars, '\0');
  sha256::stray_word_loads = 0;
  sha256::batchstring_one<sha256::HostRoundConstants>(
      reinterpret_cast<const unsigned char*>(input.data()),
      static_cast<std::uint32_t>(input.size()), cost, out.data());
  REQUIRE_MESSAGE(sha256::stray_word_loads == 0, "length " << input.size());
  return out;
}

}  // namespace

TEST_CASE("known SHA-256 vectors (FIPS 180-4 examples)") {
  CHECK(kernel_batchstring("", 1) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(kernel_batchstring("abc", 1) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(kernel_batchstring("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("iterated rounds hash the previous round's hex text") {
  const std::string once = kernel_batchstring("hello", 1);
  CHECK(kernel_batchstring("hello", 2) == kernel_batchstring(once, 1));
  CHECK(kernel_batchstring("hello", 3) == batchd::reference_batchstring("hello", 3));
}

TEST_CASE("every length 0..300 and each block boundary to 4096 matches the reference") {
  std::mt19937_64 rng(1);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (std::size_t block = 5; block <= 64; ++block) {
    for (const int delta : {-9, -8, -7, -1, 0, 1}) {
      lengths.push_back(static_cast<std::size_t>(static_cast<int>(block * 64) + delta));
    }
  }
  for (const unsigned cost : {1U, 3U}) {
    for (const std::size_t n : lengths) {
      const std::string input = batchd::cuda_test::random_input(rng, n);
      REQUIRE_MESSAGE(
          kernel_batchstring(input, cost) == batchd::reference_batchstring(input, cost),
          "length " << n << " cost " << cost);
    }
  }
}

TEST_CASE("random UTF-8 inputs up to 4096 bytes, costs 1, 2, 3 and 17") {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 400; ++i) {
    const std::string input = batchd::cuda_test::random_input(rng, rng() % 4097);
    for (const unsigned cost : {1U, 2U, 3U, 17U}) {
      REQUIRE(kernel_batchstring(input, cost) ==
              batchd::reference_batchstring(input, cost));
    }
  }
}

// The kernel reads each input where the batch put it, at any byte offset of the batch buffer:
// every length across the first 17 blocks (each padding case: tail short of, at and past the
// 56-byte mark) at word-aligned and unaligned starts.
TEST_CASE("every length 0..1100 at offsets 0, 1, 2, 3, 5 and 7") {
  std::mt19937_64 rng(3);
  constexpr std::size_t kLongest = 1100;
  const std::string buffer = batchd::cuda_test::random_input(rng, kLongest + 8);
  for (const std::size_t offset : {0U, 1U, 2U, 3U, 5U, 7U}) {
    for (std::size_t n = 0; n <= kLongest; ++n) {
      const std::string_view input(buffer.data() + offset, n);
      REQUIRE_MESSAGE(kernel_batchstring(input, 1) == batchd::reference_batchstring(input, 1),
                      "length " << n << " offset " << offset);
    }
  }
}

// Up to the largest input a daemon can be configured to take (shm::kMaxPayloadBytes): block
// counts past 16 bits, and bit lengths that fill the length field's fourth byte.
TEST_CASE("random lengths up to the largest input, and the largest itself") {
  std::mt19937_64 rng(4);
  constexpr std::size_t kLargest = batchd::shm::kMaxPayloadBytes;
  const std::string buffer = batchd::cuda_test::random_input(rng, kLargest + 3);
  std::vector<std::size_t> lengths{kLargest, kLargest - 1, kLargest - 55, kLargest - 56};
  for (int i = 0; i < 6; ++i) lengths.push_back(rng() % (kLargest + 1));
  for (const std::size_t n : lengths) {
    const std::size_t offset = rng() % 4;
    const std::string_view input(buffer.data() + offset, n);
    REQUIRE_MESSAGE(kernel_batchstring(input, 2) == batchd::reference_batchstring(input, 2),
                    "length " << n << " offset " << offset);
  }
}

TEST_CASE("the cuda backend refuses bad options before touching a device") {
  batchd::CudaBackendOptions options;
  options.cost = 0;
  auto backend = batchd::make_cuda_backend(options);
  REQUIRE_FALSE(backend);
  CHECK(backend.error().code == std::errc::invalid_argument);
  CHECK(backend.error().message.find("cost") != std::string::npos);
  options = {};
  options.max_batch_bytes = std::uint64_t{1} << 32;
  backend = batchd::make_cuda_backend(options);
  REQUIRE_FALSE(backend);
  CHECK(backend.error().message.find("32-bit") != std::string::npos);
}

TEST_CASE("without a GPU the cuda backend says why instead of failing later") {
  const auto count = batchd::cuda_device_count();
  if (count) return;  // tests/cuda/test_cuda_backend.cpp covers GPUs
  const std::string why = count.error().message;
  MESSAGE("no GPU here: " << why);
  CHECK(why.find("cudaGetDeviceCount") != std::string::npos);
  const auto backend = batchd::make_cuda_backend({});
  REQUIRE_FALSE(backend);
  CHECK(backend.error().message == why);
}
