#include "kernels/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <thread>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_lanes.hpp"
#include "backend/reference_batchstring.hpp"
#include "kernels/sha256_launch.hpp"

namespace batchd {
namespace {

constexpr std::size_t kHexBytes = kDigestHexBytes;
// After queueing a batch, poll its event by yielding this long (a small batch is done in tens of
// microseconds), then by sleeping kPollSleep between polls so a long batch costs no CPU. Polling
// rather than cudaEventSynchronize lets shutdown() interrupt the wait.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr unsigned kMaxStreamsPerDevice = 64;
constexpr std::uint32_t kMaxBatchInputs = 1U << 20;
// The self-test's rounds: two run both paths of the kernel (hash of the input, hash of a hex
// digest) whatever --cost says, so a costly configuration does not make start-up slow.
constexpr unsigned kSelfTestCost = 2;
// For worst_batch_time(), pessimistic on purpose (docs/GPU.md): one GPU thread alone takes about
// 0.9 us per SHA-256 block (64 rounds of a dependent chain); and a multiprocessor hashes about
// 40 million blocks a second when full (64 integer lanes at >= 1 GHz, ~1,500 instructions a
// block), taken at half that.
constexpr double kWorstNsPerBlock = 2'000;
constexpr double kWorstBlocksPerSmSecond = 20e6;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) noexcept
      : cost_(options.cost),
        streams_(options.streams_per_device),
        fill_devices_(options.max_batch_fills_devices),
        limits_{options.max_batch, static_cast<std::uint32_t>(options.max_batch_bytes)} {}

  // Makes the lanes of every device in `ordinals` and self-tests each device.
  BackendStatus init(const std::vector<int>& ordinals);

  [[nodiscard]] std::string_view name() const noexcept override { return "cuda"; }
  [[nodiscard]] unsigned devices() const noexcept override {
    return static_cast<unsigned>(devices_.size());
  }
  [[nodiscard]] unsigned streams_per_device() const noexcept override { return streams_; }
  [[nodiscard]] std::string_view device_group() const noexcept override { return "cuda"; }
  [[nodiscard]] unsigned device_in_group(unsigned device) const noexcept override {
    return static_cast<unsigned>(devices_[device]->ordinal());
  }
  [[nodiscard]] BatchCapacity capacity() const noexcept override {
    return {limits_.max_inputs, limits_.max_bytes, fill_inputs_};
  }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;
  [[nodiscard]] bool device_lost(unsigned device) const noexcept override {
    return device < devices_.size() && devices_[device]->lost_error() != cudaSuccess;
  }
  [[nodiscard]] std::chrono::nanoseconds worst_batch_time() const noexcept override;
  void shutdown() noexcept override { shutting_down_.store(true, std::memory_order_release); }
  // cudaMemGetInfo on the device. batch_memory_bytes stays the default 0: every buffer a batch
  // uses is made at start, so a batch takes no device memory of its own.
  [[nodiscard]] DeviceMemory memory(unsigned device) const noexcept override;

 private:
  BackendStatus check_batch(const BatchInput& in) const;
  void stage(cuda::Lane& lane, const BatchInput& in) const noexcept;
  BackendStatus enqueue(cuda::DeviceLanes& device, cuda::Lane& lane, std::uint32_t count,
                        std::uint32_t input_bytes, unsigned cost) const;
  BackendStatus wait_for(cuda::DeviceLanes& device, cuda::Lane& lane) const;
  BackendStatus self_test(unsigned device);
  void size_to_devices();
  static BackendStatus lost(const cuda::DeviceLanes& device);

  unsigned cost_;             // SHA-256 rounds per input
  unsigned streams_;          // lanes per device
  bool fill_devices_;         // CudaBackendOptions::max_batch_fills_devices
  cuda::BatchLimits limits_;  // what one batch may hold; sizes every buffer
  // Per stream, the inputs that fill the smallest device with every stream's batch at once.
  std::uint32_t fill_inputs_ = 0;
  std::uint32_t multiprocessors_ = 0;  // the smallest device's
  std::vector<std::unique_ptr<cuda::DeviceLanes>> devices_;  // index = LaneId::device
  std::atomic<bool> shutting_down_{false};  // set by shutdown(); waits in run() give up
};

// Every device's shape first: the buffers of all are sized alike, from the smallest.
BackendStatus CudaBackend::init(const std::vector<int>& ordinals) {
  for (const int ordinal : ordinals) {
    devices_.push_back(std::make_unique<cuda::DeviceLanes>(ordinal));
    BATCHD_RETURN_IF_FAILED(devices_.back()->read_shape());
  }
  size_to_devices();
  for (unsigned device = 0; device < devices_.size(); ++device) {
    BATCHD_RETURN_IF_FAILED(devices_[device]->init(streams_, limits_));
    BATCHD_RETURN_IF_FAILED(self_test(device));
  }
  return BackendStatus::success();
}

// A device is full when its resident threads all have an input: the streams' batches together
// then run in one wave (so a lane's batch time does not depend on what the other lanes run), and
// nothing more runs sooner for being sent at once.
void CudaBackend::size_to_devices() {
  std::uint32_t resident = UINT32_MAX;
  multiprocessors_ = UINT32_MAX;
  for (const auto& device : devices_) {
    resident = std::min(resident, device->shape().resident_threads);
    multiprocessors_ = std::min(multiprocessors_, device->shape().multiprocessors);
  }
  constexpr std::uint32_t kWarp = kernels::kWarpThreads;
  const std::uint32_t per_stream = (resident + streams_ - 1) / streams_;
  fill_inputs_ = std::min((per_stream + kWarp - 1) / kWarp * kWarp, kMaxFillBatch);
  if (fill_devices_) limits_.max_inputs = std::max(limits_.max_inputs, fill_inputs_);
}

// One input through every lane of the device: proves the kernel image fits the device and the
// whole path works before the daemon takes traffic; it also loads the module (lazy loading), so
// the first real batch does not pay for that. Every lane's batch is queued before any is waited
// for, so the lanes test in parallel, at kSelfTestCost rounds rather than --cost.
BackendStatus CudaBackend::self_test(unsigned device) {
  // Cut to the byte limit, so that even a backend sized for one-byte batches can test itself.
  const std::string_view input = std::string_view("batchd self-test").substr(0, limits_.max_bytes);
  const std::uint32_t offsets[2] = {0, static_cast<std::uint32_t>(input.size())};
  const BatchInput in{{input.data(), input.size()}, {offsets, 2}};
  const unsigned cost = std::min(cost_, kSelfTestCost);
  const std::string expected = reference_batchstring(input, cost);
  cuda::DeviceLanes& lanes = *devices_[device];
  const std::string where = "cuda device " + std::to_string(lanes.ordinal()) + " self-test: ";
  BackendStatus status = BackendStatus::success();
  if (const cudaError_t err = lanes.track(cudaSetDevice(lanes.ordinal())); err != cudaSuccess) {
    status = cuda::failure(err, "cudaSetDevice");
  }
  for (unsigned stream = 0; status.ok && stream < streams_; ++stream) {
    stage(lanes.lane(stream), in);
    status = enqueue(lanes, lanes.lane(stream), 1, offsets[1], cost);
  }
  for (unsigned stream = 0; status.ok && stream < streams_; ++stream) {
    status = wait_for(lanes, lanes.lane(stream));
    if (status.ok && std::string_view(lanes.lane(stream).host_out, kHexBytes) != expected) {
      status = BackendStatus::failure("wrong answer from the kernel");
    }
  }
  if (!status.ok) return BackendStatus::failure(where + status.message);
  return BackendStatus::success();
}

BackendStatus CudaBackend::run(LaneId id, const BatchInput& in, BatchOutput& out) {
  out.clear();
  if (id.device >= devices_.size() || id.stream >= streams_) {
    return BackendStatus::failure("cuda backend: no lane " + std::to_string(id.device) + "/" +
                                  std::to_string(id.stream));
  }
  if (shutting_down_.load(std::memory_order_acquire)) {
    return BackendStatus::failure("cuda backend: shutting down");
  }
  BATCHD_RETURN_IF_FAILED(check_batch(in));
  const auto count = static_cast<std::uint32_t>(in.size());
  if (count == 0) return BackendStatus::success();
  cuda::DeviceLanes& device = *devices_[id.device];
  if (device.lost_error() != cudaSuccess) return lost(device);
  cuda::Lane& lane = device.lane(id.stream);
  BATCHD_RETURN_IF_CUDA_ERR(device.track(cudaSetDevice(device.ordinal())), "cudaSetDevice");
  if (lane.in_flight) {  // an abandoned batch may still read the staging buffers
    BATCHD_RETURN_IF_CUDA_ERR(device.track(cudaStreamSynchronize(lane.stream)),
                              "earlier batch on this lane");
    lane.in_flight = false;
  }
  stage(lane, in);
  BATCHD_RETURN_IF_FAILED(enqueue(device, lane, count, in.offsets[count] - in.offsets[0], cost_));
  BATCHD_RETURN_IF_FAILED(wait_for(device, lane));
  out.bytes.resize(std::size_t{count} * kHexBytes);
  std::memcpy(out.bytes.data(), lane.host_out, out.bytes.size());
  out.offsets.resize(std::size_t{count} + 1);
  for (std::uint32_t i = 0; i <= count; ++i)
    out.offsets[i] = static_cast<std::uint32_t>(i * kHexBytes);
  return BackendStatus::success();
}

BackendStatus CudaBackend::lost(const cuda::DeviceLanes& device) {
  return cuda::failure(device.lost_error(), "cuda device " + std::to_string(device.ordinal()) +
                                                " is lost until batchd restarts, after");
}

// The longest thread's chain of blocks at a lone thread's pace (as if one input held the whole
// byte budget), plus every block of a full batch at the smallest device's full pace: a bound
// whichever of the two limits the batch. Blocks: an input's own (its bytes, the length and the
// padding), then two per further round.
std::chrono::nanoseconds CudaBackend::worst_batch_time() const noexcept {
  const double rounds_blocks = 2.0 * (static_cast<double>(cost_) - 1);
  const double chain = std::ceil((static_cast<double>(limits_.max_bytes) + 9) / 64) +
                       rounds_blocks;
  const double all = static_cast<double>(limits_.max_bytes) / 64 +
                     static_cast<double>(limits_.max_inputs) * (2 + rounds_blocks);
  const double sms = std::max(1.0, static_cast<double>(multiprocessors_));
  const double ns = chain * kWorstNsPerBlock + all / (kWorstBlocksPerSmSecond * sms) * 1e9;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(ns, 1e18)));
}

// Called on the router's watchdog thread, whose current device is its own to set. A device the
// runtime cannot answer for reports nothing (its batches' failures will tell); a sticky error here
// loses it, so an idle device's loss is known too.
DeviceMemory CudaBackend::memory(unsigned device) const noexcept {
  if (device >= devices_.size()) return {};
  cuda::DeviceLanes& lanes = *devices_[device];
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (lanes.track(cudaSetDevice(lanes.ordinal())) != cudaSuccess ||
      lanes.track(cudaMemGetInfo(&free_bytes, &total_bytes)) != cudaSuccess) {
    return {};
  }
  return {total_bytes, free_bytes, 0};
}

// The batch must fit the buffers sized at start-up (allocating here would stall every lane of
// the device) and its offsets must stay inside its bytes (the kernel trusts them).
BackendStatus CudaBackend::check_batch(const BatchInput& in) const {
  const std::size_t count = in.size();
  if (count > limits_.max_inputs) {
    return BackendStatus::failure("cuda backend: batch of " + std::to_string(count) +
                                  " inputs exceeds --max-batch " +
                                  std::to_string(limits_.max_inputs));
  }
  if (count == 0) return BackendStatus::success();
  for (std::size_t i = 0; i < count; ++i) {
    if (in.offsets[i] > in.offsets[i + 1]) {
      return BackendStatus::failure("cuda backend: batch offsets decrease at input " +
                                    std::to_string(i));
    }
  }
  if (in.offsets[count] > in.bytes.size()) {
    return BackendStatus::failure("cuda backend: batch offsets run past its bytes");
  }
  const std::uint64_t input_bytes = in.offsets[count] - in.offsets[0];
  if (input_bytes > limits_.max_bytes) {
    return BackendStatus::failure("cuda backend: batch of " + std::to_string(input_bytes) +
                                  " bytes exceeds --max-batch-bytes " +
                                  std::to_string(limits_.max_bytes));
  }
  return BackendStatus::success();
}

// Copies the batch into the lane's pinned buffers, rebased so the first input starts at 0 (a
// batch split for isolation may be a window of a larger one).
void CudaBackend::stage(cuda::Lane& lane, const BatchInput& in) const noexcept {
  const std::size_t count = in.size();
  const std::uint32_t base = in.offsets[0];
  std::memcpy(lane.host_bytes, in.bytes.data() + base, in.offsets[count] - base);
  for (std::size_t i = 0; i <= count; ++i) lane.host_offsets[i] = in.offsets[i] - base;
}

BackendStatus CudaBackend::enqueue(cuda::DeviceLanes& device, cuda::Lane& lane,
                                   std::uint32_t count, std::uint32_t input_bytes,
                                   unsigned cost) const {
  lane.in_flight = true;  // from the first queued copy on, the stream owns the buffers
  BATCHD_RETURN_IF_CUDA_ERR(device.track(cudaMemcpyAsync(lane.device_bytes, lane.host_bytes,
                                                         input_bytes, cudaMemcpyHostToDevice,
                                                         lane.stream)),
                            "copy of the batch to the device");
  BATCHD_RETURN_IF_CUDA_ERR(
      device.track(cudaMemcpyAsync(lane.device_offsets, lane.host_offsets,
                                   (std::size_t{count} + 1) * sizeof(std::uint32_t),
                                   cudaMemcpyHostToDevice, lane.stream)),
      "copy of the batch offsets to the device");
  // The launch reports cudaGetLastError(), which still holds any earlier failed call's error on
  // this thread (a failed copy of an earlier batch): clear it, or that batch's error fails this
  // one too. It is not tracked: it may be another device's. A sticky error of this device's
  // context stays, and the launch reports it.
  (void)cudaGetLastError();
  BATCHD_RETURN_IF_CUDA_ERR(device.track(kernels::launch_batchstring(
                                lane.device_bytes, lane.device_offsets, count, cost,
                                lane.device_out, device.shape(), lane.stream)),
                            "batchstring kernel launch");
  BATCHD_RETURN_IF_CUDA_ERR(
      device.track(cudaMemcpyAsync(lane.host_out, lane.device_out, std::size_t{count} * kHexBytes,
                                   cudaMemcpyDeviceToHost, lane.stream)),
      "copy of the answers from the device");
  BATCHD_RETURN_IF_CUDA_ERR(device.track(cudaEventRecord(lane.done, lane.stream)),
                            "cudaEventRecord");
  return BackendStatus::success();
}

BackendStatus CudaBackend::wait_for(cuda::DeviceLanes& device, cuda::Lane& lane) const {
  const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  for (;;) {
    const cudaError_t err = device.track(cudaEventQuery(lane.done));
    if (err == cudaSuccess) {
      lane.in_flight = false;
      return BackendStatus::success();
    }
    // Errors from the kernel or the copies surface here; a sticky one (an illegal address, say)
    // loses the device: every later call there fails too (device_lost()).
    if (err != cudaErrorNotReady) return cuda::failure(err, "batch on the device");
    if (shutting_down_.load(std::memory_order_acquire)) {
      return BackendStatus::failure("cuda backend: shutting down; batch abandoned");
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

Failure invalid(std::string why) {
  return make_failure(std::errc::invalid_argument, "cuda backend: " + why);
}

Expected<void> check_options(const CudaBackendOptions& options) {
  if (options.cost < 1) return invalid("cost must be at least 1");
  if (options.streams_per_device < 1 || options.streams_per_device > kMaxStreamsPerDevice) {
    return invalid("streams per device must be 1.." + std::to_string(kMaxStreamsPerDevice));
  }
  if (options.max_batch < 1 || options.max_batch > kMaxBatchInputs) {
    return invalid("max batch must be 1.." + std::to_string(kMaxBatchInputs) + " inputs");
  }
  if (options.max_batch_bytes < 1 ||
      options.max_batch_bytes > std::numeric_limits<std::uint32_t>::max()) {
    return invalid("max batch bytes must be 1..4294967295 (input offsets are 32-bit)");
  }
  return {};
}

Failure no_device(std::string why) {
  return make_failure(std::errc::no_such_device, std::move(why));
}

// The ordinals to use: the requested ones, each checked, or every visible device.
Expected<std::vector<int>> choose_devices(const std::vector<int>& requested) {
  const Expected<int> visible = cuda_device_count();
  if (!visible) return visible.error();
  std::vector<int> ordinals;
  if (requested.empty()) {
    for (int d = 0; d < *visible; ++d) ordinals.push_back(d);
    return ordinals;
  }
  for (const int d : requested) {
    if (d < 0 || d >= *visible) {
      return no_device("cuda device " + std::to_string(d) + " does not exist (" +
                       std::to_string(*visible) + " visible)");
    }
    if (std::find(ordinals.begin(), ordinals.end(), d) != ordinals.end()) {
      return make_failure(std::errc::invalid_argument,
                          "cuda device " + std::to_string(d) + " is listed twice");
    }
    ordinals.push_back(d);
  }
  return ordinals;
}

// Why the runtime reports no device, with a hint where the cause is the machine, not batchd.
std::string no_gpu_text(cudaError_t err) {
  std::string why = cuda::error_text(err, "no usable GPU: cudaGetDeviceCount");
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    why += "; this machine has no NVIDIA GPU or driver, or a driver older than CUDA " +
           std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  }
  return why;
}

}  // namespace

Expected<int> cuda_device_count() noexcept {
  try {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return no_device(no_gpu_text(err));
    if (count == 0) return no_device("no CUDA device is visible (is CUDA_VISIBLE_DEVICES empty?)");
    return count;
  } catch (const std::exception&) {
    // Only a failed string allocation lands here; "no GPU" is still the answer.
    return Failure{std::make_error_code(std::errc::no_such_device), {}};
  }
}

Expected<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  try {
    if (auto usable = check_options(options); !usable) return usable.error();
    const Expected<std::vector<int>> ordinals = choose_devices(options.devices);
    if (!ordinals) return ordinals.error();
    auto backend = std::make_unique<CudaBackend>(options);
    // init's self-test is a run(), so set-up speaks run()'s BackendStatus until here.
    if (const BackendStatus status = backend->init(*ordinals); !status.ok) {
      return make_failure(std::errc::io_error, status.message);
    }
    return std::unique_ptr<Backend>(std::move(backend));
  } catch (const std::exception& e) {
    return make_failure(std::errc::io_error, std::string("cuda backend: ") + e.what());
  }
}

}  // namespace batchd
