// libbatchd-client: hands single string requests to a local batchd daemon through shared memory
// and returns each caller its own answer or a typed error.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace batchd {

enum class ErrorCode {
  kTimeout,             // the caller's deadline passed before an answer came
  kOverloaded,          // no room for the request: too many in flight; retry later
  kTooLarge,            // the input exceeds the daemon's max input bytes
  kInvalidUtf8,         // the input is not valid UTF-8
  kDaemonUnavailable,   // no daemon answered, or it went away
  kBackendError,        // the backend failed on this request
  kBackendUnavailable,  // no healthy device could run it
  kCancelled,           // withdrawn before it ran
  kProtocolError,       // the daemon's answer made no sense (a bug; please report)
  kPermissionDenied,    // the daemon does not serve this user (see batchd --allow-uid/--allow-gid)
  kTooManyClients,      // the daemon, or this user, has its maximum of clients attached
  kUnknownModel,        // the daemon serves no model of that name or id
};
// How many ErrorCode values there are: the last one's, plus one.
inline constexpr std::size_t kErrorCodes = static_cast<std::size_t>(ErrorCode::kUnknownModel) + 1;

// A short stable name ("timeout", "overloaded", ...), for logs and metrics labels.
const char* error_code_name(ErrorCode code) noexcept;

// A request's priority class. Under load the daemon batches high before normal before low, and
// sheds low first. A request that names none is normal.
enum class Priority { kHigh, kNormal, kLow };
inline constexpr std::size_t kPriorityClasses = 3;

// "high", "normal" or "low": the names flags, HTTP headers and metrics labels use.
std::string_view priority_name(Priority priority) noexcept;
// The class with exactly this name (lower case), or nothing.
std::optional<Priority> parse_priority(std::string_view name) noexcept;

struct Error {
  ErrorCode code;
  std::string message;  // for a person: what happened and, where it helps, what to do
};

// How one request is to be run: which model (by name; empty: the daemon's default model,
// shm::kDefaultModelName) and in which class. The client finds the model's id in the daemon's
// table once per name and attachment; a name the daemon does not serve is refused at once with
// kUnknownModel.
struct RequestOptions {
  Priority priority = Priority::kNormal;
  std::string_view model;
};

// The answer to one request, or why there is none.
class Result {
 public:
  static Result success(std::string output) { return Result(std::move(output)); }
  static Result failure(ErrorCode code, std::string message) {
    return Result(Error{code, std::move(message)});
  }

  [[nodiscard]] bool ok() const noexcept { return !error_.has_value(); }
  // Precondition: ok().
  [[nodiscard]] const std::string& output() const noexcept { return output_; }
  [[nodiscard]] std::string& output() noexcept { return output_; }
  // Precondition: !ok().
  [[nodiscard]] const Error& error() const noexcept { return *error_; }

 private:
  explicit Result(std::string output) : output_(std::move(output)) {}
  explicit Result(Error error) : error_(std::move(error)) {}
  std::string output_;
  std::optional<Error> error_;
};

// A snapshot of what the daemon publishes about itself (about every 50 ms).
struct DaemonStatus {
  // A duration histogram: counts per bucket, not cumulative (bucket b: durations in
  // (latency_bounds_ns[b-1], latency_bounds_ns[b]]; the last one, past every bound, is +Inf),
  // and the durations' sum.
  struct Histogram {
    std::vector<std::uint64_t> buckets;
    std::uint64_t sum_ns = 0;
    [[nodiscard]] std::uint64_t count() const noexcept;
  };
  struct Device {
    std::string state;  // "healthy", "unhealthy", "probing", "lost", or "absent" (no worker in its place)
    std::uint64_t batches_ok = 0, batches_failed = 0, timeouts = 0, outstanding_requests = 0;
    std::uint64_t batch_ns = 0;  // measured batch time
    // The fitted batch cost: fixed_ns + per_item_ns x requests + per_byte_ns x input bytes, from
    // cost_samples batches.
    double fixed_ns = 0, per_item_ns = 0, per_byte_ns = 0;
    std::uint64_t cost_samples = 0;
    // Far slower than the fastest device now: it gets only what it would finish first, and a
    // probe (a copy of one request, its answer dropped) twice a second; the probes it ran.
    bool laggard = false;
    std::uint64_t probes = 0;
    // Device memory: free and total (total 0: the backend does not report it), and the largest
    // batch in input bytes the device takes now (below max_batch_bytes while its memory is short).
    std::uint64_t memory_free_bytes = 0, memory_total_bytes = 0, byte_budget = 0;
    // Each successful batch run's time on this device (README.md, "Metrics").
    Histogram compute_time;
    // Where the default model runs on workers (--backend workers): the worker process that is
    // this device (worker_pid 0: none), its name and version as it gave them, the batches it runs
    // at once and the batches it answered (attached_workers lists every model's).
    std::uint32_t worker_pid = 0, worker_lanes = 0;
    std::string worker_name, worker_version;
    std::uint64_t worker_batches = 0;
    // Each batch's hand-off to the worker in this place and back (its run less the model's time).
    Histogram worker_handoff;
  };
  std::string backend;
  std::uint32_t daemon_pid = 0;
  std::int64_t age_ns = 0;  // since the daemon last published
  std::uint32_t healthy_devices = 0;
  // Workers attached now, of every model, and how many the daemon needs to be ready: the sum of
  // its workers models' minimums (0: no model runs on workers).
  std::uint32_t workers = 0, min_workers = 0;
  // Each worker process attached, by its place on the status page: the model it serves (its
  // name; its id where the table of models is absent) and its device in that model, its name and
  // version as it gave them, the batches it runs at once and those it answered, and each batch's
  // hand-off to it and back (its run less the model's time, kept across the workers that held
  // the place).
  struct Worker {
    std::uint32_t place = 0;
    std::string model;
    std::uint32_t device = 0;
    std::uint32_t pid = 0, lanes = 0;
    std::string name, version;
    std::uint64_t batches = 0;
    Histogram handoff;
  };
  std::vector<Worker> attached_workers;
  std::uint64_t clients = 0;
  std::uint64_t requests_taken = 0, requests_ok = 0, requests_failed = 0, requests_rejected = 0;
  std::uint64_t in_flight = 0;  // taken by the daemon and not yet answered
  std::uint64_t requests_abandoned = 0;  // their client went before they were batched
  // requests_taken by the class their client asked for; index: static_cast<std::size_t>(Priority).
  std::array<std::uint64_t, kPriorityClasses> requests_taken_by_class{};
  // Refused at admission as overloaded (the backlog ahead of them would outlast their deadline),
  // and the arrival rate (requests/s), by class; same index.
  std::array<std::uint64_t, kPriorityClasses> requests_shed_by_class{};
  std::array<std::uint64_t, kPriorityClasses> arrivals_per_s_by_class{};
  // The batching policy in force: "adaptive" or "fixed". Either flushes at max_batch requests,
  // max_batch_bytes input bytes, or when the oldest has waited max_wait_ns; fixed waits for them,
  // adaptive flushes as soon as waiting no longer pays (at about target_batch requests now, for
  // arrivals_per_s requests per second). flushes: batches by why they were flushed.
  std::string policy;
  std::uint32_t target_batch = 0;
  std::uint64_t arrivals_per_s = 0;
  std::vector<std::pair<std::string, std::uint64_t>> flushes;
  std::uint32_t max_batch = 0;
  std::int64_t max_wait_ns = 0;
  std::uint64_t max_batch_bytes = 0;
  std::uint64_t batches = 0, batch_failures = 0;
  std::vector<std::uint64_t> batch_sizes;  // bucket b counts batches of [2^b, 2^(b+1)) requests
  std::vector<Device> devices;
  // Requests whose input failed alone, each recorded once in the daemon's dead-letter log, and
  // records lost on the way (read_dead_letters lists the recent ones).
  std::uint64_t dead_letters = 0, dead_letters_dropped = 0;
  // Requests that claimed high priority without their user's grant (they ran at normal), and
  // connections refused at accept because their user started handshakes too fast.
  std::uint64_t priority_downgrades = 0, connections_shed = 0;
  // The models the daemon serves, each at its id's index (a request names its model by that id);
  // empty from a daemon built before models, which serves shm's default model alone.
  struct Model {
    std::string name, version, backend;
    // "ready"; "unavailable" (it takes requests, which wait for a lane: a workers model with no
    // worker attached); "unloading", "unloaded" or "loading" (model control: batchctl load,
    // unload; requests are refused); or "absent" (the id names no model now).
    std::string state;
    std::uint32_t lanes = 0;  // that can run its batches now
    std::uint64_t requests_taken = 0;
    // Answers by outcome; successful batch runs and the requests they answered, with those
    // requests' summed queue time, compute time (their batch's run) and both; requests waiting
    // for a batch now. Triton's nv_inference_* metrics (README.md, "Metrics") are these.
    std::uint64_t requests_ok = 0, requests_failed = 0, batches = 0, inferences = 0;
    std::uint64_t queue_ns = 0, compute_ns = 0, request_ns = 0, pending = 0;
    // Its batches, as the daemon-wide flushes and batch_sizes count them; empty from a daemon
    // that publishes none per model.
    std::vector<std::pair<std::string, std::uint64_t>> flushes;
    std::vector<std::uint64_t> batch_sizes;
    // Its devices, as `devices` lists the default model's (compute_time is the default model's
    // alone), and how many of them can run a batch now; none while it is unloaded.
    std::vector<Device> devices;
    std::uint32_t healthy_devices = 0;
    // Its devices are shared with other models' (the daemon's sim or cuda models), where its
    // runs take turns: the runs that waited for one, and how long in all.
    bool shares_devices = false;
    std::uint64_t turns_waited = 0, turn_wait_ns = 0;
    // Its batching policy, as the daemon-wide policy fields below have the default model's.
    std::string policy;
    std::uint32_t max_batch = 0, target_batch = 0;
    std::int64_t max_wait_ns = 0;
    std::uint64_t max_batch_bytes = 0, arrivals_per_s = 0;
    // Its requests' queue times, by class, as queue_time_by_class below counts every model's;
    // empty histograms from a daemon that publishes none per model.
    std::array<Histogram, kPriorityClasses> queue_time_by_class{};
  };
  std::vector<Model> models;
  // Whether the daemon publishes each model's devices (Model::devices) and policy (Model::policy
  // and the rest); one built before that lists only the default model's, in `devices` and the
  // policy fields.
  bool devices_by_model = false;
  bool policies_by_model = false;
  bool queue_times_by_model = false;  // Model::queue_time_by_class
  // The histograms' bucket bounds; empty when the daemon publishes no histograms (one built
  // before them), and then the histograms are empty too.
  std::vector<std::int64_t> latency_bounds_ns;
  // Each answered request's queue time: from the daemon taking it to the start of the batch run
  // that answered it, by class; index: static_cast<std::size_t>(Priority).
  std::array<Histogram, kPriorityClasses> queue_time_by_class{};
};

struct ClientOptions {
  std::string socket_path;  // empty: the daemon's default path
  // How long connect() keeps trying to reach a daemon that is not (yet) there.
  std::chrono::milliseconds connect_timeout{2000};
  // Sync callers spin at most this long for an answer before sleeping in the kernel: twice the
  // measured round trip, and not at all while round trips take longer than this.
  std::chrono::microseconds spin{50};
  // They spin only while at most this many callers wait (0: half the cores, at least one), so at
  // most this many spin at once: spinning callers beyond the cores take the CPU from the daemon
  // they wait for (on 2 cores, 8 spinning callers cut throughput by two thirds).
  unsigned max_spinning_callers = 0;
};

// One record of the daemon's dead-letter log: a request whose input made the backend fail alone
// (README.md, "Dead letters"). The input itself is never listed.
struct DeadLetter {
  std::string time;            // RFC 3339, UTC, milliseconds
  std::string model;           // the model it was sent to (empty from a daemon before models)
  std::string reason;          // "poison" (a known-good input still ran there) or "repeated_error"
  std::string input_sha256;    // lowercase hex
  std::uint64_t input_bytes = 0;
  std::string error;           // the backend's message
  std::uint32_t device = 0;    // where it failed last
  std::vector<std::uint32_t> devices_tried;  // every device it failed alone on
  std::uint64_t client_id = 0;  // the daemon's number for the client's attachment
  std::int64_t pid = 0, uid = -1;
  std::string request_id;      // hex; empty when the client gave none
  std::string json;            // the whole record, as the daemon wrote it
};

struct DeadLetters {
  std::uint64_t recorded = 0;  // requests recorded since the daemon started
  std::uint64_t dropped = 0;   // records lost (the log's queue was full, or its file failed)
  std::vector<DeadLetter> entries;  // the most recent, oldest first
};

// Asks the daemon at options.socket_path (empty: the default) for its recent dead letters; the
// daemon's own user and root get every record, other users only those of their own requests.
// Nothing on failure, with *error filled (daemon unavailable, permission denied, or a protocol
// error from a daemon that predates dead letters).
std::optional<DeadLetters> read_dead_letters(const ClientOptions& options, Error* error);

// Model control, as Triton's repository API has it (docs/MODELS.md, "Loading and unloading"):
// an unload stops admitting the model's requests (they fail "backend unavailable" with the
// reason), answers those it holds, then releases its devices and lanes; a load makes its backend
// again. Other models are untouched. Only the daemon's own user and root may. Waits up to
// `timeout` for the change to be done and returns the daemon's account of it; nothing on
// failure, with *error filled (unknown model, permission denied, the model changing the other
// way, a load that failed and why, or the daemon unavailable).
enum class ModelAction { kLoad, kUnload };
std::optional<std::string> control_model(const ClientOptions& options, const std::string& model, ModelAction action,
                                         std::chrono::milliseconds timeout, Error* error);

class ClientImpl;

// A connection to the daemon and the client's shared-memory segment. If the daemon dies, the
// client keeps its pending requests and re-attaches by itself when a daemon serves the socket
// again; the new daemon runs them. Thread-safe: any number of threads may submit through one
// Client. Non-copyable; destroying it while calls are in progress on other threads is a
// precondition violation.
class Client {
 public:
  // Connects and attaches. On failure returns nullptr and fills *error (daemon unavailable with
  // the reason, or a refusal from the daemon).
  static std::unique_ptr<Client> connect(const ClientOptions& options, Error* error);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and waits for its answer until `timeout` passes. Any thread. While no
  // daemon is attached the request waits for one; if its deadline passes before a daemon answers
  // and its daemon is still gone, the error is kDaemonUnavailable (else kTimeout). The request
  // keeps its priority class across a daemon restart.
  Result submit(std::string_view input, std::chrono::milliseconds timeout,
                Priority priority = Priority::kNormal);
  // The same, for the model and class `options` name.
  Result submit(std::string_view input, std::chrono::milliseconds timeout, const RequestOptions& options);

  // Sends several requests as one submission (one ring publication, at most one doorbell: the
  // cheap way for a caller that holds several inputs) and waits for all of them until `timeout`.
  // results[i] answers inputs[i]; an input refused at once (too large, not UTF-8, no free slot)
  // has its error there and the others still go. All of them are in class `priority`. Any thread.
  std::vector<Result> submit_many(std::span<const std::string_view> inputs,
                                  std::chrono::milliseconds timeout,
                                  Priority priority = Priority::kNormal);
  std::vector<Result> submit_many(std::span<const std::string_view> inputs, std::chrono::milliseconds timeout,
                                  const RequestOptions& options);

  using Callback = std::function<void(Result&&)>;

  // Sends one request without waiting. On admission returns nothing and `done` is called exactly
  // once, later, from poll(); otherwise returns the error at once and never calls `done`.
  // Any thread. A daemon restart is handled as for submit().
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    Callback done, std::uint64_t* id = nullptr);
  // The same, in priority class `priority` (the one above is normal).
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    Priority priority, Callback done, std::uint64_t* id = nullptr);
  // The same, for the model and class `options` name.
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    const RequestOptions& options, Callback done, std::uint64_t* id = nullptr);

  // One input of submit_many_async or submit_all_async: the input, its callback, its class and
  // model (as RequestOptions) in; its id or refusal out.
  struct AsyncSubmission {
    std::string_view input;
    Callback done;
    Priority priority = Priority::kNormal;
    std::string_view model;
    std::uint64_t id = 0;           // out: for cancel(), when admitted
    std::optional<Error> refused;   // out: why it was refused at once; `done` is then never called
  };

  // submit_async for several inputs as one submission (one ring publication, at most one
  // doorbell). Each admitted input's `done` is called exactly once, later, from poll(). Returns
  // how many were admitted. Any thread.
  std::size_t submit_many_async(std::span<AsyncSubmission> submissions, std::chrono::milliseconds timeout);

  // submit_many_async, all or none: for a caller that has no use for part of the answers (the
  // strings of one tensor). If an input fails the client's own checks (too large, not UTF-8) or
  // the client has fewer free slots than there are submissions, nothing is sent, every `refused`
  // is set (a failing input's to its own error, the others' to a copy of the first error, so the
  // submission has one reason) and no `done` is ever called. Returns true when all were admitted
  // (also for an empty span). Any thread.
  [[nodiscard]] bool submit_all_async(std::span<AsyncSubmission> submissions, std::chrono::milliseconds timeout);

  // Withdraws an asynchronous request whose caller no longer wants the answer (an HTTP caller
  // that hung up): if the daemon has not taken it yet, it never runs. Its callback still comes,
  // once, from the next poll(), with `cancelled`. `id` is what submit_async gave; unknown ids,
  // and those of finished requests (answered, timed out or failed, even while poll() has yet to
  // call their callback), are ignored. Any thread.
  void cancel(std::uint64_t id);
  // cancel() for many requests at once (the rest of a tensor's strings), each id as cancel(id)
  // would take it, in any order: one look at the client's requests and one wake-up of poll(),
  // however many ids. Any thread.
  void cancel(std::span<const std::uint64_t> ids);

  // Calls the callbacks of finished asynchronous requests (answered, timed out or failed) and
  // returns how many. Call from one thread at a time, whenever event_fd() is readable and at
  // least every few milliseconds while requests are pending (that is what expires timeouts).
  std::size_t poll();

  // Waits until asynchronous requests may have finished (the daemon answered some, or one was
  // cancelled) or max_wait passed, then polls. For a thread that does nothing but poll: no
  // eventfd, no helper thread, one wake-up per batch of answers. Same rules as poll(). A cancel
  // (or a daemon's death) that races the wait may be noticed only when max_wait ends.
  std::size_t poll_wait(std::chrono::microseconds max_wait);

  // An eventfd that becomes readable when asynchronous requests may have finished, and when the
  // daemon goes away or a new one is attached. The first call starts a helper thread that turns
  // the daemon's completion events into its readiness (a client that never asks has none).
  [[nodiscard]] int event_fd() const noexcept;

  // Whether a daemon is attached now: false from a daemon's death until the client re-attaches.
  [[nodiscard]] bool connected() const noexcept;
  // The attached daemon's limits (the last one's while none is attached).
  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept;
  [[nodiscard]] std::uint32_t slot_count() const noexcept;
  // What the daemon last published about itself (the last daemon, while none is attached).
  // Any thread.
  [[nodiscard]] DaemonStatus daemon_status() const;

 private:
  explicit Client(std::unique_ptr<ClientImpl> impl);
  std::unique_ptr<ClientImpl> impl_;
};

}  // namespace batchd
