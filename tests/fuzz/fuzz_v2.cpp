// libFuzzer target over batchd-http's /v2 inference requests (V2Api::route), JSON tensors and the
// binary tensor data extension. Checks what must hold for any body: an error is the protocol's
// {"error": "..."} with a status the routes use; an accepted inference holds as many valid strings
// as its shape says, each the JSON's or framed in the body where the body frames it; and the
// answer built from those strings gives them back, in JSON or in binary framing.
//
// Input layout: byte 0's bits pick the framing (0-1), binary output where the header is generated
// (2), tight limits (3), headers and route (4-7); bytes 1-2 are numbers for those; the rest is
// the body. Built by run-fuzz.sh like fuzz_http.
#include <simdjson.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/v2_api.hpp"
#include "oip/bytes_tensor.hpp"
#include "tests/http/fake_api_context.hpp"

using namespace batchd;
using namespace batchd::http;

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_v2 invariant broken: %s\n", what);
    std::abort();
  }
}

enum class Framing : std::uint8_t {
  kJsonOnly,          // no Inference-Header-Content-Length
  kClaimedLength,     // its value is bytes 1-2, whatever the body holds
  kRealLength,        // the body up to its first NUL is the JSON, after it (NUL dropped) the binary
  kGeneratedHeader,   // a valid JSON header over the fuzzed binary part, so framing faults get reached
};

// One V2Api per set of limits, kept across inputs as the event loop keeps its own (its parser's
// buffers are reused between requests).
struct Setup {
  Setup(std::size_t max_elements, std::uint32_t max_input) : limits(make_limits(max_elements)), api(limits, context) {
    context.max_input = max_input;
  }
  static V2Limits make_limits(std::size_t max_elements) {
    V2Limits limits;
    limits.api.max_body_bytes = 8192;  // past libFuzzer's -max_len
    limits.max_elements = max_elements;
    limits.model_control = true;
    return limits;
  }
  V2Limits limits;
  testing::FakeContext context;
  V2Api api;
};

struct Built {
  Request request;
  std::size_t json_bytes = 0;  // the body's JSON header: all of it without the length header
};

std::uint32_t le32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return std::uint32_t{u[0]} | (std::uint32_t{u[1]} << 8) | (std::uint32_t{u[2]} << 16) |
         (std::uint32_t{u[3]} << 24);
}

// A header the shape of Triton's clients' for the fuzzed binary part: byte 1 sets N and the rank,
// byte 2 whether binary_data_size is the part's true size or off by up to 64 (or a 4 GiB claim).
std::string generated_header(std::uint8_t mode, std::uint8_t n, std::uint8_t size_pick, std::size_t binary_bytes) {
  std::uint64_t claim = binary_bytes;
  if (size_pick == 0xFF) claim = 1ULL << 32;
  else if (size_pick >= 0x80) claim = binary_bytes + (size_pick & 0x7F) - std::min<std::size_t>(64, binary_bytes);
  const std::string shape = "[" + std::to_string(n & 7) + ((n & 0x80) != 0 ? ",1]" : "]");
  return R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":)" + shape + R"(,"parameters":{"binary_data_size":)" +
         std::to_string(claim) + R"(}}],"parameters":{"binary_data_output":)" + ((mode & 4) != 0 ? "true" : "false") +
         "}}";
}

// Bits 4-7 of byte 0: X-Priority, X-Timeout-Ms, and the route (the plain one, with
// Content-Encoding, through versions/1, with a query string or as a GET).
void set_method_and_headers(const std::uint8_t* data, Request& request) {
  const std::uint8_t mode = data[0];
  const unsigned route = mode >> 6;
  static constexpr const char* kTargets[] = {"/v2/models/batchstring/infer", "/v2/models/batchstring/infer",
                                             "/v2/models/batchstring/versions/1/infer",
                                             "/v2/models/batchstring/infer?x=1"};
  request.target(kTargets[route]);
  request.method(route == 3 && (data[1] & 1) != 0 ? boost::beast::http::verb::get : boost::beast::http::verb::post);
  if (route == 1) request.set("Content-Encoding", (data[2] & 2) != 0 ? "gzip" : " Identity");
  if ((mode & 0x10) != 0) request.set("X-Priority", (data[2] & 1) != 0 ? "high" : "Low ");
  if ((mode & 0x20) != 0) request.set("X-Timeout-Ms", std::to_string(data[2]));
}

Built build_request(const std::uint8_t* data, std::size_t size) {
  const std::uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  Built built;
  built.request.version(11);
  set_method_and_headers(data, built.request);
  std::string body(rest);
  built.json_bytes = body.size();
  switch (static_cast<Framing>(mode & 3)) {
    case Framing::kJsonOnly: break;
    case Framing::kClaimedLength:
      built.json_bytes = std::min<std::size_t>(data[1] | (data[2] << 8), body.size());
      built.request.set("Inference-Header-Content-Length", std::to_string(data[1] | (data[2] << 8)));
      break;
    case Framing::kRealLength: {
      const std::size_t nul = std::min(rest.find('\0'), rest.size());
      body = std::string(rest.substr(0, nul)) + std::string(rest.substr(std::min(nul + 1, rest.size())));
      built.json_bytes = nul;
      built.request.set("Inference-Header-Content-Length", std::to_string(nul));
      break;
    }
    case Framing::kGeneratedHeader:
      body = generated_header(mode, data[1], data[2], rest.size());
      built.json_bytes = body.size();
      body.append(rest);
      built.request.set("Inference-Header-Content-Length", std::to_string(built.json_bytes));
      break;
  }
  built.request.body() = std::move(body);
  return built;
}

simdjson::dom::element parse(simdjson::dom::parser& parser, std::string_view json, const char* what) {
  simdjson::dom::element root;
  require(parser.parse(json.data(), json.size()).get(root) == simdjson::SUCCESS, what);
  return root;
}

void check_response(const Response& response) {
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parse(parser, response.body, "every response body is JSON (and UTF-8)");
  if (response.status >= 200 && response.status < 300) return;
  static constexpr unsigned kStatuses[] = {400, 404, 405, 413, 500, 503, 504};
  require(std::find(std::begin(kStatuses), std::end(kStatuses), response.status) != std::end(kStatuses),
          "an error's status is one the /v2 routes use");
  require(response.status != 405 || response.allow == "POST", "a 405 names what the route allows");
  simdjson::dom::object object;
  require(root.get_object().get(object) == simdjson::SUCCESS && object.size() == 1, "an error body is one member");
  std::string_view message;
  require(object["error"].get_string().get(message) == simdjson::SUCCESS, "that member is the string \"error\"");
}

// The strings of the JSON's "data", flat or in rows, as an independent reading of the request.
std::vector<std::string_view> json_strings(simdjson::dom::array data) {
  std::vector<std::string_view> out;
  for (simdjson::dom::element item : data) {
    std::string_view value;
    if (item.get_string().get(value) == simdjson::SUCCESS) {
      out.push_back(value);
      continue;
    }
    simdjson::dom::array row;
    require(item.get_array().get(row) == simdjson::SUCCESS, "\"data\" holds strings or rows");
    for (simdjson::dom::element inner : row) {
      require(inner.get_string().get(value) == simdjson::SUCCESS, "a row holds strings");
      out.push_back(value);
    }
  }
  return out;
}

// Where the accepted strings came from: the JSON's "data", or framed one after another in exactly
// the binary part, each view pointing at its bytes there.
void check_provenance(const Built& built, const V2Infer& infer) {
  const std::string& body = built.request.body();
  simdjson::dom::parser parser;
  const simdjson::dom::element root =
      parse(parser, std::string_view(body).substr(0, built.json_bytes), "an accepted request's JSON parses");
  simdjson::dom::array data;
  if (root["inputs"].at(0)["data"].get_array().get(data) == simdjson::SUCCESS) {
    require(json_strings(data) == infer.inputs, "JSON inputs are the strings of \"data\", in order");
    return;
  }
  const std::string_view binary = std::string_view(body).substr(built.json_bytes);
  std::size_t at = 0;
  for (const std::string_view input : infer.inputs) {
    require(binary.size() - at >= 4 && le32(binary.data() + at) == input.size(), "each string has its length prefix");
    require(input.data() == binary.data() + at + 4, "each binary input is a view of its bytes in the body");
    at += 4 + input.size();
  }
  require(at == binary.size(), "the strings use the binary part exactly");
}

// The answer's JSON header: the id echoed, the model named, the one output with the input's shape.
simdjson::dom::object check_answer_head(simdjson::dom::element root, const V2Reply& reply) {
  std::string_view text;
  if (reply.id.empty()) require(root["id"].error() == simdjson::NO_SUCH_FIELD, "no id echoed when none was sent");
  else require(root["id"].get_string().get(text) == simdjson::SUCCESS && text == reply.id, "the id is echoed");
  require(root["model_name"].get_string().get(text) == simdjson::SUCCESS && text == "batchstring", "model named");
  simdjson::dom::array outputs;
  require(root["outputs"].get_array().get(outputs) == simdjson::SUCCESS && outputs.size() == 1, "one output");
  simdjson::dom::object output;
  require(outputs.at(0).get_object().get(output) == simdjson::SUCCESS, "the output is an object");
  require(output["name"].get_string().get(text) == simdjson::SUCCESS && text == "OUTPUT", "the output is OUTPUT");
  require(output["datatype"].get_string().get(text) == simdjson::SUCCESS && text == "BYTES", "its type is BYTES");
  simdjson::dom::array dims;
  require(output["shape"].get_array().get(dims) == simdjson::SUCCESS, "the output has a shape");
  std::vector<std::int64_t> shape;
  for (simdjson::dom::element dim : dims) {
    std::int64_t value = 0;
    require(dim.get_int64().get(value) == simdjson::SUCCESS, "its dimensions are whole numbers");
    shape.push_back(value);
  }
  require(shape == reply.shape, "the output keeps the input's shape");
  return output;
}

// Answers every string with itself and reads the answer back.
void check_round_trip(const V2Infer& infer) {
  std::vector<Result> results;
  for (const std::string_view input : infer.inputs) results.push_back(Result::success(std::string(input)));
  const Response response = v2_infer_response(infer.reply, results);
  require(response.status == 200, "an answer of valid strings is a 200");
  simdjson::dom::parser parser;
  if (!infer.reply.binary) {
    require(response.inference_header_length == 0 && response.content_type == kJsonType, "a JSON answer is JSON");
    const simdjson::dom::object output =
        check_answer_head(parse(parser, response.body, "the answer is JSON"), infer.reply);
    simdjson::dom::array data;
    require(output["data"].get_array().get(data) == simdjson::SUCCESS, "a JSON answer has \"data\"");
    require(json_strings(data) == infer.inputs, "the JSON answer's data are the outputs");
    return;
  }
  const std::size_t head = response.inference_header_length;
  require(head > 0 && head <= response.body.size() && response.content_type == kOctetStreamType, "binary framing");
  const std::string_view body = response.body;
  const simdjson::dom::object output = check_answer_head(parse(parser, body.substr(0, head), "its header is JSON"),
                                                         infer.reply);
  std::uint64_t claimed = 0;
  require(output["parameters"]["binary_data_size"].get_uint64().get(claimed) == simdjson::SUCCESS &&
              claimed == body.size() - head,
          "binary_data_size is the binary part's size");
  std::vector<std::string_view> decoded;
  require(!oip::decode_bytes_elements(body.substr(head), infer.inputs.size(), decoded), "the binary part decodes");
  require(decoded == infer.inputs, "the binary answer's elements are the outputs");
}

void check_infer(const Built& built, const V2Infer& infer, const Setup& setup) {
  const std::vector<std::int64_t>& shape = infer.reply.shape;
  require(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1), "the shape is [N] or [N, 1]");
  require(shape[0] >= 0 && static_cast<std::uint64_t>(shape[0]) == infer.inputs.size(), "N strings for shape N");
  require(infer.inputs.size() <= setup.limits.max_elements, "no more strings than max_batch_size");
  require(infer.timeout.count() >= 1 && infer.timeout <= setup.limits.api.max_timeout, "a timeout in range");
  require(infer.reply.id.size() <= 256 && simdjson::validate_utf8(infer.reply.id.data(), infer.reply.id.size()),
          "the echoed id is short and UTF-8");
  for (const std::string_view input : infer.inputs) {
    require(simdjson::validate_utf8(input.data(), input.size()), "every string is UTF-8");
    require(input.size() <= setup.context.max_input, "no string over the daemon's max input bytes");
  }
  check_provenance(built, infer);
  check_round_trip(infer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  static Setup roomy(1024, 1024);
  static Setup tight(4, 8);
  Setup& setup = (data[0] & 8) != 0 ? tight : roomy;
  const Built built = build_request(data, size);
  V2Action action = setup.api.route(built.request);
  if (const auto* response = std::get_if<Response>(&action)) {
    check_response(*response);
  } else if (const auto* control = std::get_if<V2ModelControl>(&action)) {
    // A name is one path segment, never empty.
    if (control->model.empty() || control->model.find('/') != std::string::npos) __builtin_trap();
  } else {
    check_infer(built, std::get<V2Infer>(action), setup);
  }
  return 0;
}
