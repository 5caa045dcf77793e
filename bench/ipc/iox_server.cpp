// ipc-iox-server: the iceoryx reference for the IPC benchmark (iceoryx 2.0 request/response,
// from Debian's packages; iox-roudi must run). It answers each request with the lowercase hex
// SHA-256 of its bytes, the same work as batchd's cpu backend at cost 1, waiting for requests on
// a WaitSet, or spinning on them with --busy-poll.
#include <CLI/CLI.hpp>
#include <cstring>

#include "bench/ipc/iox_types.hpp"
#include "iceoryx_hoofs/posix_wrapper/signal_watcher.hpp"
#include "iceoryx_posh/popo/server.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"

namespace {

using IoxServer = iox::popo::Server<batchd::bench::IoxRequest, batchd::bench::IoxResponse>;

// Answers every request waiting; the request's length is checked, as a server must.
void answer_waiting(IoxServer& server) {
  while (!server.take().and_then([&](const auto& request) {
    server.loan(request).and_then([&](auto& response) {
      const std::uint32_t length = std::min<std::uint32_t>(request->length, sizeof(request->bytes));
      batchd::reference_batchstring(std::string_view(request->bytes, length), 1, response->answer);
      // A failed send shows at the client as a missing answer.
      static_cast<void>(response.send());
    });
  }).has_error()) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"iceoryx request/response server for bench/ipc"};
  bool busy_poll = false;
  app.add_flag("--busy-poll", busy_poll, "spin on the request queue instead of waiting");
  CLI11_PARSE(app, argc, argv);

  iox::runtime::PoshRuntime::initRuntime("batchd-ipc-iox-server");
  IoxServer server({iox::capro::IdString_t(batchd::bench::kIoxService),
                    iox::capro::IdString_t(batchd::bench::kIoxInstance),
                    iox::capro::IdString_t(batchd::bench::kIoxEvent)});
  iox::popo::WaitSet<> waitset;
  if (!busy_poll) {
    waitset.attachState(server, iox::popo::ServerState::HAS_REQUEST).or_else([](auto) {
      std::fprintf(stderr, "ipc-iox-server: cannot attach to a WaitSet\n");
      std::exit(1);
    });
  }
  while (!iox::posix::hasTerminationRequested()) {
    answer_waiting(server);
    if (!busy_poll) waitset.timedWait(iox::units::Duration::fromMilliseconds(200));
  }
  return 0;
}
