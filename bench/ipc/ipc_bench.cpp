// ipc-bench: closed-loop round trips over one transport, timed the same way for each, so that
// batchd's shared-memory path can be set beside a Unix-domain socket and iceoryx in one run.
// Every answer is checked against the local SHA-256. Prints one JSON object.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/ipc/channel.hpp"
#include "backend/reference_batchstring.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct ThreadResult {
  std::vector<std::int64_t> latencies_ns;
  std::uint64_t wrong = 0;
  std::uint64_t errors = 0;
  std::string last_error;
};

std::vector<std::string> make_inputs(std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::vector<std::string> inputs(256);
  for (auto& input : inputs) {
    input.resize(bytes);
    for (char& c : input) c = static_cast<char>(letter(rng));
  }
  return inputs;
}

void run_thread(batchd::bench::Channel& channel, const std::vector<std::string>& inputs, std::size_t first,
                Clock::time_point measure_from, const std::atomic<bool>& stop, ThreadResult& out) {
  std::string output;
  std::string error;
  char expected[batchd::kDigestHexBytes];
  for (std::size_t i = first; !stop.load(std::memory_order_relaxed); ++i) {
    const std::string& input = inputs[i % inputs.size()];
    const Clock::time_point t0 = Clock::now();
    const bool ok = channel.call(input, output, error);
    const Clock::time_point t1 = Clock::now();
    if (t0 < measure_from) continue;  // warm-up
    if (!ok) {
      ++out.errors;
      out.last_error = error;
      continue;
    }
    batchd::reference_batchstring(input, 1, expected);
    if (output != std::string_view(expected, sizeof(expected))) ++out.wrong;
    out.latencies_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
}

double percentile_us(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return static_cast<double>(sorted[std::min(index, sorted.size() - 1)]) / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"closed-loop IPC round trips: batchd, a Unix-domain socket, iceoryx"};
  std::string transport;
  std::string endpoint;
  unsigned threads = 1;
  double duration_s = 5.0;
  double warmup_s = 0.5;
  std::size_t input_bytes = 64;
  app.add_option("--transport", transport, "batchd, uds, iceoryx or iceoryx-poll")
      ->required()->check(CLI::IsMember({"batchd", "uds", "iceoryx", "iceoryx-poll"}));
  app.add_option("--endpoint", endpoint, "batchd: the daemon's socket; uds: the server's socket");
  app.add_option("--threads", threads, "client threads, each in a closed loop")->check(CLI::Range(1U, 256U));
  app.add_option("--duration", duration_s, "seconds measured")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup", warmup_s, "seconds run first and not measured")->check(CLI::Range(0.0, 60.0));
  app.add_option("--input-bytes", input_bytes, "bytes per request")->check(CLI::Range(1, 1000));
  batchd::ClientOptions client_options;
  std::int64_t spin_us = client_options.spin.count();
  app.add_option("--client-spin-us", spin_us, "batchd: how long a waiting caller spins before sleeping")
      ->capture_default_str()->check(CLI::Range(0, 10'000));
  app.add_option("--client-max-spinning", client_options.max_spinning_callers,
                 "batchd: callers spinning at once at most (0: the library's default)");
  CLI11_PARSE(app, argc, argv);
  client_options.spin = std::chrono::microseconds(spin_us);

  batchd::bench::ChannelFactory factory;
  std::vector<std::unique_ptr<batchd::bench::Channel>> channels;
  try {
    if (transport == "batchd") factory = batchd::bench::batchd_channels(endpoint, client_options);
    if (transport == "uds") factory = batchd::bench::uds_channels(endpoint);
    if (transport.starts_with("iceoryx")) factory = batchd::bench::iceoryx_channels(transport == "iceoryx-poll");
    for (unsigned t = 0; t < threads; ++t) channels.push_back(factory());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipc-bench: %s\n", e.what());
    return 1;
  }

  const std::vector<std::string> inputs = make_inputs(input_bytes, 42);
  std::vector<ThreadResult> results(threads);
  std::atomic<bool> stop{false};
  const Clock::time_point start = Clock::now();
  const auto measure_from = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back(run_thread, std::ref(*channels[t]), std::cref(inputs), t * 31, measure_from,
                         std::cref(stop), std::ref(results[t]));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s + duration_s));
  stop.store(true);
  for (auto& w : workers) w.join();
  const double measured_s = std::chrono::duration<double>(Clock::now() - measure_from).count();

  std::vector<std::int64_t> all;
  std::uint64_t wrong = 0;
  std::uint64_t errors = 0;
  std::string last_error;
  for (auto& r : results) {
    all.insert(all.end(), r.latencies_ns.begin(), r.latencies_ns.end());
    wrong += r.wrong;
    errors += r.errors;
    if (!r.last_error.empty()) last_error = r.last_error;
  }
  std::sort(all.begin(), all.end());
  if (!last_error.empty()) std::fprintf(stderr, "ipc-bench: last error: %s\n", last_error.c_str());
  std::printf(
      "{\"transport\":\"%s\",\"threads\":%u,\"input_bytes\":%zu,\"requests\":%zu,\"wrong\":%llu,"
      "\"errors\":%llu,\"rps\":%.1f,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,"
      "\"max_us\":%.2f}\n",
      transport.c_str(), threads, input_bytes, all.size(), static_cast<unsigned long long>(wrong),
      static_cast<unsigned long long>(errors), static_cast<double>(all.size()) / measured_s,
      percentile_us(all, 0.50), percentile_us(all, 0.90), percentile_us(all, 0.99), percentile_us(all, 0.999),
      all.empty() ? 0.0 : static_cast<double>(all.back()) / 1000.0);
  return wrong == 0 && errors == 0 ? 0 : 2;
}
