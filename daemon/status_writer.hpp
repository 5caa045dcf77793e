// The status file the daemon publishes (shm/status_page.hpp): a sealed memfd that clients map
// read-only (batchctl, the front-ends' /metrics, readiness). Made at start-up; written by its
// publisher thread every few tens of milliseconds, by the default model's watchdog when it sees a
// device change (publish_locked), and, for who the models are and their policies, by the drain
// thread, which owns the models' limits.
#pragma once

#include <boost/interprocess/mapped_region.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/dead_letter_log.hpp"
#include "daemon/model_pipeline.hpp"
#include "daemon/response_caches.hpp"
#include "daemon/stats.hpp"
#include "shm/status_page.hpp"
#include "shm/fd.hpp"

namespace batchd {

class StatusWriter {
 public:
  // What it shows: the daemon's counters and its models, by id. `models_mu` is held by the drain
  // thread while it makes or releases a model's router or backend; publish() holds it while it
  // reads them.
  StatusWriter(const DaemonStats& stats, const std::vector<std::unique_ptr<ModelPipeline>>& models,
               std::mutex& models_mu) noexcept;
  ~StatusWriter();
  StatusWriter(const StatusWriter&) = delete;
  StatusWriter& operator=(const StatusWriter&) = delete;

  // Start-up: the file, sealed, with each page laid out. Throws what the operator must see.
  void create(const DeadLetterLog& dead_letters, const ResponseCaches& caches);
  // publish() every `period` on a thread of its own, until stop().
  void start_publishing(std::chrono::milliseconds period);
  void stop() noexcept;

  // Everything that changes under load; the second with models_mu held.
  void publish() noexcept;
  void publish_locked() noexcept;
  // Who each model is (start-up, a model a reload adds or declares again): the drain thread.
  void publish_model_names() noexcept;
  void publish_model_name(std::size_t id) noexcept;
  // A model's batching policy, and the default model's onto the page too: the drain thread.
  void publish_policy(const ModelPipeline& model) noexcept;

  // After create().
  [[nodiscard]] shm::DaemonStatusPage& page() noexcept { return *page_; }
  [[nodiscard]] const shm::DaemonStatusPage& page() const noexcept { return *page_; }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }

 private:
  void publish_latency() noexcept;
  void publish_workers() noexcept;
  void publish_models() noexcept;
  void publish_caches() noexcept;
  void publish_until_stopped() noexcept;

  const DaemonStats& stats_;
  const std::vector<std::unique_ptr<ModelPipeline>>& models_;
  std::mutex& models_mu_;
  const DeadLetterLog* dead_letters_ = nullptr;
  const ResponseCaches* caches_ = nullptr;

  shm::UniqueFd fd_;
  boost::interprocess::mapped_region map_;
  shm::DaemonStatusPage* page_ = nullptr;
  shm::StatusLatency* latency_ = nullptr;                   // after the page
  shm::StatusWorkers* workers_ = nullptr;                   // after the histograms
  shm::StatusModels* models_page_ = nullptr;                // after the workers
  shm::StatusModelBatches* model_batches_ = nullptr;        // after the models
  shm::StatusModelDevices* model_devices_ = nullptr;        // after their batches
  shm::StatusModelPolicies* model_policies_ = nullptr;      // after their devices
  shm::StatusModelLatency* model_latency_ = nullptr;        // after their policies
  shm::StatusCache* cache_ = nullptr;                       // after their queue times

  std::thread publisher_;
  std::mutex publisher_mu_;
  std::condition_variable publisher_cv_;
  bool publisher_stop_ = false;  // guarded by publisher_mu_
  std::chrono::milliseconds period_{50};
};

}  // namespace batchd
