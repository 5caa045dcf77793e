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

#include "shm/trace_context.hpp"
#include "status/daemon_status.hpp"

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
// DaemonStatus counts by Priority, as its index (status/daemon_status.hpp).
static_assert(kPriorityClasses == kStatusClasses && static_cast<std::size_t>(Priority::kHigh) == 0 &&
              static_cast<std::size_t>(Priority::kNormal) == 1 && static_cast<std::size_t>(Priority::kLow) == 2);

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
  // The caller's trust domain within this client, for a model whose answers the daemon caches
  // (docs/CACHE.md): an answer stored for one scope is never given to another. A front-end serving
  // callers of different credentials gives each its own; 0 (the default): the client's own.
  std::uint32_t cache_scope = 0;
  // Trace it in the daemon (docs/TRACING.md): a span of the request, its wait and its run, and of
  // the batch that ran it, in this trace, under this span (the caller's). None (the default): the
  // daemon's own sampling decides.
  shm::TraceContext trace{};
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
    std::uint32_t cache_scope = 0;  // as RequestOptions::cache_scope
    shm::TraceContext trace{};      // as RequestOptions::trace
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
