// The Open Inference Protocol's HTTP routes alone (V2Api, the BYTES framing, the answers; no
// sockets, no daemon): routing, JSON and binary tensors from a hostile peer, and the responses.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/v2_api.hpp"
#include "oip/bytes_tensor.hpp"
#include "tests/http/fake_api_context.hpp"

using namespace batchd;
using namespace batchd::http;
using namespace std::chrono_literals;
using verb = boost::beast::http::verb;
using Headers = std::vector<std::pair<std::string, std::string>>;

namespace {

constexpr std::size_t kMaxElements = 8;
const std::string kInfer = "/v2/models/batchstring/infer";

// A parsed JSON body (its own parser, so it outlives the next route()); lookups by JSON pointer
// answer a sentinel when the field is missing or of another type.
struct Json {
  explicit Json(std::string_view text) { ok = parser.parse(text.data(), text.size()).get(root) == simdjson::SUCCESS; }
  std::string str(std::string_view pointer) {
    std::string_view value;
    return root.at_pointer(pointer).get_string().get(value) == simdjson::SUCCESS ? std::string(value) : "<missing>";
  }
  std::int64_t num(std::string_view pointer) {
    std::int64_t value = -1;
    return root.at_pointer(pointer).get_int64().get(value) == simdjson::SUCCESS ? value : -1;
  }
  bool has(std::string_view pointer) { return root.at_pointer(pointer).error() == simdjson::SUCCESS; }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  bool ok = false;
};

// The message of a {"error": "..."} body, and nothing else in it; a marker when the body has
// another shape.
std::string error_message(const Response& response) {
  Json json(response.body);
  simdjson::dom::object object;
  std::string_view message;
  if (!json.ok || json.root.get_object().get(object) != simdjson::SUCCESS || object.size() != 1 ||
      object.at_key("error").get_string().get(message) != simdjson::SUCCESS) {
    return "<not an error body: " + response.body.substr(0, 200) + ">";
  }
  return std::string(message);
}

void check_error(const Response& response, unsigned status, std::string_view needle) {
  CHECK(response.status == status);
  CHECK(response.content_type == kJsonType);
  const std::string message = error_message(response);
  CAPTURE(message);
  CHECK(message.find(needle) != std::string::npos);
}

std::string le32(std::uint32_t n) {
  return {static_cast<char>(n & 0xFF), static_cast<char>((n >> 8) & 0xFF), static_cast<char>((n >> 16) & 0xFF),
          static_cast<char>(n >> 24)};
}

std::string framed(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) oip::append_bytes_element(out, e);
  return out;
}

std::string json_infer(std::string_view shape, std::string_view data, std::string_view extra = "") {
  return R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":)" + std::string(shape) + R"(,"data":)" +
         std::string(data) + "}]" + std::string(extra) + "}";
}

std::string binary_header(std::string_view shape, std::uint64_t binary_size) {
  return R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":)" + std::string(shape) +
         R"(,"parameters":{"binary_data_size":)" + std::to_string(binary_size) + "}}]}";
}

// One V2Api over a fake context; each request is kept alive as long as the fixture, so the views
// a V2Infer holds into its body stay valid.
struct V2 {
  explicit V2(bool model_control = false, tracing::TraceSettings* trace_settings = nullptr)
      : api(V2Limits{ApiLimits{}, kMaxElements, model_control}, context, trace_settings) {}

  V2Action route(verb method, std::string_view target, std::string body = {}, const Headers& headers = {}) {
    Request& request = requests.emplace_back(method, target, 11);
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = std::move(body);
    request.prepare_payload();
    return api.route(request);
  }
  Response answer(verb method, std::string_view target, std::string body = {}, const Headers& headers = {}) {
    V2Action action = route(method, target, std::move(body), headers);
    REQUIRE(std::holds_alternative<Response>(action));
    return std::get<Response>(std::move(action));
  }
  V2Infer infer(std::string body, const Headers& headers = {}, std::string_view target = kInfer) {
    V2Action action = route(verb::post, target, std::move(body), headers);
    if (const Response* refused = std::get_if<Response>(&action)) FAIL("refused: " << refused->body);
    return std::get<V2Infer>(std::move(action));
  }
  // Binary tensor data after a JSON header; header_length defaults to the header's true size.
  Response binary(const std::string& json, const std::string& data, std::optional<std::string> header_length = {}) {
    return answer(verb::post, kInfer, json + data,
                  {{"Inference-Header-Content-Length", header_length.value_or(std::to_string(json.size()))}});
  }

  testing::FakeContext context;
  V2Api api;
  std::deque<Request> requests;  // a deque: growing it moves no request, so no body
};

std::vector<std::string> strings(const std::vector<std::string_view>& views) { return {views.begin(), views.end()}; }

std::vector<Result> successes(const std::vector<std::string>& outputs) {
  std::vector<Result> results;
  for (const std::string& output : outputs) results.emplace_back(Result::success(output));
  return results;
}

}  // namespace

TEST_CASE("v2 routing: which paths are the protocol's") {
  CHECK(is_v2_target("/v2"));
  CHECK(is_v2_target("/v2/health/live"));
  CHECK(is_v2_target("/v2?verbose=1"));
  CHECK_FALSE(is_v2_target("/v2x"));
  CHECK_FALSE(is_v2_target("/v1/batchstring"));
}

TEST_CASE("v2 routing: health, server and model metadata, configuration") {
  V2 v2;
  Json server(v2.answer(verb::get, "/v2").body);
  CHECK(server.str("/name") == "batchd");
  CHECK(server.str("/extensions/0") == "binary_tensor_data");
  CHECK(v2.answer(verb::get, "/v2/health/live").body == "{}");
  CHECK(v2.answer(verb::head, "/v2/health/live?x=1").status == 200);
  for (const char* target :
       {"/v2/health/ready", "/v2/models/batchstring/ready", "/v2/models/batchstring/versions/1/ready"}) {
    CAPTURE(target);
    v2.context.ready = true;
    const Response ready = v2.answer(verb::get, target);
    CHECK(ready.status == 200);
    CHECK(ready.body == "{}");
    v2.context.ready = false;
    const Response busy = v2.answer(verb::get, target);
    check_error(busy, 503, "busy");
    CHECK(busy.retry_after_s == 1);
  }
  for (const char* target : {"/v2/models/batchstring", "/v2/models/batchstring/versions/1"}) {
    Json model(v2.answer(verb::get, target).body);
    CHECK(model.str("/name") == "batchstring");
    CHECK(model.str("/versions/0") == "1");
    CHECK(model.str("/inputs/0/name") == "INPUT");
    CHECK(model.str("/outputs/0/datatype") == "BYTES");
  }
  Json config(v2.answer(verb::get, "/v2/models/batchstring/config").body);
  CHECK(config.num("/max_batch_size") == static_cast<std::int64_t>(kMaxElements));
  CHECK(config.str("/input/0/data_type") == "TYPE_STRING");
}

TEST_CASE("v2 routing: statistics are Triton's shape with the context's counts") {
  V2 v2;
  v2.context.statistics = InferStatistics{5, 700, 2, 30, 11, 1234};
  // The daemon's: 20 requests of the model answered, 4,000 ns queued and 10,000 ns computed in all.
  v2.context.times = oip::ModelTimes{20, 4, 4000, 10000};
  for (const char* target :
       {"/v2/models/stats", "/v2/models/batchstring/stats", "/v2/models/batchstring/versions/1/stats"}) {
    CAPTURE(target);
    const Response response = v2.answer(verb::get, target);
    CHECK(response.status == 200);
    Json stats(response.body);
    REQUIRE(stats.ok);
    CHECK(stats.str("/model_stats/0/name") == "batchstring");
    CHECK(stats.str("/model_stats/0/version") == "1");
    CHECK(stats.has("/model_stats/0/batch_stats"));
    const std::pair<const char*, std::int64_t> counts[] = {
        {"last_inference", 1234}, {"inference_count", 11}, {"execution_count", 5},
        {"inference_stats/success/count", 5}, {"inference_stats/success/ns", 700},
        {"inference_stats/fail/count", 2}, {"inference_stats/fail/ns", 30}, {"inference_stats/queue/count", 7},
        {"inference_stats/queue/ns", 7 * 200}, {"inference_stats/compute_infer/count", 5},
        {"inference_stats/compute_infer/ns", 5 * 500}, {"inference_stats/compute_input/count", 5},
        {"inference_stats/compute_output/count", 5}, {"inference_stats/compute_output/ns", 0}};
    for (const auto& [field, count] : counts) CHECK(stats.num(std::string("/model_stats/0/") + field) == count);
  }
}

TEST_CASE("v2 model control: load and unload by name when served, a clear refusal otherwise") {
  V2 off;
  check_error(off.answer(verb::post, "/v2/repository/models/langid/unload"), 403, "--model-control");
  V2 v2(true);
  for (const auto& [target, action] : {std::pair{"/v2/repository/models/langid/load", ModelAction::kLoad},
                                       std::pair{"/v2/repository/models/langid/unload", ModelAction::kUnload}}) {
    for (const std::string body : {"", "{}", R"({"parameters": {"unload_dependents": false}})"}) {
      V2Action routed = v2.route(verb::post, target, body);
      const auto* control = std::get_if<V2ModelControl>(&routed);
      REQUIRE(control != nullptr);
      CHECK(control->model == "langid");
      CHECK(control->action == action);
    }
  }
  check_error(v2.answer(verb::post, "/v2/repository/models/langid/load", R"({"parameters":{"config":"{}"}})"), 400,
              "parameter \"config\" is not taken");
  check_error(v2.answer(verb::post, "/v2/repository/models/langid/load", R"({"parameters":[]})"), 400,
              "must be a JSON object");
  check_error(v2.answer(verb::post, "/v2/repository/models/langid/load", "[1]"), 400, "must be a JSON object");
  CHECK(v2.answer(verb::get, "/v2/repository/models/langid/load").status == 405);
  CHECK(v2.answer(verb::post, "/v2/repository/models/langid/reload").status == 404);
  CHECK(v2.answer(verb::post, "/v2/repository/models//load").status == 404);
  CHECK(v2.answer(verb::post, "/v2/repository/models/langid").status == 404);
}

TEST_CASE("v2 repository index and model readiness: each model with its state, a workers model unavailable") {
  V2 v2;
  oip::ModelDescription idle = oip::served_model("langid", "2");
  idle.unavailable = "no worker serving model langid is attached";
  v2.context.catalog = oip::ModelCatalog({oip::default_model(), idle});
  CHECK(v2.answer(verb::get, "/v2/models/batchstring/ready").status == 200);
  check_error(v2.answer(verb::get, "/v2/models/langid/ready"), 503, "no worker serving model langid is attached");

  for (const std::string body : {"", "{}", R"({"ready": false})"}) {
    const Response index = v2.answer(verb::post, "/v2/repository/index", body);
    CHECK(index.status == 200);
    CHECK(index.body == R"([{"name":"batchstring","version":"1","state":"READY","reason":""},)"
                        R"({"name":"langid","version":"2","state":"UNAVAILABLE",)"
                        R"("reason":"no worker serving model langid is attached"}])");
  }
  CHECK(v2.answer(verb::post, "/v2/repository/index", R"({"ready": true})").body ==
        R"([{"name":"batchstring","version":"1","state":"READY","reason":""}])");
  check_error(v2.answer(verb::post, "/v2/repository/index", "[1]"), 400, "must be a JSON object");
  check_error(v2.answer(verb::post, "/v2/repository/index", R"({"ready": "yes"})"), 400, "must be true or false");
  CHECK(v2.answer(verb::get, "/v2/repository/index").status == 405);

  // The server not ready: every model is unavailable for the server's reason.
  v2.context.ready = false;
  CHECK(v2.answer(verb::post, "/v2/repository/index").body ==
        R"([{"name":"batchstring","version":"1","state":"UNAVAILABLE","reason":"busy"},)"
        R"({"name":"langid","version":"2","state":"UNAVAILABLE","reason":"busy"}])");
  check_error(v2.answer(verb::get, "/v2/models/batchstring/ready"), 503, "busy");
}

TEST_CASE("v2 routing: every model of the catalog by name, each with its own tensors") {
  V2 v2;
  v2.context.catalog = oip::ModelCatalog({oip::default_model(), {"langid", "2", "TEXT", "LANGUAGE", 1}});
  Json model(v2.answer(verb::get, "/v2/models/langid").body);
  CHECK(model.str("/name") == "langid");
  CHECK(model.str("/versions/0") == "2");
  CHECK(model.str("/inputs/0/name") == "TEXT");
  CHECK(model.str("/outputs/0/name") == "LANGUAGE");
  Json config(v2.answer(verb::get, "/v2/models/langid/versions/2/config").body);
  CHECK(config.str("/name") == "langid");
  CHECK(config.str("/input/0/name") == "TEXT");
  CHECK(v2.answer(verb::get, "/v2/models/langid/ready").status == 200);

  const std::string text_input = R"({"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1],"data":["bonjour"]}]})";
  V2Infer infer = v2.infer(text_input, {}, "/v2/models/langid/infer");
  CHECK(strings(infer.inputs) == std::vector<std::string>{"bonjour"});
  REQUIRE(infer.reply.model != nullptr);
  std::vector<Result> results = successes({"fr"});
  Json answer(v2_infer_response(infer.reply, results).body);
  CHECK(answer.str("/model_name") == "langid");
  CHECK(answer.str("/model_version") == "2");
  CHECK(answer.str("/outputs/0/name") == "LANGUAGE");
  CHECK(answer.str("/outputs/0/data/0") == "fr");

  // Another model's tensor names are wrong here, and the other way round.
  check_error(v2.answer(verb::post, "/v2/models/langid/infer", json_infer("[1]", R"(["x"])")), 400,
              "unexpected inference input 'INPUT' for model 'langid': it takes 'TEXT'");
  check_error(v2.answer(verb::post, kInfer, text_input), 400, "it takes 'INPUT'");
  check_error(v2.answer(verb::post, "/v2/models/langid/infer",
                        R"({"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1],"data":["x"]}],)"
                        R"("outputs":[{"name":"OUTPUT"}]})"),
              400, "it has 'LANGUAGE'");
  check_error(v2.answer(verb::get, "/v2/models/embedder"), 404,
              "unknown model 'embedder': this server serves 'batchstring', 'langid'");
  check_error(v2.answer(verb::get, "/v2/models/langid/versions/1"), 404, "it has version 2");

  Json all(v2.answer(verb::get, "/v2/models/stats").body);
  CHECK(all.str("/model_stats/0/name") == "batchstring");
  CHECK(all.str("/model_stats/1/name") == "langid");
  CHECK(all.str("/model_stats/1/version") == "2");
  // Each model's own counts.
  v2.context.statistics = InferStatistics{5, 700, 0, 0, 11, 1234};
  v2.context.other_statistics = InferStatistics{3, 300, 1, 10, 6, 99};
  Json counted(v2.answer(verb::get, "/v2/models/stats").body);
  CHECK(counted.num("/model_stats/0/inference_count") == 11);
  CHECK(counted.num("/model_stats/1/inference_count") == 6);
  CHECK(counted.num("/model_stats/1/inference_stats/fail/count") == 1);
  Json one(v2.answer(verb::get, "/v2/models/langid/stats").body);
  CHECK(one.str("/model_stats/0/name") == "langid");
  CHECK(one.num("/model_stats/0/execution_count") == 3);
  CHECK_FALSE(one.has("/model_stats/1"));
}

TEST_CASE("v2 trace extension: settings read and changed, globally and per model, as Triton's clients send them") {
  tracing::TraceSettings settings(true, 1000, -1);
  V2 v2(false, &settings);
  v2.context.catalog = oip::ModelCatalog({oip::default_model(), {"langid", "2", "TEXT", "LANGUAGE", 1}});
  CHECK(Json(v2.answer(verb::get, "/v2").body).str("/extensions/4") == "trace");
  Json global(v2.answer(verb::get, "/v2/trace/setting").body);
  CHECK(global.str("/trace_level/0") == "TIMESTAMPS");
  CHECK(global.str("/trace_rate") == "1000");
  CHECK(global.str("/trace_count") == "-1");
  CHECK(global.str("/trace_mode") == "opentelemetry");
  // tritonclient's update_trace_settings: strings, a list for the level, null to clear.
  Json changed(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_rate":"1","trace_count":3})").body);
  CHECK(changed.str("/trace_rate") == "1");
  CHECK(changed.str("/trace_count") == "3");
  Json model(v2.answer(verb::post, "/v2/models/langid/trace/setting", R"({"trace_level":["OFF"]})").body);
  CHECK(model.str("/trace_level/0") == "OFF");
  CHECK(model.str("/trace_rate") == "1");  // the global one, followed
  CHECK(Json(v2.answer(verb::get, "/v2/models/batchstring/trace/setting").body).str("/trace_level/0") == "TIMESTAMPS");
  CHECK_FALSE(settings.decide("langid", true));
  CHECK(settings.decide("batchstring", false));
  CHECK(Json(v2.answer(verb::post, "/v2/models/langid/trace/setting", "").body).str("/trace_level/0") == "TIMESTAMPS");
  CHECK(Json(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_rate":null})").body).str("/trace_rate") == "1000");

  check_error(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_rate":"fast"})"), 400,
              "trace_rate must be an integer of at least 0");
  check_error(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_rate":1.5})"), 400,
              "must be a string, a list of strings or null");
  check_error(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_level":["OFF",2]})"), 400,
              "must be a string, a list of strings or null");
  check_error(v2.answer(verb::post, "/v2/trace/setting", R"({"trace_file":"/tmp/t.json"})"), 400, "no trace file");
  check_error(v2.answer(verb::post, "/v2/trace/setting", "[1]"), 400, "must be a JSON object");
  check_error(v2.answer(verb::post, "/v2/trace/setting", "{"), 400, "must be a JSON object");
  check_error(v2.answer(verb::get, "/v2/models/embedder/trace/setting"), 404, "unknown model 'embedder'");
  const Response wrong = v2.answer(verb::put, "/v2/trace/setting");
  check_error(wrong, 405, "GET, HEAD, POST");
  CHECK(wrong.allow == "GET, HEAD, POST");
  CHECK(Json(v2.answer(verb::get, "/v2/trace/setting").body).str("/trace_rate") == "1000");  // none applied

  V2 off;  // a process without an exporter: reads say OFF, changes are refused saying how to trace
  CHECK(Json(off.answer(verb::get, "/v2/trace/setting").body).str("/trace_level/0") == "OFF");
  check_error(off.answer(verb::post, "/v2/trace/setting", R"({"trace_rate":"1"})"), 403, "--trace-endpoint");
}

TEST_CASE("v2 routing: unknown resources are 404, wrong methods 405 with Allow") {
  V2 v2;
  struct Case {
    verb method;
    const char* target;
    unsigned status;
    const char* needle;
    const char* allow;
  };
  const Case cases[] = {
      {verb::get, "/v2/models/other", 404, "unknown model 'other'", ""},
      {verb::post, "/v2/models/other/infer", 404, "unknown model 'other'", ""},
      {verb::get, "/v2/models/batchstring/versions/2", 404, "unknown version '2'", ""},
      {verb::post, "/v2/models/batchstring/versions/2/infer", 404, "unknown version '2'", ""},
      {verb::get, "/v2/models/batchstring/versions/", 404, "no such resource", ""},
      {verb::get, "/v2/models/batchstring/nope", 404, "no such resource: /v2/models/batchstring/nope", ""},
      {verb::get, "/v2/models/batchstring/ready/x", 404, "no such resource", ""},
      {verb::get, "/v2/nope", 404, "no such resource: /v2/nope", ""},
      {verb::get, "/v2/models/", 404, "unknown model ''", ""},
      {verb::post, "/v2", 405, "allows only GET, HEAD", "GET, HEAD"},
      {verb::post, "/v2/health/ready", 405, "allows only GET, HEAD", "GET, HEAD"},
      {verb::post, "/v2/models/stats", 405, "allows only GET, HEAD", "GET, HEAD"},
      {verb::delete_, "/v2/models/batchstring/config", 405, "allows only GET, HEAD", "GET, HEAD"},
      {verb::get, "/v2/models/batchstring/infer", 405, "allows only POST", "POST"},
      {verb::put, "/v2/models/batchstring/versions/1/infer", 405, "allows only POST", "POST"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.target);
    const Response response = v2.answer(c.method, c.target);
    check_error(response, c.status, c.needle);
    CHECK(response.allow == std::string_view(c.allow));
  }
}

TEST_CASE("v2 JSON infer: shapes, rows of one, id, timeout and priority") {
  V2 v2;
  for (const char* target : {"/v2/models/batchstring/infer", "/v2/models/batchstring/versions/1/infer"}) {
    const V2Infer flat = v2.infer(json_infer("[3]", R"(["a","b","c"])"), {}, target);
    CHECK(strings(flat.inputs) == std::vector<std::string>{"a", "b", "c"});
    CHECK(flat.reply.shape == std::vector<std::int64_t>{3});
    CHECK(flat.reply.id.empty());
    CHECK_FALSE(flat.reply.binary);
    CHECK(flat.timeout == ApiLimits{}.default_timeout);
    CHECK(flat.priority == Priority::kNormal);
  }
  const V2Infer column = v2.infer(json_infer("[2,1]", R"(["x","y"])"));
  CHECK(strings(column.inputs) == std::vector<std::string>{"x", "y"});
  CHECK(column.reply.shape == std::vector<std::int64_t>{2, 1});
  const V2Infer rows = v2.infer(json_infer("[2,1]", R"([["a\tb"],["\u00e9"]])", R"(,"id":"req-7")"));
  CHECK(strings(rows.inputs) == std::vector<std::string>{"a\tb", "\xC3\xA9"});
  CHECK(rows.reply.id == "req-7");
  CHECK(v2.infer(json_infer("[0]", "[]")).inputs.empty());

  auto timeout_of = [&](std::string_view us, const Headers& headers = {}) {
    return v2.infer(json_infer("[1]", R"(["t"])", R"(,"parameters":{"timeout":)" + std::string(us) + "}"), headers)
        .timeout;
  };
  CHECK(timeout_of("1000") == 1ms);
  CHECK(timeout_of("1001") == 2ms);
  CHECK(timeout_of("1") == 1ms);
  CHECK(timeout_of("2500000", {{"X-Timeout-Ms", "10"}}) == 2500ms);  // the parameter replaces the header
  CHECK(timeout_of("999999999999") == ApiLimits{}.max_timeout);
  CHECK(timeout_of("18446744073709551615") == ApiLimits{}.max_timeout);  // no wrap to 0 when rounding up
  CHECK(v2.infer(json_infer("[1]", R"(["t"])"), {{"X-Timeout-Ms", "250"}}).timeout == 250ms);
  CHECK(v2.infer(json_infer("[1]", R"(["t"])"), {{"X-Timeout-Ms", "99999999"}}).timeout == ApiLimits{}.max_timeout);
  CHECK(v2.infer(json_infer("[1]", R"(["p"])"), {{"X-Priority", "high"}}).priority == Priority::kHigh);
  CHECK(v2.infer(json_infer("[1]", R"(["p"])"), {{"X-Priority", "low"}}).priority == Priority::kLow);
  CHECK(v2.infer(json_infer("[1]", R"(["o"])", R"(,"parameters":{"binary_data_output":true})")).reply.binary);
  CHECK(v2.infer(json_infer("[1]", R"(["o"])", R"(,"outputs":[{"name":"OUTPUT","parameters":{"binary_data":true}}])"))
            .reply.binary);
}

TEST_CASE("v2 JSON infer: a long id is cut at a character boundary, so the answer stays UTF-8") {
  V2 v2;
  std::string id = "a";
  for (int i = 0; i < 200; ++i) id += "\xC3\xA9";
  const V2Infer infer = v2.infer(json_infer("[1]", R"(["s"])", R"(,"id":")" + id + "\""));
  CHECK(infer.reply.id.size() <= 256);
  CHECK(infer.reply.id.size() >= 250);
  CHECK(simdjson::validate_utf8(infer.reply.id.data(), infer.reply.id.size()));
  std::vector<Result> results = successes({"out"});
  const Response response = v2_infer_response(infer.reply, results);
  CHECK(Json(response.body).ok);
}

TEST_CASE("v2 JSON infer: each malformed request is a 400 naming the problem") {
  V2 v2;
  struct Case {
    const char* what;
    std::string body;
    const char* needle;
    Headers headers = {};
  };
  const std::string ok_input = R"({"name":"INPUT","datatype":"BYTES","shape":[1],"data":["a"]})";
  const std::string nine = R"(["1","2","3","4","5","6","7","8","9"])";
  const Case cases[] = {
      {"not JSON", "{nope", "not valid JSON"},
      {"not an object", "[1]", "must be a JSON object"},
      {"no inputs", R"({"id":"x"})", R"(needs "inputs")"},
      {"two inputs", R"({"inputs":[)" + ok_input + "," + ok_input + "]}", "takes 1 input, 'INPUT'; the request has 2"},
      {"input not an object", R"({"inputs":[1]})", "must be a JSON object"},
      {"wrong input name", R"({"inputs":[{"name":"IN","datatype":"BYTES","shape":[1],"data":["a"]}]})",
       "unexpected inference input 'IN'"},
      {"INT32", R"({"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1],"data":[1]}]})",
       "must have datatype BYTES, not 'INT32'"},
      {"rank 3", json_infer("[1,1,1]", R"(["a"])"), "not rank 3"},
      {"rank 0", json_infer("[]", R"([])"), "not rank 0"},
      {"[2,2]", json_infer("[2,2]", R"(["a","b","c","d"])"), "second dimension must be 1"},
      {"negative dimension", json_infer("[-1]", R"(["a"])"), "negative dimension (-1)"},
      {"fractional dimension", json_infer("[1.5]", R"(["a"])"), "must be a whole number"},
      {"dimension past int64", json_infer("[18446744073709551615]", R"(["a"])"), "must be a whole number"},
      {"count differs from shape", json_infer("[3]", R"(["a","b"])"),
       "has 2 strings in \"data\" but its shape holds 3"},
      {"a number in data", json_infer("[2]", R"(["a",1])"), "must hold JSON strings"},
      {"nested three deep", json_infer("[1,1]", R"([[["a"]]])"), "may nest one level"},
      {"data not an array", json_infer("[1]", R"("a")"), R"(needs "data")"},
      {"shape over max_elements", json_infer("[9]", nine), "at most 8 (max_batch_size)"},
      {"data over max_elements", json_infer("[1]", nine), "more than 8 strings"},
      {"100,000 '['", std::string(100000, '['), "not valid JSON"},
      {"deep data", json_infer("[1]", std::string(5000, '[') + std::string(5000, ']')), "not valid JSON"},
      {"unknown output", json_infer("[1]", R"(["a"])", R"(,"outputs":[{"name":"OUT2"}])"),
       "unexpected inference output 'OUT2'"},
      {"output parameters not an object", json_infer("[1]", R"(["a"])", R"(,"outputs":[{"name":"OUTPUT","parameters":5}])"),
       "\"parameters\" must be a JSON object"},
      {"input parameters not an object",
       R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":[1],"data":["a"],"parameters":[]}]})",
       "\"parameters\" must be a JSON object"},
      {"classification",
       json_infer("[1]", R"(["a"])", R"(,"outputs":[{"name":"OUTPUT","parameters":{"classification":2}}])"),
       "classification extension does not apply"},
      {"id not a string", json_infer("[1]", R"(["a"])", R"(,"id":7)"), R"("id" must be a JSON string)"},
      {"timeout 0", json_infer("[1]", R"(["a"])", R"(,"parameters":{"timeout":0})"), "timeout must be a positive"},
      {"timeout negative", json_infer("[1]", R"(["a"])", R"(,"parameters":{"timeout":-5})"),
       "timeout must be a positive"},
      {"gzip", json_infer("[1]", R"(["a"])"), "Content-Encoding gzip is not supported", {{"Content-Encoding", "gzip"}}},
      {"bad X-Timeout-Ms", json_infer("[1]", R"(["a"])"), "X-Timeout-Ms must be", {{"X-Timeout-Ms", "soon"}}},
      {"bad X-Priority", json_infer("[1]", R"(["a"])"), "X-Priority must be", {{"X-Priority", "urgent"}}},
      {"over max_input_bytes", json_infer("[2]", R"(["ok",")" + std::string(1025, 'x') + "\"]"),
       "string 1 of input 'INPUT' is 1025 bytes, over the daemon's limit of 1024"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    check_error(v2.answer(verb::post, kInfer, c.body, c.headers), 400, c.needle);
  }
  CHECK(v2.infer(json_infer("[1]", R"(["a"])"), {{"Content-Encoding", "identity"}}).inputs.size() == 1);
}

TEST_CASE("v2 binary infer: elements of any length, NULs included, from the body's binary part") {
  V2 v2;
  const std::vector<std::string> elements = {"alpha", "", std::string("n\0l\0", 4), "\xC3\xA9", std::string(300, 'z')};
  const std::string data = framed(elements);
  for (const char* shape : {"[5]", "[5,1]"}) {
    CAPTURE(shape);
    const std::string json = binary_header(shape, data.size());
    V2Action action = v2.route(verb::post, kInfer, json + data,
                               {{"Inference-Header-Content-Length", std::to_string(json.size())}});
    REQUIRE(std::holds_alternative<V2Infer>(action));
    CHECK(strings(std::get<V2Infer>(action).inputs) == elements);
  }
  const std::string json = binary_header("[0]", 0);
  CHECK(std::holds_alternative<V2Infer>(
      v2.route(verb::post, kInfer, json, {{"Inference-Header-Content-Length", std::to_string(json.size())}})));
}

TEST_CASE("v2 binary infer: a hostile body is a clean 400 naming what is wrong") {
  V2 v2;
  struct Case {
    const char* what;
    std::string json;
    std::string data;
    std::optional<std::string> header_length;
    const char* needle;
  };
  const std::string one = framed({"abc"});
  const std::string two = framed({"a", "bc"});
  const std::string not_utf8 = framed({"ok", "\xC3\x28"});
  const Case cases[] = {
      {"header length past the body", binary_header("[1]", 7), one, "99999", "no larger than the body"},
      {"header length not a number", binary_header("[1]", 7), one, "abc", "must be a whole number"},
      {"header length negative", binary_header("[1]", 7), one, "-1", "must be a whole number"},
      {"header length 0", binary_header("[1]", 7), one, "0", "not valid JSON"},
      {"element past the end", binary_header("[1]", 7), le32(10) + "abc", {}, "claims 10 bytes but only 3 remain"},
      {"4 GiB claim", binary_header("[1]", 7), le32(0xFFFFFFFF) + "abc", {}, "claims 4294967295 bytes"},
      {"2-byte length prefix", binary_header("[1]", 2), std::string("\x01\x00", 2), {}, "4-byte length runs past"},
      {"fewer elements than the shape", binary_header("[3]", two.size()), two, {}, "element 2 of 3"},
      {"bytes left in the tensor", binary_header("[1]", 9), one + "zz", {}, "2 bytes are left after the 1"},
      {"bytes after the tensor", binary_header("[1]", 7), one + "zz", {},
       "9 bytes of binary data after its JSON header, and the inputs' binary_data_size claim 7"},
      {"binary_data_size past the body", binary_header("[1]", 100), one, {},
       "claims 100 bytes of binary data but the body holds 7"},
      {"binary_data_size and data", json_infer("[1]", R"(["a"],"parameters":{"binary_data_size":7})"), one, {},
       R"(both "data" and binary_data_size)"},
      {"binary_data_size not a number",
       R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":"7"}}]})",
       one, {}, "binary_data_size must be a whole number"},
      {"a huge shape, a small body", binary_header("[4294967296]", 7), one, {}, "holds 4294967296 strings"},
      {"binary data with a JSON input", json_infer("[1]", R"(["a"])"), one, {}, "7 bytes of binary data after"},
      {"an element not UTF-8", binary_header("[2]", not_utf8.size()), not_utf8, {},
       "string 1 of input 'INPUT' is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    check_error(v2.binary(c.json, c.data, c.header_length), 400, c.needle);
  }
}

TEST_CASE("oip BYTES framing: decode leaves out unchanged on every fault; encode round-trips") {
  const std::vector<std::string> elements = {"", "a", std::string(258, 'b'), std::string(70000, 'c'),
                                             std::string("\0\xFF", 2)};
  const std::string data = framed(elements);
  CHECK(data.size() == oip::framed_size(elements.size(), 1 + 258 + 70000 + 2));
  CHECK(data.substr(9, 4) == le32(258));
  CHECK(data.substr(9, 4) == std::string("\x02\x01\x00\x00", 4));  // little-endian, whatever the host
  std::vector<std::string_view> out = {"keep"};
  REQUIRE_FALSE(oip::decode_bytes_elements(data, elements.size(), out).has_value());
  REQUIRE(out.size() == 1 + elements.size());
  CHECK(out[0] == "keep");
  CHECK(std::vector<std::string>(out.begin() + 1, out.end()) == elements);

  struct Fault {
    const char* what;
    std::string data;
    std::size_t expected;
    const char* needle;
  };
  const Fault faults[] = {
      {"bytes left over", data + "x", elements.size(), "1 bytes are left"},
      {"one element too few", data, elements.size() + 1, "element 5 of 6"},
      {"a truncated last element", data.substr(0, data.size() - 1), elements.size(),
       "claims 2 bytes but only 1 remain"},
      {"a truncated prefix", data.substr(0, 2), 1, "4-byte length runs past"},
      {"a 4 GiB claim after good elements", framed({"a"}) + le32(0xFFFFFFFF), 2, "claims 4294967295 bytes"},
      {"nothing expected, something there", "x", 0, "1 bytes are left after the 0"},
  };
  for (const Fault& f : faults) {
    CAPTURE(f.what);
    std::vector<std::string_view> kept = {"keep"};
    const std::optional<std::string> fault = oip::decode_bytes_elements(f.data, f.expected, kept);
    REQUIRE(fault.has_value());
    CHECK(fault->find(f.needle) != std::string::npos);
    CHECK(kept == std::vector<std::string_view>{"keep"});
  }
  std::vector<std::string_view> none;
  CHECK_FALSE(oip::decode_bytes_elements("", 0, none).has_value());
  CHECK(none.empty());
}

TEST_CASE("v2 answers: JSON tensors in order, id echoed or left out") {
  V2Reply reply{"r1", {3, 1}, false};
  std::vector<Result> results = successes({"x", "y\"z", "\xC3\xA9"});
  const Response response = v2_infer_response(reply, results);
  CHECK(response.status == 200);
  CHECK(response.content_type == kJsonType);
  CHECK(response.inference_header_length == 0);
  Json json(response.body);
  REQUIRE(json.ok);
  const std::pair<const char*, const char*> fields[] = {
      {"/id", "r1"}, {"/model_name", "batchstring"}, {"/model_version", "1"}, {"/outputs/0/name", "OUTPUT"},
      {"/outputs/0/datatype", "BYTES"}, {"/outputs/0/data/0", "x"}, {"/outputs/0/data/1", "y\"z"},
      {"/outputs/0/data/2", "\xC3\xA9"}};
  for (const auto& [pointer, value] : fields) CHECK(json.str(pointer) == value);
  CHECK(json.num("/outputs/0/shape/0") == 3);
  CHECK(json.num("/outputs/0/shape/1") == 1);
  CHECK_FALSE(json.has("/outputs/0/data/3"));
  std::string wire;
  serialize(response, Framing{}, wire);
  CHECK(wire.find("Inference-Header-Content-Length") == std::string::npos);

  reply.id.clear();
  Json anonymous(v2_infer_response(reply, results).body);
  REQUIRE(anonymous.ok);
  CHECK_FALSE(anonymous.has("/id"));
  CHECK(anonymous.str("/outputs/0/data/0") == "x");
}

TEST_CASE("v2 answers: binary tensor data after a JSON header of the length the header field says") {
  const std::vector<std::string> outputs = {"first", "", std::string("\xFF\0raw", 5)};
  std::vector<Result> results = successes(outputs);
  const Response response = v2_infer_response(V2Reply{"b", {3}, true}, results);
  CHECK(response.status == 200);
  CHECK(response.content_type == kOctetStreamType);
  const std::size_t header_length = response.inference_header_length;
  REQUIRE(header_length > 0);
  REQUIRE(header_length < response.body.size());
  Json header(std::string_view(response.body).substr(0, header_length));
  REQUIRE(header.ok);
  CHECK(header.str("/id") == "b");
  CHECK(header.num("/outputs/0/shape/0") == 3);
  CHECK(header.num("/outputs/0/parameters/binary_data_size") ==
        static_cast<std::int64_t>(response.body.size() - header_length));
  CHECK_FALSE(header.has("/outputs/0/data"));
  std::vector<std::string_view> decoded;
  REQUIRE_FALSE(oip::decode_bytes_elements(std::string_view(response.body).substr(header_length), 3, decoded));
  CHECK(strings(decoded) == outputs);
  std::string wire;
  serialize(response, Framing{}, wire);
  const std::string header_field = "\r\nInference-Header-Content-Length: " + std::to_string(header_length) + "\r\n";
  CHECK(wire.find(header_field) != std::string::npos);
  CHECK(wire.find("\r\nContent-Type: application/octet-stream\r\n") != std::string::npos);
  CHECK(wire.ends_with(response.body));
}

TEST_CASE("v2 answers: JSON cannot carry bytes that are not UTF-8; binary can") {
  std::vector<Result> raw = successes({"fine", "\xFF\xFE"});
  check_error(v2_infer_response(V2Reply{"", {2}, false}, raw), 500, "output 1 is not valid UTF-8");
  check_error(v2_infer_response(V2Reply{"", {2}, false}, raw), 500, "binary_data");
  CHECK(v2_infer_response(V2Reply{"", {2}, true}, raw).status == 200);
}

TEST_CASE("v2 answers: the client library's errors, mapped as the protocol wants") {
  struct Case {
    ErrorCode code;
    unsigned status;
    bool retry;
  };
  for (const Case c :
       {Case{ErrorCode::kOverloaded, 503, true}, Case{ErrorCode::kTimeout, 504, false},
        Case{ErrorCode::kTooLarge, 400, false}, Case{ErrorCode::kInvalidUtf8, 400, false},
        Case{ErrorCode::kBackendError, 500, false}, Case{ErrorCode::kProtocolError, 500, false},
        Case{ErrorCode::kDaemonUnavailable, 503, true}, Case{ErrorCode::kBackendUnavailable, 503, true},
        Case{ErrorCode::kUnknownModel, 404, false}}) {
    CAPTURE(static_cast<int>(c.code));
    const Response r = v2_response_for_error(Error{c.code, "why \"quoted\""}, oip::OverloadStatus::k503);
    check_error(r, c.status, "why \"quoted\"");
    CHECK((r.retry_after_s != 0) == c.retry);
    const Response r429 = v2_response_for_error(Error{c.code, "why \"quoted\""}, oip::OverloadStatus::k429);
    check_error(r429, c.code == ErrorCode::kOverloaded ? 429 : c.status, "why \"quoted\"");
    CHECK(r429.retry_after_s == r.retry_after_s);
  }
  // gRPC's codes for shedding follow the same flag (batchd-grpc's --overload-status).
  CHECK(oip::map_error(ErrorCode::kOverloaded, oip::OverloadStatus::k503).grpc_code == oip::GrpcCode::kUnavailable);
  CHECK(oip::map_error(ErrorCode::kOverloaded, oip::OverloadStatus::k429).grpc_code ==
        oip::GrpcCode::kResourceExhausted);
  std::string wire;
  serialize(v2_response_for_error(Error{ErrorCode::kOverloaded, "full"}, oip::OverloadStatus::k503), Framing{}, wire);
  CHECK(wire.starts_with("HTTP/1.1 503 "));
  CHECK(wire.find("\r\nRetry-After: 1\r\n") != std::string::npos);
  // A message that quotes a peer's bytes stays a valid JSON body.
  check_error(v2_error(404, "no such resource: /v2/\xFF"), 404, "no such resource: /v2/?");
}
