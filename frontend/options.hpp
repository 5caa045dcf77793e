// batchd-http's settings, one field per flag (main.cpp defines the flags and their help).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oip/errors.hpp"
#include "tracing/trace_options.hpp"

namespace batchd::http {

enum class IoMode : std::uint8_t {
  kAuto,   // multishot accept and receive with provided buffers where the kernel has them
  kBasic,  // single-shot accept, plain receive into per-connection buffers, and a poll (not a
           // read) on the daemon client's eventfd: what the oldest supported kernels can do
};

struct FrontendOptions {
  std::string listen = "127.0.0.1:8080";  // ADDR:PORT; port 0 picks a free one (see port_file)
  std::string socket_path;                // the daemon's control socket; empty: its default
  bool model_control = false;             // serve /v2/repository/models/NAME/load and unload
  unsigned workers = 1;                   // event loops sharing the port (SO_REUSEPORT)
  std::string port_file;                  // if set, the bound port is written here once listening
  IoMode io_mode = IoMode::kAuto;
  std::uint32_t max_header_bytes = 8192;
  std::uint64_t max_body_bytes = 1 << 20;
  std::uint32_t max_connections = 10000;  // per process, over all loops
  std::uint32_t max_pipelined = 128;      // requests owed on one connection before it is not read
  std::int64_t idle_timeout_ms = 30000;   // a quiet keep-alive connection, or a stalled reader
  std::int64_t header_timeout_ms = 5000;  // from a request's first byte to its header's end
  std::int64_t body_timeout_ms = 30000;   // from a request's first byte to its body's end
  std::int64_t default_timeout_ms = 5000; // a request without X-Timeout-Ms
  std::int64_t max_timeout_ms = 60000;    // X-Timeout-Ms is capped to this
  std::uint64_t ready_max_queue = 65536;  // /readyz fails when the daemon's queue is this deep
  oip::OverloadStatus overload_status = oip::OverloadStatus::k503;  // a request shed for want of room
  std::int64_t drain_timeout_ms = 0;      // SIGTERM: longest wait for answers; 0: max_timeout_ms + 1 s
  std::int64_t drain_delay_ms = 0;        // SIGTERM: /readyz fails this long before the listener closes
  std::int64_t jobs_ttl_s = 600;          // a finished job's result is kept this long
  std::uint64_t jobs_max = 100000;        // job records the embedded store holds
  std::uint64_t jobs_max_bytes = std::uint64_t{256} << 20;  // the embedded store's bytes
  std::uint32_t jobs_max_inputs = 256;    // inputs in one job
  // Strings in one /v2 inference (the model's max_batch_size): a quarter of a daemon client's slots
  // by default, so one request never takes them all (a request is admitted whole or not at all).
  std::uint32_t max_infer_strings = 256;
  std::string jobs_redis;                 // redis://HOST[:PORT][/DB]; empty: the embedded store
  // The jobs queue (docs/JOBS.md).
  std::uint64_t jobs_queue_max = 1'000'000;  // unanswered entries per model and class
  std::int64_t jobs_deadline_s = 3600;       // a job's deadline to start, when it names none
  std::int64_t jobs_max_deadline_s = 86400;  // the longest deadline a job may name
  std::int64_t jobs_claim_idle_ms = 5000;    // an entry idle this long on its consumer is claimed
  std::uint32_t jobs_max_deliveries = 3;     // more, and the entry is dead-lettered
  std::uint32_t jobs_inputs_in_flight = 1024;  // this node's consumer's ceiling
  std::vector<std::string> jobs_results_streams;  // models publishing their answers ("*": all)
  std::uint64_t jobs_results_max = 100000;        // entries a results stream keeps, about
  tracing::TraceOptions tracing;                  // --trace-*: server spans (docs/TRACING.md)
};

}  // namespace batchd::http
