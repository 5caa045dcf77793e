#include "daemon/plugin_backend.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/backend_plugin.h"
#include "text/ascii.hpp"

namespace batchd {
namespace {

constexpr std::size_t kErrorBytes = 1024;
// Output offsets are 32-bit; a cap well below that keeps one bad plug-in from exhausting memory.
constexpr std::size_t kMaxOutputBytes = std::size_t{1} << 30;
// The executor runs one thread per lane.
constexpr std::uint64_t kMaxLanes = 1024;

struct LibraryCloser {
  void operator()(void* handle) const noexcept { dlclose(handle); }
};
using LibraryHandle = std::unique_ptr<void, LibraryCloser>;

std::string dl_error() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dynamic loader error";
}

// A plug-in's message goes to callers and logs: keep it to printable ASCII, whatever it wrote.
std::string printable_message(const char* error, std::size_t size) {
  return text::printable(std::string_view(error, size));
}

// What append_output needs during one run() call.
struct OutputSink {
  BatchOutput* out;
  std::size_t max_outputs;
  const char* refusal = nullptr;  // why an append was refused; once set, all later ones are too
};

// The batchd_plugin_output callback. It runs inside the plug-in's C frames: nothing may throw.
int append_output(void* context, const char* bytes, std::size_t len) noexcept {
  auto& sink = *static_cast<OutputSink*>(context);
  if (sink.refusal != nullptr) return 1;
  if (sink.out->size() >= sink.max_outputs) {
    sink.refusal = "appended more outputs than the batch has inputs";
  } else if (len > kMaxOutputBytes - sink.out->bytes.size()) {
    sink.refusal = "outputs exceed 1 GiB in total";
  } else if (len > 0 && bytes == nullptr) {
    sink.refusal = "appended an output from a NULL pointer";
  } else {
    try {
      char* destination = sink.out->append(len);
      if (len > 0) std::memcpy(destination, bytes, len);
      return 0;
    } catch (...) {
      sink.refusal = "out of memory for outputs";
    }
  }
  return 1;
}

class PluginBackend final : public Backend {
 public:
  // Takes the library and the state init() returned; destroys the state before unloading.
  PluginBackend(LibraryHandle library, const batchd_plugin& plugin, void* state, unsigned devices,
                unsigned streams, std::uint32_t flags)
      : library_(std::move(library)), plugin_(plugin), name_(plugin.name), state_(state),
        devices_(devices), streams_(streams), flags_(flags) {}
  PluginBackend(const PluginBackend&) = delete;
  PluginBackend& operator=(const PluginBackend&) = delete;
  ~PluginBackend() override { plugin_.destroy(state_); }

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] unsigned devices() const noexcept override { return devices_; }
  [[nodiscard]] unsigned streams_per_device() const noexcept override { return streams_; }
  [[nodiscard]] bool runs_inline() const noexcept override { return (flags_ & BATCHD_PLUGIN_RUNS_INLINE) != 0; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;
  void shutdown() noexcept override {
    if (plugin_.shutdown != nullptr) plugin_.shutdown(state_);
  }

 private:
  BackendStatus fail(BatchOutput& out, const std::string& why) const {
    out.clear();
    return BackendStatus::failure("plug-in " + name_ + ": " + why);
  }

  LibraryHandle library_;  // first member, so the code is unloaded after everything else
  batchd_plugin plugin_;   // a copy: the functions checked at load are the ones called
  std::string name_;
  void* state_;  // owned by the plug-in; released with plugin_.destroy
  unsigned devices_;
  unsigned streams_;
  std::uint32_t flags_;  // BATCHD_PLUGIN_* from batchd_plugin_v1_flags(), 0 without it
};

BackendStatus PluginBackend::run(LaneId lane, const BatchInput& in, BatchOutput& out) {
  out.clear();
  const std::size_t count = in.size();
  if (count == 0) return BackendStatus::success();
  if (count > std::numeric_limits<std::uint32_t>::max()) return fail(out, "batch too large");
  OutputSink sink{&out, count};
  const batchd_plugin_output output{&sink, &append_output};
  char error[kErrorBytes] = {};
  // Never a null input pointer, even when every input is empty: a plug-in may add an offset to it,
  // which on a null pointer is undefined (clang's UBSan caught the example plug-in so).
  static constexpr char kNoBytes[1] = {};
  const char* bytes = in.bytes.empty() ? kNoBytes : in.bytes.data();
  const int rc = plugin_.run(state_, lane.device, lane.stream, static_cast<std::uint32_t>(count), bytes,
                             in.offsets.data(), &output, error, sizeof error);
  if (sink.refusal != nullptr) return fail(out, sink.refusal);
  if (rc == 0) return BackendStatus::success();
  std::string message = printable_message(error, sizeof error);
  if (message.empty()) message = "run failed with code " + std::to_string(rc) + " and no message";
  return fail(out, message);
}

Failure unusable(std::string why) {
  return make_failure(std::errc::executable_format_error, std::move(why));
}

// Finds and checks the plug-in's description.
Expected<const batchd_plugin*> find_plugin(void* library, const std::string& label) {
  dlerror();
  void* symbol = dlsym(library, BATCHD_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    return unusable(label + " does not export " BATCHD_PLUGIN_ENTRY_SYMBOL "() (" + dl_error() +
                    "): not a batchd plug-in, or one built for another plug-in ABI version");
  }
  const batchd_plugin* plugin = reinterpret_cast<batchd_plugin_entry_fn>(symbol)();
  if (plugin == nullptr) return unusable(label + ": " BATCHD_PLUGIN_ENTRY_SYMBOL "() returned NULL");
  if (plugin->abi_version != BATCHD_PLUGIN_ABI_VERSION) {
    return unusable(label + " was built for plug-in ABI version " +
                    std::to_string(plugin->abi_version) + "; this batchd supports version " +
                    std::to_string(BATCHD_PLUGIN_ABI_VERSION));
  }
  if (plugin->name == nullptr || plugin->name[0] == '\0') return unusable(label + " has no name");
  if (plugin->init == nullptr || plugin->run == nullptr || plugin->destroy == nullptr) {
    return unusable(label + " lacks a required function (init, run and destroy must not be NULL)");
  }
  return plugin;
}

// The optional flags function; a plug-in without one has no flags.
std::uint32_t plugin_flags(void* library) noexcept {
  void* symbol = dlsym(library, BATCHD_PLUGIN_FLAGS_SYMBOL);
  return symbol == nullptr ? 0 : reinterpret_cast<batchd_plugin_flags_fn>(symbol)();
}

// What init made: the plug-in's state (the caller's to destroy) and its lanes.
struct PluginState {
  void* state = nullptr;
  std::uint32_t devices = 0;
  std::uint32_t streams = 1;
};

// Calls init and checks what it reports.
Expected<PluginState> init_plugin(const batchd_plugin& plugin, const std::string& config,
                                  const std::string& label) {
  char error[kErrorBytes] = {};
  PluginState made;
  made.state = plugin.init(config.c_str(), &made.devices, &made.streams, error, sizeof error);
  if (made.state == nullptr) {
    const std::string message = printable_message(error, sizeof error);
    return make_failure(std::errc::invalid_argument,
                        label + ": init failed: " + (message.empty() ? "no message" : message));
  }
  std::string why;
  if (made.devices == 0 || made.streams == 0) {
    why = label + ": init reported " + std::to_string(made.devices) + " devices with " +
          std::to_string(made.streams) + " streams each; both must be at least 1";
  } else if (std::uint64_t{made.devices} * made.streams > kMaxLanes) {
    why = label + ": init reported " + std::to_string(made.devices) + " devices x " +
          std::to_string(made.streams) + " streams, more than " + std::to_string(kMaxLanes) +
          " lanes";
  } else {
    return made;
  }
  plugin.destroy(made.state);
  return make_failure(std::errc::protocol_error, std::move(why));
}

}  // namespace

Expected<std::unique_ptr<Backend>> load_plugin_backend(const std::string& path,
                                                       const std::string& config) {
  const std::string label = "plug-in '" + path + "'";
  LibraryHandle library(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (library == nullptr) return unusable("cannot load " + label + ": " + dl_error());
  const Expected<const batchd_plugin*> plugin = find_plugin(library.get(), label);
  if (!plugin) return plugin.error();
  const Expected<PluginState> made = init_plugin(**plugin, config, label);
  if (!made) return made.error();
  return std::unique_ptr<Backend>(std::make_unique<PluginBackend>(
      std::move(library), **plugin, made->state, made->devices, made->streams, plugin_flags(library.get())));
}

}  // namespace batchd
