// read_dead_letters: the dead-letter query on the daemon's control socket (shm::kHelloDeadLetters).
// The daemon answers with a sealed memfd holding one JSON document, parsed here.
#include <unistd.h>

#include <fmt/format.h>
#include <simdjson.h>

#include <cerrno>
#include <cstring>

#include "client_lib/attach.hpp"
#include "client_lib/client.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {
namespace {

// More than the daemon's in-memory records can take: anything bigger is not a daemon's answer.
constexpr std::uint64_t kMaxDocumentBytes = 256ULL << 20;

Error protocol_error(std::string message) { return {ErrorCode::kProtocolError, std::move(message)}; }

std::optional<std::string> read_all(int fd, Error& err) {
  const Expected<std::uint64_t> size = shm::file_bytes(fd);
  if (!size || *size > kMaxDocumentBytes) {
    err = protocol_error(size ? fmt::format("the daemon's dead-letter answer is {} bytes", *size)
                              : size.error().message);
    return std::nullopt;
  }
  std::string text(*size, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = protocol_error(fmt::format("cannot read the daemon's dead-letter answer: {}",
                                       n == 0 ? "it ended early" : std::strerror(errno)));
      return std::nullopt;
    }
    done += static_cast<std::size_t>(n);
  }
  return text;
}

// One record; false if a field the daemon always writes is missing or of the wrong type.
bool parse_entry(simdjson::dom::object record, DeadLetter& out) {
  std::string_view text;
  std::uint64_t number = 0;
  if (record["time"].get_string().get(text) != simdjson::SUCCESS) return false;
  out.time = text;
  if (record["model"].get_string().get(text) == simdjson::SUCCESS) out.model = text;
  if (record["reason"].get_string().get(text) != simdjson::SUCCESS) return false;
  out.reason = text;
  if (record["input_sha256"].get_string().get(text) != simdjson::SUCCESS) return false;
  out.input_sha256 = text;
  if (record["input_bytes"].get_uint64().get(out.input_bytes) != simdjson::SUCCESS) return false;
  if (record["error"].get_string().get(text) != simdjson::SUCCESS) return false;
  out.error = text;
  if (record["device"].get_uint64().get(number) != simdjson::SUCCESS) return false;
  out.device = static_cast<std::uint32_t>(number);
  simdjson::dom::array tried;
  if (record["devices_tried"].get_array().get(tried) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element device : tried) {
    if (device.get_uint64().get(number) != simdjson::SUCCESS) return false;
    out.devices_tried.push_back(static_cast<std::uint32_t>(number));
  }
  if (record["client_id"].get_uint64().get(out.client_id) != simdjson::SUCCESS) return false;
  if (record["pid"].get_int64().get(out.pid) != simdjson::SUCCESS) return false;
  if (record["uid"].get_int64().get(out.uid) != simdjson::SUCCESS) return false;
  if (record["request_id"].get_string().get(text) == simdjson::SUCCESS) out.request_id = text;
  out.json = simdjson::minify(record);
  return true;
}

std::optional<DeadLetters> parse_document(const std::string& text, Error& err) {
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (const auto parsed = parser.parse(text).get(root); parsed != simdjson::SUCCESS) {
    err = protocol_error(std::string("the daemon's dead-letter answer is not a JSON object: ") +
                         simdjson::error_message(parsed));
    return std::nullopt;
  }
  DeadLetters out;
  simdjson::dom::array entries;
  if (root["dead_letters"].get_uint64().get(out.recorded) != simdjson::SUCCESS ||
      root["dropped"].get_uint64().get(out.dropped) != simdjson::SUCCESS ||
      root["entries"].get_array().get(entries) != simdjson::SUCCESS) {
    err = protocol_error("the daemon's dead-letter answer lacks its counts or entries");
    return std::nullopt;
  }
  for (simdjson::dom::element entry : entries) {
    simdjson::dom::object record;
    DeadLetter letter;
    if (entry.get_object().get(record) != simdjson::SUCCESS || !parse_entry(record, letter)) {
      err = protocol_error("the daemon's dead-letter answer holds a malformed record");
      return std::nullopt;
    }
    out.entries.push_back(std::move(letter));
  }
  return out;
}

}  // namespace

std::optional<DeadLetters> read_dead_letters(const ClientOptions& options, Error* error) {
  Error local;
  Error& err = error != nullptr ? *error : local;
  const std::string path = options.socket_path.empty() ? client_default_socket_path() : options.socket_path;
  client_detail::Attempt<Attachment> answer =
      attach_to_daemon(path, options.connect_timeout, shm::kHelloDeadLetters);
  if (!answer) {
    err = answer.error();
    return std::nullopt;
  }
  const std::optional<std::string> text = read_all(answer->fds.front().get(), err);
  if (!text) return std::nullopt;
  return parse_document(*text, err);
}

}  // namespace batchd
