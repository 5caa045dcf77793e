// batchd._batchd: the nanobind bindings of batchd::Client. Sync calls release the GIL while they
// wait; asynchronous requests are answered into a list that poll() hands to Python, which
// batchd/__init__.py turns into asyncio futures (so no callback here touches a Python object).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client_lib/client.hpp"
#include "client_lib/traceparent.hpp"
#include "python/src/batchd/_worker.hpp"

namespace nb = nanobind;

namespace {

// batchd.Error's subclasses by ErrorCode, set once by batchd/__init__.py. Strong references
// kept for the life of the process: they must outlive every Client, including at shutdown.
std::array<PyObject*, batchd::kErrorCodes> g_error_classes{};

constexpr double kMaxTimeoutS = 86400;
constexpr double kDefaultTimeoutS = 10;  // the Python API's default request timeout

std::chrono::milliseconds to_timeout(double seconds) {
  if (!(seconds > 0 && seconds <= kMaxTimeoutS)) {
    throw nb::value_error("timeout must be a number of seconds above 0 and at most 86400");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

// The model a call names: None is the daemon's default model (an empty name).
std::string to_model(nb::handle name) {
  if (name.is_none()) return {};
  if (!nb::isinstance<nb::str>(name)) throw nb::type_error("model must be a str or None");
  return nb::borrow<nb::str>(name).c_str();
}

// A W3C traceparent (docs/TRACING.md): a sampled one is traced in the daemon under its span; an
// unsampled one is left to the daemon's sampler, as no context at all.
batchd::shm::TraceContext to_trace(nb::handle traceparent) {
  if (traceparent.is_none()) return {};
  if (!nb::isinstance<nb::str>(traceparent)) throw nb::type_error("traceparent must be a str or None");
  const std::optional<batchd::TraceParent> parsed = batchd::parse_traceparent(nb::borrow<nb::str>(traceparent).c_str());
  if (!parsed) throw nb::value_error("traceparent is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)");
  return parsed->sampled ? parsed->context : batchd::shm::TraceContext{};
}

batchd::Priority to_priority(nb::handle name) {
  if (name.is_none()) return batchd::Priority::kNormal;
  if (!nb::isinstance<nb::str>(name)) throw nb::type_error("priority must be 'high', 'normal', 'low' or None");
  if (auto priority = batchd::parse_priority(nb::borrow<nb::str>(name).c_str())) return *priority;
  throw nb::value_error("priority must be 'high', 'normal', 'low' or None");
}

// The bytes of a request: a str as UTF-8, bytes as they are (which is how an input that is not
// UTF-8 reaches the daemon's check).
std::string to_input(nb::handle text) {
  Py_ssize_t size = 0;
  if (PyUnicode_Check(text.ptr())) {
    const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
    if (data == nullptr) throw nb::python_error();
    return std::string(data, static_cast<std::size_t>(size));
  }
  if (PyBytes_Check(text.ptr())) {
    return std::string(PyBytes_AS_STRING(text.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(text.ptr())));
  }
  throw nb::type_error("a request is a str or bytes");
}

std::vector<std::string> to_inputs(nb::handle texts) {
  std::vector<std::string> inputs;
  for (nb::handle text : texts) inputs.push_back(to_input(text));
  return inputs;
}

// An instance of the batchd.Error subclass for `code`, carrying the library's message.
nb::object make_error(batchd::ErrorCode code, const std::string& message) {
  PyObject* cls = g_error_classes[static_cast<std::size_t>(code)];
  if (cls == nullptr) throw std::logic_error("batchd._batchd: the error classes were not registered");
  return nb::borrow(cls)(nb::str(message.data(), message.size()));
}

[[noreturn]] void raise(const nb::object& error) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw nb::python_error();
}

// The answer as a str, or the error it is, as an instance (not raised).
nb::object to_python(const batchd::Result& result) {
  if (!result.ok()) return make_error(result.error().code, result.error().message);
  const std::string& out = result.output();
  PyObject* text = PyUnicode_DecodeUTF8(out.data(), static_cast<Py_ssize_t>(out.size()), "strict");
  if (text == nullptr) {
    PyErr_Clear();
    return make_error(batchd::ErrorCode::kProtocolError, "the daemon's answer is not valid UTF-8");
  }
  return nb::steal(text);
}

nb::dict device_status(const batchd::DaemonStatus::Device& d) {
  nb::dict out;
  out["state"] = d.state;
  out["batches_ok"] = d.batches_ok;
  out["batches_failed"] = d.batches_failed;
  out["timeouts"] = d.timeouts;
  out["outstanding_requests"] = d.outstanding_requests;
  out["batch_ns"] = d.batch_ns;
  out["fixed_ns"] = d.fixed_ns;
  out["per_item_ns"] = d.per_item_ns;
  out["per_byte_ns"] = d.per_byte_ns;
  out["cost_samples"] = d.cost_samples;
  out["memory_free_bytes"] = d.memory_free_bytes;
  out["memory_total_bytes"] = d.memory_total_bytes;
  out["byte_budget"] = d.byte_budget;
  if (d.worker_pid != 0) {
    nb::dict worker;
    worker["pid"] = d.worker_pid;
    worker["name"] = d.worker_name;
    worker["version"] = d.worker_version;
    worker["lanes"] = d.worker_lanes;
    worker["batches"] = d.worker_batches;
    out["worker"] = worker;
  } else {
    out["worker"] = nb::none();
  }
  return out;
}

// A {"high": n, "normal": n, "low": n} dict of a per-class counter.
nb::dict by_class(const std::array<std::uint64_t, batchd::kPriorityClasses>& counts) {
  nb::dict out;
  for (batchd::Priority p : {batchd::Priority::kHigh, batchd::Priority::kNormal, batchd::Priority::kLow}) {
    const std::string_view name = batchd::priority_name(p);
    out[nb::str(name.data(), name.size())] = counts[static_cast<std::size_t>(p)];
  }
  return out;
}

nb::dict daemon_status(const batchd::DaemonStatus& s) {
  nb::dict out;
  out["backend"] = s.backend;
  out["daemon_pid"] = s.daemon_pid;
  out["age_ns"] = s.age_ns;
  out["healthy_devices"] = s.healthy_devices;
  out["workers"] = s.workers;
  out["min_workers"] = s.min_workers;
  out["clients"] = s.clients;
  out["requests_taken"] = s.requests_taken;
  out["requests_ok"] = s.requests_ok;
  out["requests_failed"] = s.requests_failed;
  out["requests_rejected"] = s.requests_rejected;
  out["in_flight"] = s.in_flight;
  out["requests_abandoned"] = s.requests_abandoned;
  out["requests_taken_by_class"] = by_class(s.requests_taken_by_class);
  out["requests_shed_by_class"] = by_class(s.requests_shed_by_class);
  out["arrivals_per_s_by_class"] = by_class(s.arrivals_per_s_by_class);
  out["policy"] = s.policy;
  out["target_batch"] = s.target_batch;
  out["arrivals_per_s"] = s.arrivals_per_s;
  nb::dict flushes;
  for (const auto& [why, count] : s.flushes) flushes[nb::str(why.data(), why.size())] = count;
  out["flushes"] = flushes;
  out["max_batch"] = s.max_batch;
  out["max_wait_ns"] = s.max_wait_ns;
  out["max_batch_bytes"] = s.max_batch_bytes;
  out["batches"] = s.batches;
  out["batch_failures"] = s.batch_failures;
  nb::list sizes;
  for (std::uint64_t n : s.batch_sizes) sizes.append(n);
  out["batch_sizes"] = sizes;
  nb::list devices;
  for (const auto& d : s.devices) devices.append(device_status(d));
  out["devices"] = devices;
  nb::list models;
  for (const auto& m : s.models) {
    nb::dict model;
    model["name"] = m.name;
    model["version"] = m.version;
    model["backend"] = m.backend;
    model["state"] = m.state;
    model["lanes"] = m.lanes;
    model["requests_taken"] = m.requests_taken;
    model["requests_ok"] = m.requests_ok;
    model["requests_failed"] = m.requests_failed;
    model["batches"] = m.batches;
    model["inferences"] = m.inferences;
    model["queue_ns"] = m.queue_ns;
    model["compute_ns"] = m.compute_ns;
    model["request_ns"] = m.request_ns;
    model["pending"] = m.pending;
    nb::list model_devices;
    for (const auto& d : m.devices) model_devices.append(device_status(d));
    model["devices"] = model_devices;
    model["healthy_devices"] = m.healthy_devices;
    model["shares_devices"] = m.shares_devices;
    model["turns_waited"] = m.turns_waited;
    model["turn_wait_ns"] = m.turn_wait_ns;
    model["policy"] = m.policy;
    model["max_batch"] = m.max_batch;
    model["max_wait_ns"] = m.max_wait_ns;
    model["max_batch_bytes"] = m.max_batch_bytes;
    model["target_batch"] = m.target_batch;
    model["arrivals_per_s"] = m.arrivals_per_s;
    models.append(model);
  }
  out["models"] = models;
  nb::list workers;
  for (const auto& w : s.attached_workers) {
    nb::dict worker;
    worker["model"] = w.model;
    worker["device"] = w.device;
    worker["pid"] = w.pid;
    worker["name"] = w.name;
    worker["version"] = w.version;
    worker["lanes"] = w.lanes;
    worker["batches"] = w.batches;
    workers.append(worker);
  }
  out["attached_workers"] = workers;
  out["dead_letters"] = s.dead_letters;
  out["dead_letters_dropped"] = s.dead_letters_dropped;
  out["priority_downgrades"] = s.priority_downgrades;
  out["connections_shed"] = s.connections_shed;
  return out;
}

// The native half of batchd.Client. The batchd::Client is shared with the calls in progress, so
// close() on one thread while another waits in submit() leaves that call its client: the last
// of them to return destroys it.
class NativeClient {
 public:
  NativeClient(nb::handle socket, double connect_timeout_s) {
    batchd::ClientOptions options;
    if (!socket.is_none()) options.socket_path = nb::cast<std::string>(nb::str(socket));
    if (!(connect_timeout_s >= 0 && connect_timeout_s <= kMaxTimeoutS)) {
      throw nb::value_error("connect_timeout must be a number of seconds from 0 to 86400");
    }
    options.connect_timeout =
        std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(connect_timeout_s * 1000)));
    batchd::Error error;
    {
      nb::gil_scoped_release unlocked;
      client_ = batchd::Client::connect(options, &error);
    }
    if (!client_) raise(make_error(error.code, error.message));
  }

  nb::object submit(nb::handle text, double timeout_s, nb::handle priority, nb::handle model, nb::handle traceparent) {
    const std::string input = to_input(text);
    const auto timeout = to_timeout(timeout_s);
    const batchd::Priority cls = to_priority(priority);
    const std::string name = to_model(model);
    const batchd::shm::TraceContext trace = to_trace(traceparent);
    const std::shared_ptr<batchd::Client> client = get();
    batchd::Result result = batchd::Result::failure(batchd::ErrorCode::kProtocolError, "");
    {
      nb::gil_scoped_release unlocked;
      result = client->submit(input, timeout, batchd::RequestOptions{cls, name, 0, trace});
    }
    nb::object answer = to_python(result);
    if (!result.ok() || !nb::isinstance<nb::str>(answer)) raise(answer);
    return answer;
  }

  // Each answer as a str, or an Error instance in its place.
  nb::list submit_many(nb::handle texts, double timeout_s, nb::handle priority, nb::handle model,
                       nb::handle traceparent) {
    const std::vector<std::string> inputs = to_inputs(texts);
    const std::vector<std::string_view> views(inputs.begin(), inputs.end());
    const auto timeout = to_timeout(timeout_s);
    const batchd::Priority cls = to_priority(priority);
    const std::string name = to_model(model);
    const batchd::shm::TraceContext trace = to_trace(traceparent);
    const std::shared_ptr<batchd::Client> client = get();
    std::vector<batchd::Result> results;
    {
      nb::gil_scoped_release unlocked;
      results = client->submit_many(views, timeout, batchd::RequestOptions{cls, name, 0, trace});
    }
    nb::list out;
    for (const batchd::Result& result : results) out.append(to_python(result));
    return out;
  }

  // Sends without waiting; poll() later returns (token, answer or Error). Returns the request's
  // id (for cancel()), or raises the refusal, in which case poll() never names `token`.
  std::uint64_t submit_async(nb::handle text, double timeout_s, nb::handle priority, std::uint64_t token,
                             nb::handle model) {
    const std::string input = to_input(text);
    const std::string name = to_model(model);
    std::uint64_t id = 0;
    if (auto refused = get()->submit_async(input, to_timeout(timeout_s),
                                           batchd::RequestOptions{to_priority(priority), name}, collector(token),
                                           &id)) {
      raise(make_error(refused->code, refused->message));
    }
    return id;
  }

  // submit_async for each text, with tokens first_token, first_token + 1, ...: a list of ids, an
  // Error instance in place of each refused one.
  nb::list submit_many_async(nb::handle texts, double timeout_s, nb::handle priority,
                             std::uint64_t first_token, nb::handle model) {
    const std::vector<std::string> inputs = to_inputs(texts);
    const auto timeout = to_timeout(timeout_s);
    const batchd::Priority cls = to_priority(priority);
    const std::string name = to_model(model);
    std::vector<batchd::Client::AsyncSubmission> submissions(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      submissions[i].input = inputs[i];
      submissions[i].done = collector(first_token + i);
      submissions[i].priority = cls;
      submissions[i].model = name;
    }
    get()->submit_many_async(submissions, timeout);
    nb::list out;
    for (const auto& s : submissions) {
      if (s.refused) {
        out.append(make_error(s.refused->code, s.refused->message));
      } else {
        out.append(s.id);
      }
    }
    return out;
  }

  // The finished asynchronous requests: a list of (token, answer or Error instance). One thread
  // at a time (the event loop's); it holds the GIL throughout, which is what serializes it.
  nb::list poll() {
    get()->poll();
    nb::list out;
    for (auto& [token, result] : finished_) out.append(nb::make_tuple(token, to_python(result)));
    finished_.clear();
    return out;
  }

  void cancel(std::uint64_t id) { get()->cancel(id); }
  int event_fd() { return get()->event_fd(); }
  bool connected() { return get()->connected(); }
  std::uint32_t max_input_bytes() { return get()->max_input_bytes(); }
  nb::dict status() { return daemon_status(get()->daemon_status()); }

  // Detaches from the daemon (at once, unless a call on another thread still holds the client).
  void close() {
    std::shared_ptr<batchd::Client> last = std::move(client_);
    nb::gil_scoped_release unlocked;
    last.reset();  // joins the client's threads, which need no GIL
  }
  bool closed() const noexcept { return client_ == nullptr; }

 private:
  std::shared_ptr<batchd::Client> get() const {
    if (!client_) throw std::runtime_error("this batchd.Client is closed");
    return client_;
  }

  // Called only from batchd::Client::poll(), which only poll() above calls.
  batchd::Client::Callback collector(std::uint64_t token) {
    return [this, token](batchd::Result&& result) { finished_.emplace_back(token, std::move(result)); };
  }

  std::shared_ptr<batchd::Client> client_;
  std::vector<std::pair<std::uint64_t, batchd::Result>> finished_;  // what poll() hands out
};

void set_error_classes(nb::handle classes) {
  if (nb::len(classes) != batchd::kErrorCodes) throw nb::value_error("one error class per batchd::ErrorCode");
  std::size_t i = 0;
  for (nb::handle cls : classes) {
    Py_XDECREF(g_error_classes[i]);
    g_error_classes[i++] = nb::borrow(cls).release().ptr();
  }
}

}  // namespace

void batchd::python::raise_error(ErrorCode code, const std::string& message) { raise(make_error(code, message)); }

NB_MODULE(_batchd, m) {
  m.doc() = "Bindings of libbatchd-client; use the batchd package, not this module.";
  m.def("_set_error_classes", &set_error_classes);
  m.def("error_code_names", [] {
    nb::list names;
    for (std::size_t i = 0; i < batchd::kErrorCodes; ++i) {
      names.append(batchd::error_code_name(static_cast<batchd::ErrorCode>(i)));
    }
    return names;
  });
  nb::class_<NativeClient>(m, "NativeClient")
      .def(nb::init<nb::handle, double>(), nb::arg("socket").none(), nb::arg("connect_timeout"))
      .def("submit", &NativeClient::submit, nb::arg("text"), nb::arg("timeout") = kDefaultTimeoutS,
           nb::arg("priority").none() = nb::none(), nb::arg("model").none() = nb::none(),
           nb::arg("traceparent").none() = nb::none())
      .def("_submit_many", &NativeClient::submit_many, nb::arg("texts"), nb::arg("timeout"),
           nb::arg("priority").none(), nb::arg("model").none() = nb::none(),
           nb::arg("traceparent").none() = nb::none())
      .def("_submit_async", &NativeClient::submit_async, nb::arg("text"), nb::arg("timeout"),
           nb::arg("priority").none(), nb::arg("token"), nb::arg("model").none() = nb::none())
      .def("_submit_many_async", &NativeClient::submit_many_async, nb::arg("texts"), nb::arg("timeout"),
           nb::arg("priority").none(), nb::arg("first_token"), nb::arg("model").none() = nb::none())
      .def("_poll", &NativeClient::poll)
      .def("_cancel", &NativeClient::cancel)
      .def("_event_fd", &NativeClient::event_fd)
      .def("status", &NativeClient::status)
      .def("close", &NativeClient::close)
      .def_prop_ro("closed", &NativeClient::closed)
      .def_prop_ro("connected", &NativeClient::connected)
      .def_prop_ro("max_input_bytes", &NativeClient::max_input_bytes);
  batchd::python::bind_worker(m);
}
