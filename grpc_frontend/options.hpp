// batchd-grpc's settings, one field per flag (main.cpp defines the flags and their help).
#pragma once

#include <cstdint>
#include <string>

#include "oip/errors.hpp"
#include "tracing/trace_options.hpp"

namespace batchd::grpcfront {

struct GrpcOptions {
  std::string listen = "127.0.0.1:8001";   // ADDR:PORT; port 0 picks a free one (see port_file)
  std::string socket_path;                 // the daemon's control socket; empty: its default
  bool model_control = false;              // serve RepositoryModelLoad and RepositoryModelUnload
  unsigned clients = 1;                    // daemon clients, each with its own polling thread
  std::string port_file;                   // if set, the bound port is written here once listening
  std::string tls_cert;                    // PEM files: both set, the port serves TLS only
  std::string tls_key;
  std::int64_t default_timeout_ms = 5000;  // an inference with neither a deadline nor a timeout
  std::int64_t max_timeout_ms = 60000;     // deadlines and timeouts are capped to this
  // Strings in one inference (the model's max_batch_size): a quarter of a daemon client's slots by
  // default, so one request never takes them all (a request is admitted whole or not at all).
  std::uint32_t max_infer_strings = 256;
  std::uint32_t max_message_bytes = 16U << 20;  // largest request message
  std::uint32_t max_stream_in_flight = 256;     // a stream's requests unanswered or unsent, before it is not read
  std::uint64_t max_stream_queued_bytes = 16U << 20;  // a stream's answers not yet written, before it is not read
  std::int64_t write_timeout_ms = 30000;        // a stream whose answer is not taken in this long is cancelled
  std::uint32_t max_calls = 4096;               // inference calls and streams open at once
  oip::OverloadStatus overload_status = oip::OverloadStatus::k503;  // a call shed: UNAVAILABLE (or RESOURCE_EXHAUSTED)
  std::uint32_t max_streams_per_connection = 1024;  // HTTP/2 streams one connection may open
  std::uint64_t max_memory_bytes = 1ULL << 30;  // gRPC's resource quota: its buffers for all connections
  std::uint64_t ready_max_queue = 65536;   // ServerReady fails while the daemon's queue is this deep
  std::int64_t drain_timeout_ms = 0;       // SIGTERM: longest wait for RPCs; 0: max_timeout_ms + 1 s
  std::string metrics_listen;              // ADDR:PORT for GET /metrics; empty: none
  tracing::TraceOptions tracing;           // --trace-*: server spans (docs/TRACING.md)
};

}  // namespace batchd::grpcfront
