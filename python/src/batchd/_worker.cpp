// batchd._batchd's worker half: the nanobind binding of batchd::Worker. serve() waits for
// batches without the GIL and takes it only to run the model function on one batch; the inputs
// reach Python as str, bytes or memoryviews of the daemon's shared memory, and the outputs go
// straight into it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "client_lib/worker.hpp"
#include "python/src/batchd/_worker.hpp"

namespace nb = nanobind;

namespace {

enum class InputKind { kStr, kBytes, kMemoryView };

InputKind input_kind(const std::string& name) {
  if (name == "str") return InputKind::kStr;
  if (name == "bytes") return InputKind::kBytes;
  if (name == "memoryview") return InputKind::kMemoryView;
  throw nb::value_error("inputs must be 'str', 'bytes' or 'memoryview'");
}

// The batch's inputs as a Python list. Memoryviews point into the daemon's buffer: valid while
// the model function runs, released (and so unusable) after it returns.
nb::list inputs_of(batchd::WorkerBatch& batch, InputKind kind, std::vector<nb::object>& views) {
  nb::list inputs;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::string_view in = batch.input(i);
    PyObject* item = nullptr;
    switch (kind) {
      case InputKind::kStr:
        item = PyUnicode_DecodeUTF8(in.data(), static_cast<Py_ssize_t>(in.size()), "strict");
        break;
      case InputKind::kBytes:
        item = PyBytes_FromStringAndSize(in.data(), static_cast<Py_ssize_t>(in.size()));
        break;
      case InputKind::kMemoryView:
        item = PyMemoryView_FromMemory(const_cast<char*>(in.data()), static_cast<Py_ssize_t>(in.size()), PyBUF_READ);
        break;
    }
    if (item == nullptr) throw nb::python_error();
    nb::object object = nb::steal(item);
    if (kind == InputKind::kMemoryView) views.push_back(object);
    inputs.append(object);
  }
  return inputs;
}

// One output: a str as UTF-8, or anything with the buffer protocol (bytes, bytearray, memoryview).
void append_output(batchd::WorkerBatch& batch, nb::handle output, std::size_t index) {
  bool fits = false;
  if (PyUnicode_Check(output.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(output.ptr(), &size);
    if (data == nullptr) throw nb::python_error();
    fits = batch.append(std::string_view(data, static_cast<std::size_t>(size)));
  } else if (PyObject_CheckBuffer(output.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(output.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    fits = batch.append(std::string_view(static_cast<const char*>(view.buf), static_cast<std::size_t>(view.len)));
    PyBuffer_Release(&view);
  } else {
    throw std::runtime_error("output " + std::to_string(index) + " is a " +
                             std::string(Py_TYPE(output.ptr())->tp_name) + ", not str or bytes");
  }
  if (!fits) throw std::runtime_error("output " + std::to_string(index) + " does not fit the daemon's limits");
}

// Memoryviews of a batch's inputs, released when the batch is done with (the buffer is the
// daemon's next batch after that); the GIL is held. A view the model still exports stays as it is.
struct ReleasedViews {
  std::vector<nb::object> views;
  ~ReleasedViews() {
    for (nb::object& view : views) {
      nb::object released = nb::steal(PyObject_CallMethod(view.ptr(), "release", nullptr));
      if (!released.is_valid()) PyErr_Clear();
    }
  }
};

// Runs fn on one batch with the GIL held; a Python exception becomes the batch's failure.
void run_model(batchd::WorkerBatch& batch, const nb::callable& fn, InputKind kind) {
  nb::gil_scoped_acquire locked;
  ReleasedViews released;
  std::vector<nb::object>& views = released.views;
  try {
    const nb::object outputs = fn(inputs_of(batch, kind, views));
    if (!PySequence_Check(outputs.ptr())) throw std::runtime_error("the model function must return a list");
    const Py_ssize_t n = PySequence_Size(outputs.ptr());
    if (n < 0) throw nb::python_error();
    if (static_cast<std::size_t>(n) != batch.size()) {
      throw std::runtime_error("the model function returned " + std::to_string(n) + " outputs for " +
                               std::to_string(batch.size()) + " inputs");
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
      const nb::object output = nb::steal(PySequence_GetItem(outputs.ptr(), i));
      if (!output.is_valid()) throw nb::python_error();
      append_output(batch, output, static_cast<std::size_t>(i));
    }
  } catch (nb::python_error& e) {
    throw std::runtime_error(e.what());
  }
}

class NativeWorker {
 public:
  NativeWorker(nb::handle socket, const std::string& name, const std::string& version, unsigned concurrency,
               std::uint32_t max_inputs, std::uint64_t max_bytes, double attach_timeout_s, double spin_us) {
    batchd::WorkerOptions options;
    if (!socket.is_none()) options.socket_path = nb::cast<std::string>(nb::str(socket));
    options.name = name;
    options.version = version;
    options.concurrency = concurrency;
    options.max_inputs = max_inputs;
    options.max_bytes = max_bytes;
    if (!(attach_timeout_s >= 0 && attach_timeout_s <= 86400)) {
      throw nb::value_error("attach_timeout must be a number of seconds from 0 to 86400");
    }
    options.attach_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(attach_timeout_s * 1000)));
    options.spin = std::chrono::microseconds(static_cast<std::int64_t>(spin_us));
    batchd::Error error;
    {
      nb::gil_scoped_release unlocked;
      worker_ = batchd::Worker::connect(options, &error);
    }
    if (!worker_) batchd::python::raise_error(error.code, error.message);
  }

  // True once stopped (stop()), False when the daemon went away.
  bool serve(nb::callable fn, const std::string& inputs) {
    if (served_) throw std::runtime_error("a batchd.Worker serves once; connect a new one");
    served_ = true;
    const InputKind kind = input_kind(inputs);
    batchd::WorkerEnd end;
    {
      nb::gil_scoped_release unlocked;
      end = worker_->serve([&fn, kind](batchd::WorkerBatch& batch) { run_model(batch, fn, kind); });
    }
    return end == batchd::WorkerEnd::kStopped;
  }

  void stop() noexcept { worker_->stop(); }
  unsigned concurrency() const noexcept { return worker_->concurrency(); }
  std::uint32_t max_inputs() const noexcept { return worker_->max_inputs(); }
  std::uint32_t worker_id() const noexcept { return worker_->worker_id(); }

 private:
  std::unique_ptr<batchd::Worker> worker_;
  bool served_ = false;
};

}  // namespace

namespace batchd::python {

void bind_worker(nb::module_& m) {
  nb::class_<NativeWorker>(m, "NativeWorker")
      .def(nb::init<nb::handle, const std::string&, const std::string&, unsigned, std::uint32_t, std::uint64_t,
                    double, double>(),
           nb::arg("socket").none(), nb::arg("name"), nb::arg("version"), nb::arg("concurrency"),
           nb::arg("max_inputs"), nb::arg("max_bytes"), nb::arg("attach_timeout"), nb::arg("spin_us"))
      .def("_serve", &NativeWorker::serve, nb::arg("fn"), nb::arg("inputs"))
      .def("stop", &NativeWorker::stop)
      .def_prop_ro("concurrency", &NativeWorker::concurrency)
      .def_prop_ro("max_inputs", &NativeWorker::max_inputs)
      .def_prop_ro("worker_id", &NativeWorker::worker_id);
}

}  // namespace batchd::python
