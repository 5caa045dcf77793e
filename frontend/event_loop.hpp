// One io_uring event loop: it accepts on its own SO_REUSEPORT listener, receives (multishot with
// provided buffers, or plain per-connection receives), writes answers, keeps a read posted on the
// daemon client's eventfd and a timer for timeouts, and never blocks on anything but the ring.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "client_lib/fan_out.hpp"
#include "client_lib/model_control_queue.hpp"
#include "frontend/buffer_ring.hpp"
#include "frontend/connection.hpp"
#include "frontend/daemon_link.hpp"
#include "frontend/http_api.hpp"
#include "frontend/io_uring_probe.hpp"
#include "frontend/jobs_api.hpp"
#include "frontend/jobs_service.hpp"
#include "frontend/metrics.hpp"
#include "frontend/options.hpp"
#include "frontend/priority_grants.hpp"
#include "frontend/v2_api.hpp"
#include "tracing/door_tracer.hpp"

namespace batchd::http {

// What a loop is given; everything here outlives the loop.
struct LoopContext {
  unsigned index = 0;               // which worker, for metrics and logs
  int listen_fd = -1;               // owned by the loop from construction on
  int wake_fd = -1;                 // eventfd: stop requests and daemon hand-overs (not owned)
  const std::atomic<bool>* stop_requested = nullptr;
  // Set on SIGTERM, --drain-delay-ms before stop_requested: /readyz fails while requests are still
  // served, so a load balancer moves traffic away before the listener closes.
  const std::atomic<bool>* leaving = nullptr;
  const FrontendOptions* options = nullptr;
  const UringFeatures* features = nullptr;
  MetricsRegistry* metrics = nullptr;
  JobsService* jobs = nullptr;      // the asynchronous jobs' store and mailboxes, shared by the loops
  const grants::GrantPolicy* grants = nullptr;  // who may use which priority class
  ModelControlQueue* model_control = nullptr;   // --model-control: loads and unloads; else none
  tracing::DoorTracer* tracer = nullptr;         // tracing on: the server spans' tracer; else none
};

class EventLoop final : private ApiContext {
 public:
  // Sets up the ring and buffers; throws std::system_error. Construct on the thread that runs it
  // (the ring may be single-issuer).
  explicit EventLoop(const LoopContext& context);
  ~EventLoop() override;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Serves until a stop is requested (through wake_fd) and every connection has finished.
  void run();

 private:
  enum class Op : std::uint8_t { kAccept = 1, kRecv, kSend, kCancel, kTimer, kDaemonEvent, kWake };
  struct Conn;
  class Dispatcher;
  struct Answer;
  struct Caller;

  // ring plumbing (event_loop.cpp)
  io_uring_sqe* sqe();
  void handle(std::uint64_t user_data, int res, std::uint32_t flags);
  void arm_accept();
  void arm_timer();
  void post_wake_read();
  void on_timer();
  void on_wake();
  void sweep();
  void begin_stopping();
  [[nodiscard]] bool finished() const noexcept;

  // connections (loop_connections.cpp)
  void on_accept(int res, std::uint32_t flags);
  void adopt_connection(int fd);
  void on_recv(Conn& conn, int res, std::uint32_t flags);
  void on_send(Conn& conn, int res);
  void service(Conn& conn);
  void service_dirty();
  void update_receive(Conn& conn);
  void start_send(Conn& conn);
  void begin_close(Conn& conn);
  void abort(Conn& conn);
  void release(Conn& conn);
  // The caller is gone: its requests the daemon has not taken yet are withdrawn.
  void withdraw_owed(Conn& conn);
  void check_timeouts(Conn& conn);
  [[nodiscard]] bool from_trusted_proxy(int fd) const;
  void mark_dirty(Conn& conn);
  Conn* lookup(std::uint32_t index, std::uint32_t generation) noexcept;

  // requests and the daemon (loop_requests.cpp)
  void on_request(Conn& conn, std::uint64_t seq, Request&& request);
  // The claimed class capped at the caller's grant, a downgrade counted.
  Priority admit(Priority claimed, Priority granted) noexcept;
  void answer(Conn& conn, std::uint64_t seq, const Response& response, std::int64_t started_ns);
  void on_answer(const Answer& answer, Result&& result);
  void post_daemon_event();
  void on_daemon_event(int res);
  void poll_daemon();
  // Open Inference Protocol inferences (loop_v2.cpp)
  void on_v2_request(Conn& conn, std::uint64_t seq, Request&& request, const grants::Resolved& granted);
  void on_v2_answer(const Caller& caller, const V2Reply& reply, std::int64_t strings, const tracing::ServerSpan& span,
                    FanOut::Outcome&& outcome);
  // Tracing (loop_tracing.cpp): a request's server span, from its traceparent header (none while
  // tracing is off, or when it is not traced), and its end with its answer's status.
  [[nodiscard]] tracing::ServerSpan begin_trace(const Request& request, std::string_view model) noexcept;
  void end_trace(const tracing::ServerSpan& span, std::string_view route, std::string_view model,
                 unsigned status) noexcept;
  // POST /v2/repository/models/NAME/load|unload: on the model-control queue, answered through
  // this loop's inbox.
  void control_model(const Caller& caller, V2ModelControl&& control);
  // asynchronous jobs (loop_jobs.cpp)
  void on_jobs_request(Conn& conn, std::uint64_t seq, Request&& request, Priority granted);
  // Stores the job's record and queue entry; the jobs consumer runs it.
  void submit_job(const Caller& caller, JobSubmit&& job);
  void poll_job(const Caller& caller, const std::string& id);
  void delete_job(const Caller& caller, const std::string& id);
  void take_jobs_mail();
  void answer_caller(const Caller& caller, const Response& response);
  Response store_failure(const StoreReply& reply, const std::string& id);

  Readiness readiness() override;
  std::string metrics_text() override;
  std::uint32_t max_input_bytes() override;
  InferStatistics infer_statistics(std::uint32_t model) override;
  std::vector<oip::ModelTimes> model_times() override;
  // The models the daemon serves (its status page's table), read again at most once a second;
  // the default model alone until a daemon is attached.
  const oip::ModelCatalog& models() override;

  std::shared_ptr<const oip::ModelCatalog> catalog_;  // models()'s, once a daemon said
  std::int64_t catalog_read_ns_ = 0;
  LoopContext context_;
  const FrontendOptions& options_;
  WorkerMetrics& metrics_;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool multishot_accept_ = false;
  bool multishot_recv_ = false;
  BufferRing buffers_;  // used when multishot_recv_

  std::vector<std::unique_ptr<Conn>> conns_;  // index = the connection's slot; null when free
  std::vector<std::uint32_t> generations_;    // per slot: bumped on reuse, so late answers miss
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::uint32_t> dirty_;          // connections to service after this batch of events
  std::size_t live_connections_ = 0;

  ConnectionLimits limits_;
  std::string date_;              // the Date header, refreshed by sweep()
  std::int64_t now_ns_ = 0;       // monotonic, read once per batch of completions
  std::int64_t last_sweep_ns_ = 0;
  std::int64_t date_second_ = 0;

  bool accept_armed_ = false;
  bool accept_paused_ = false;    // out of descriptors: retried on the next tick, not at once
  bool timer_armed_ = false;
  bool stopping_ = false;
  std::int64_t drain_deadline_ns_ = 0;
  __kernel_timespec timer_ts_{};  // the kernel reads it when the timeout is armed
  std::uint64_t wake_value_ = 0;  // the wake eventfd's read lands here

  DaemonLink link_;
  std::unique_ptr<Api> api_;
  bool daemon_event_posted_ = false;
  bool daemon_event_by_poll_ = false;  // the eventfd read returned EAGAIN: watch it with poll instead
  std::uint64_t daemon_event_value_ = 0;
  std::int64_t answers_owed_ = 0;      // submitted requests whose callback has not run

  std::unique_ptr<V2Api> v2_api_;

  JobsService& jobs_;
  std::unique_ptr<JobsApi> jobs_api_;
};

}  // namespace batchd::http
