// Tracing's pieces without a collector (python/tests/test_tracing.py has one): W3C traceparent
// parsing, the sampler's rate and count, the OTEL_* environment, the door's decisions, and the
// daemon's spans of a batch (parents, links, times, attributes) caught by a sink of the test's own.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/traceparent.hpp"
#include "daemon/request_tracer.hpp"
#include "tracing/door_tracer.hpp"
#include "tracing/trace_options.hpp"
#include "tracing/trace_sampler.hpp"
#include "tracing/trace_settings.hpp"

using namespace batchd;

namespace {

// A span as the sink got it, its views copied.
struct Caught {
  std::string name;
  tracing::SpanKind kind;
  tracing::TraceId trace_id;
  tracing::SpanId span_id, parent_id;
  std::int64_t start_ns, end_ns;
  std::map<std::string, std::string> attributes;
  std::vector<shm::TraceContext> links;
  std::string error;
};

class CatchingSink final : public tracing::SpanSink {
 public:
  void emit(const tracing::SpanData& span) noexcept override {
    Caught c{std::string(span.name), span.kind, span.trace_id, span.span_id, span.parent_id, span.start_ns,
             span.end_ns, {}, {span.links.begin(), span.links.end()}, std::string(span.error)};
    for (const tracing::Attribute& a : span.attributes) {
      c.attributes[std::string(a.key)] = std::visit(
          [](const auto& v) -> std::string {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string_view>) {
              return std::string(v);
            } else {
              return std::to_string(v);
            }
          },
          a.value);
    }
    std::lock_guard lock(mu);
    spans.push_back(std::move(c));
  }
  tracing::SinkCounts counts() const noexcept override { return {}; }
  std::mutex mu;
  std::vector<Caught> spans;
};

shm::TraceContext context_of(std::uint8_t trace, std::uint8_t span) {
  shm::TraceContext c;
  c.trace_id.fill(trace);
  c.span_id.fill(span);
  return c;
}

tracing::TraceOptions options_with(std::uint64_t rate, std::int64_t count = -1) {
  tracing::TraceOptions o;
  o.enabled = true;
  o.rate = rate;
  o.count = count;
  return o;
}

// Sets an environment variable for one scope.
struct Env {
  Env(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~Env() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("traceparent: W3C's version 00, lowercase hex, ids not zero; a later version may say more") {
  const auto parsed = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  REQUIRE(parsed.has_value());
  CHECK(parsed->sampled);
  CHECK(parsed->context.trace_id[0] == 0x0a);
  CHECK(parsed->context.span_id[7] == 0x31);
  CHECK(format_traceparent(parsed->context, true) == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  CHECK_FALSE(parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")->sampled);
  for (const char* bad : {"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
                          "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  // uppercase
                          "00-00000000000000000000000000000000-b7ad6b7169203331-01",  // zero trace id
                          "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  // zero span id
                          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  // version ff
                          "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",  // 00 is exactly 55
                          "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                          "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_traceparent(bad).has_value());
  }
  CHECK(parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes-next").has_value());
  CHECK_FALSE(parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x").has_value());
}

TEST_CASE("the sampler traces exactly 1 in N, and no more than its count") {
  tracing::TraceSampler none(0, -1);
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(none.sample());
  tracing::TraceSampler tenth(10, -1);
  int picked = 0;
  for (int i = 0; i < 10'000; ++i) picked += tenth.sample() ? 1 : 0;
  CHECK(picked == 1000);
  tracing::TraceSampler counted(1, 3);
  picked = 0;
  for (int i = 0; i < 10; ++i) picked += counted.sample() ? 1 : 0;
  CHECK(picked == 3);
  CHECK_FALSE(counted.take());  // a caller's sampled request counts too
  counted.set(2, 2);            // Triton's trace setting, at run time
  picked = 0;
  for (int i = 0; i < 10; ++i) picked += counted.sample() ? 1 : 0;
  CHECK(picked == 2);
}

// The settings as Triton's extension reads them: name to its values.
std::map<std::string, std::vector<std::string>> as_map(const std::vector<tracing::TraceSetting>& settings) {
  std::map<std::string, std::vector<std::string>> out;
  for (const tracing::TraceSetting& s : settings) out[s.name] = s.value.value();
  return out;
}

std::vector<tracing::TraceSetting> change(std::string name, std::optional<std::vector<std::string>> value) {
  return {tracing::TraceSetting{std::move(name), std::move(value)}};
}

int traced_of(tracing::TraceSettings& settings, std::string_view model, int requests, bool caller_sampled = false) {
  int traced = 0;
  for (int i = 0; i < requests; ++i) traced += settings.decide(model, caller_sampled) ? 1 : 0;
  return traced;
}

TEST_CASE("trace settings: global ones change at run time, and a clear goes back to the start") {
  tracing::TraceSettings settings(true, 10, -1);
  using V = std::vector<std::string>;
  CHECK(as_map(settings.get("")) == std::map<std::string, V>{{"trace_level", {"TIMESTAMPS"}},
                                                             {"trace_rate", {"10"}},
                                                             {"trace_count", {"-1"}},
                                                             {"trace_mode", {"opentelemetry"}}});
  CHECK(traced_of(settings, "m", 1000) == 100);
  settings.update("", change("trace_rate", V{"1"}));
  CHECK(traced_of(settings, "m", 50) == 50);
  CHECK(as_map(settings.update("", change("trace_count", V{"5"})))["trace_count"] == V{"5"});
  CHECK(traced_of(settings, "m", 50) == 5);
  CHECK(as_map(settings.get(""))["trace_count"] == V{"0"});  // what is left, as Triton reports it
  settings.update("", change("trace_count", std::nullopt));   // back to the start: no limit
  CHECK(traced_of(settings, "m", 20) == 20);
  settings.update("", change("trace_level", V{"OFF"}));
  CHECK(traced_of(settings, "m", 20) == 0);
  CHECK(traced_of(settings, "m", 20, true) == 0);  // OFF is off, whatever the caller says
  settings.update("", change("trace_level", std::nullopt));
  CHECK(traced_of(settings, "m", 20, true) == 20);
  settings.update("", change("trace_rate", std::nullopt));
  CHECK(as_map(settings.get(""))["trace_rate"] == V{"10"});
}

TEST_CASE("trace settings: a model's own replace the global ones for it alone, and the rest follow them") {
  tracing::TraceSettings settings(true, 0, -1);
  using V = std::vector<std::string>;
  const auto own = settings.update("langid", change("trace_rate", V{"2"}));
  CHECK(as_map(own)["trace_rate"] == V{"2"});
  CHECK(traced_of(settings, "langid", 100) == 50);
  CHECK(traced_of(settings, "other", 100) == 0);  // the global rate, 0
  CHECK(traced_of(settings, "", 100) == 0);
  // The model's level and count follow the global ones until it sets its own.
  settings.update("", change("trace_count", V{"10"}));
  CHECK(traced_of(settings, "langid", 100) == 10);
  CHECK(as_map(settings.get("langid"))["trace_count"] == V{"0"});
  settings.update("langid", change("trace_count", V{"-1"}));
  CHECK(traced_of(settings, "langid", 100) == 50);
  settings.update("", change("trace_level", V{"OFF"}));
  CHECK(traced_of(settings, "langid", 100) == 0);
  settings.update("langid", change("trace_level", V{"TIMESTAMPS"}));
  CHECK(traced_of(settings, "langid", 100) == 50);
  CHECK(as_map(settings.get(""))["trace_level"] == V{"OFF"});
  // A model's update naming nothing drops its own settings: it follows the global ones again.
  CHECK(as_map(settings.update("langid", {}))["trace_level"] == V{"OFF"});
  CHECK(traced_of(settings, "langid", 100) == 0);
  // Clearing its one setting does the same. (The global count of 10 is spent: no limit again.)
  settings.update("", change("trace_count", std::nullopt));
  settings.update("", change("trace_level", V{"TIMESTAMPS"}));
  settings.update("langid", change("trace_rate", V{"1"}));
  CHECK(traced_of(settings, "langid", 10) == 10);
  settings.update("langid", change("trace_rate", std::nullopt));
  CHECK(as_map(settings.get("langid"))["trace_rate"] == V{"0"});
  CHECK(traced_of(settings, "langid", 10) == 0);
}

TEST_CASE("trace settings: what cannot be served is refused, saying why, and nothing changes") {
  tracing::TraceSettings settings(true, 7, -1);
  using V = std::vector<std::string>;
  const std::vector<std::pair<std::vector<tracing::TraceSetting>, std::string>> refused{
      {change("trace_rate", V{"-1"}), "trace_rate must be an integer of at least 0"},
      {change("trace_rate", V{"12x"}), "trace_rate must be an integer"},
      {change("trace_rate", V{""}), "trace_rate must be an integer"},
      {change("trace_rate", V{"1", "2"}), "trace_rate takes one value"},
      {change("trace_count", V{"-2"}), "trace_count must be an integer of at least -1"},
      {change("trace_level", V{"TENSORS"}), "batchd's spans carry no tensors"},
      {change("trace_level", V{"OFF", "TIMESTAMPS"}), "one of OFF and TIMESTAMPS"},
      {change("trace_level", V{}), "one of OFF and TIMESTAMPS"},
      {change("trace_level", V{"LOUD"}), "takes OFF or TIMESTAMPS"},
      {change("trace_file", V{"/tmp/x"}), "writes no trace file"},
      {change("log_frequency", V{"5"}), "over OTLP"},
      {change("trace_mode", V{"triton"}), "trace_mode is opentelemetry"},
      {change("trace_colour", V{"red"}), "no trace setting is named \"trace_colour\""},
  };
  for (const auto& refusal : refused) {
    const std::vector<tracing::TraceSetting>& changes = refusal.first;
    const std::string& why = refusal.second;
    CAPTURE(why);
    try {
      // The good change before the bad one is not applied either.
      std::vector<tracing::TraceSetting> both = change("trace_rate", V{"1"});
      both.insert(both.end(), changes.begin(), changes.end());
      settings.update("m", both);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(why) != std::string::npos);
    }
  }
  CHECK(as_map(settings.get("m"))["trace_rate"] == V{"7"});
  CHECK(as_map(settings.update("", change("trace_mode", V{"opentelemetry"})))["trace_rate"] == V{"7"});
  // A caller cannot grow the table of models without bound.
  for (std::size_t i = 0; i < tracing::TraceSettings::kMaxModels; ++i) {
    settings.update("model" + std::to_string(i), change("trace_rate", V{"1"}));
  }
  CHECK_THROWS_WITH_AS(settings.update("one more", change("trace_rate", V{"1"})),
                       doctest::Contains("clear one first"), std::invalid_argument);
  settings.update("model0", change("trace_rate", std::nullopt));  // cleared, its place is free
  settings.update("one more", change("trace_rate", V{"1"}));
  CHECK(as_map(settings.get("one more"))["trace_rate"] == V{"1"});
}

TEST_CASE("trace settings: counts hold exactly while threads decide and another changes settings") {
  tracing::TraceSettings settings(true, 1, 1000);
  using V = std::vector<std::string>;
  settings.update("m", change("trace_count", V{"500"}));
  std::atomic<int> global{0}, own{0};
  std::atomic<bool> deciding{true};
  std::thread changer([&] {
    // Another model's settings come and go: the table changes under the deciders.
    for (int i = 0; deciding.load(); ++i) {
      settings.update("x", change("trace_rate", i % 2 == 0 ? std::optional<V>(V{"3"}) : std::nullopt));
      (void)settings.get("m");
    }
  });
  std::vector<std::thread> deciders;
  for (int t = 0; t < 4; ++t) {
    deciders.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        if (settings.decide(t % 2 == 0 ? "" : "other", false)) ++global;
        if (settings.decide("m", false)) ++own;
      }
    });
  }
  for (std::thread& d : deciders) d.join();
  deciding = false;
  changer.join();
  CHECK(global == 1000);
  CHECK(own == 500);
}

TEST_CASE("OTEL_* variables turn tracing on where no flag did, as any SDK reads them") {
  {
    tracing::TraceOptions o;
    tracing::finish_trace_options(o);
    CHECK_FALSE(o.enabled);
    CHECK(o.rate == 0);
  }
  {
    const Env exporter("OTEL_TRACES_EXPORTER", "otlp");
    const Env endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces");
    tracing::TraceOptions o;
    tracing::finish_trace_options(o);
    CHECK(o.enabled);
    CHECK(o.endpoint == "http://collector:4318/v1/traces");
    CHECK(o.rate == 1);  // every request, unless a rate says otherwise
  }
  {
    const Env base("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/");
    const Env sampler("OTEL_TRACES_SAMPLER", "parentbased_traceidratio");
    const Env ratio("OTEL_TRACES_SAMPLER_ARG", "0.01");
    tracing::TraceOptions o;
    tracing::finish_trace_options(o);
    CHECK(o.enabled);
    CHECK(o.endpoint == "http://collector:4318/v1/traces");
    CHECK(o.rate == 100);
    tracing::TraceOptions flagged;
    flagged.rate = 7;  // a flag beats the variable
    tracing::finish_trace_options(flagged);
    CHECK(flagged.rate == 7);
  }
  {
    const Env off("OTEL_TRACES_EXPORTER", "none");
    const Env endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces");
    const Env protocol("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    tracing::TraceOptions o;
    tracing::finish_trace_options(o);
    CHECK_FALSE(o.enabled);
    // Flags beat the variables: an endpoint and a protocol given on the command line hold.
    tracing::TraceOptions flagged;
    flagged.endpoint = "http://mine:4318/v1/traces";
    flagged.protocol = "http/protobuf";
    tracing::finish_trace_options(flagged);
    CHECK(flagged.enabled);
    CHECK(flagged.endpoint == "http://mine:4318/v1/traces");
    CHECK(flagged.protocol == "http/protobuf");
  }
  {
    const Env bad("OTEL_TRACES_EXPORTER", "zipkin");
    tracing::TraceOptions o;
    CHECK_THROWS_AS(tracing::finish_trace_options(o), std::invalid_argument);
  }
  {
    const Env sampler("OTEL_TRACES_SAMPLER", "traceidratio");
    const Env ratio("OTEL_TRACES_SAMPLER_ARG", "2");
    tracing::TraceOptions o;
    CHECK_THROWS_AS(tracing::finish_trace_options(o), std::invalid_argument);
  }
}

TEST_CASE("a door traces what its caller sampled, under the caller's span, and samples the rest") {
  auto sink = std::make_unique<CatchingSink>();
  CatchingSink& caught = *sink;
  tracing::DoorTracer door(options_with(0), std::move(sink));
  const shm::TraceContext caller = context_of(0xAB, 0xCD);
  const tracing::ServerSpan traced = door.begin(&caller, true, "", 100);
  REQUIRE(traced.traced());
  CHECK(traced.trace_id == caller.trace_id);
  CHECK(traced.parent_id == caller.span_id);
  CHECK(traced.for_daemon().span_id == traced.span_id);  // the daemon's parent is this span
  CHECK_FALSE(door.begin(&caller, false, "", 100).traced());  // unsampled, and the rate is 0
  CHECK_FALSE(door.begin(nullptr, false, "", 100).traced());
  CHECK(door.begin(nullptr, false, "", 100).for_daemon() == shm::TraceContext{});
  const std::array<tracing::Attribute, 1> attributes{{{"http.response.status_code", std::int64_t{503}}}};
  door.end(traced, "POST /v1/batchstring", attributes, "503", 250);
  REQUIRE(caught.spans.size() == 1);
  const Caught& span = caught.spans[0];
  CHECK(span.kind == tracing::SpanKind::kServer);
  CHECK((span.start_ns == 100 && span.end_ns == 250));
  CHECK(span.error == "503");
  CHECK(span.attributes.at("http.response.status_code") == "503");

  tracing::DoorTracer all(options_with(1), std::make_unique<CatchingSink>());
  const tracing::ServerSpan root = all.begin(nullptr, false, "", 0);
  CHECK(root.traced());
  CHECK(root.parent_id == tracing::SpanId{});
}

TEST_CASE("the daemon's spans of a batch: each traced request under its parent, its wait and run, a linked batch") {
  auto sink = std::make_unique<CatchingSink>();
  CatchingSink& caught = *sink;
  RequestTracer tracer(options_with(0), std::move(sink));
  tracer.set_model(3, "langid", "7");
  // A batch of four: one its caller traces, one the daemon sampled (a root), two untraced.
  Batch batch;
  const shm::TraceContext caller = context_of(0x11, 0x22);
  for (int i = 0; i < 4; ++i) {
    RequestRef ref;
    ref.model = 3;
    ref.arrival_ns = 1000 + i;
    ref.request_id = 0xBEEF + i;
    if (i == 0) ref.trace = caller;
    tracer.decide(ref.trace);  // keeps the caller's; at rate 0 picks none of the others
    if (i == 2) ref.trace.trace_id = tracing::random_trace_id();  // as a sampler would have: a root
    batch.append("input " + std::to_string(i), std::move(ref));
  }
  batch.run_started_ns = 5000;
  batch.run_device = 1;
  batch.failed_devices = 0b100;  // it failed on device 2 first
  tracer.batch_ran(batch, {});

  const auto named = [&](const std::string& name) {
    std::vector<Caught> out;
    std::copy_if(caught.spans.begin(), caught.spans.end(), std::back_inserter(out),
                 [&](const Caught& c) { return c.name == name; });
    return out;
  };
  const std::vector<Caught> batches = named("batchd batch");
  REQUIRE(batches.size() == 1);
  const Caught& b = batches[0];
  CHECK(b.attributes.at("batchd.batch.size") == "4");
  CHECK(b.attributes.at("batchd.batch.traced_requests") == "2");
  CHECK(b.attributes.at("triton.model_name") == "langid");
  CHECK(b.start_ns == 5000);
  REQUIRE(b.links.size() == 2);
  const std::vector<Caught> requests = named("batchd request");
  REQUIRE(requests.size() == 2);
  for (const Caught& r : requests) {
    // Linked from the batch by its own ids.
    CHECK(std::count(b.links.begin(), b.links.end(), shm::TraceContext{r.trace_id, r.span_id}) == 1);
    CHECK(r.attributes.at("triton.model_version") == "7");
    CHECK(r.attributes.at("batchd.retries") == "1");
    CHECK(r.attributes.at("batchd.device") == "1");
    CHECK(r.end_ns >= b.start_ns);
  }
  const auto with_caller = std::find_if(requests.begin(), requests.end(),
                                        [&](const Caught& r) { return r.trace_id == caller.trace_id; });
  REQUIRE(with_caller != requests.end());
  CHECK(with_caller->parent_id == caller.span_id);
  CHECK(with_caller->start_ns == 1000);
  CHECK(with_caller->attributes.at("triton.request_id") == "000000000000beef");
  const auto root = std::find_if(requests.begin(), requests.end(),
                                 [&](const Caught& r) { return r.trace_id != caller.trace_id; });
  REQUIRE(root != requests.end());
  CHECK(root->parent_id == tracing::SpanId{});
  for (const Caught& r : requests) {
    std::vector<Caught> children;
    std::copy_if(caught.spans.begin(), caught.spans.end(), std::back_inserter(children),
                 [&](const Caught& c) { return c.parent_id == r.span_id && c.trace_id == r.trace_id; });
    REQUIRE(children.size() == 2);
    const Caught& wait = children[0].name == "batchd queue" ? children[0] : children[1];
    const Caught& run = children[0].name == "batchd run" ? children[0] : children[1];
    CHECK(wait.name == "batchd queue");
    CHECK(run.name == "batchd run");
    CHECK(wait.start_ns == r.start_ns);
    CHECK(wait.end_ns == 5000);
    CHECK(run.start_ns == 5000);
    REQUIRE(run.links.size() == 1);
    CHECK(run.links[0] == shm::TraceContext{b.trace_id, b.span_id});  // back to its batch
  }
  // An error on a request that never ran: its span alone, with the error as its status.
  const std::size_t before = caught.spans.size();
  RequestRef refused;
  refused.trace = caller;
  refused.model = 3;
  tracer.answered_unrun(refused, shm::WireStatus::kOverloaded, "no room");
  REQUIRE(caught.spans.size() == before + 1);
  CHECK(caught.spans.back().error == "no room");
  CHECK(caught.spans.back().attributes.at("batchd.ran") == "0");
  // And an untraced one costs nothing.
  tracer.answered_unrun(RequestRef{}, shm::WireStatus::kOverloaded, "no room");
  CHECK(caught.spans.size() == before + 1);
}

TEST_CASE("the daemon's count bounds the traces its callers ask for, and its sampler picks roots") {
  RequestTracer tracer(options_with(4, 3), std::make_unique<CatchingSink>());
  int traced = 0;
  for (int i = 0; i < 20; ++i) {
    shm::TraceContext trace = context_of(0x31, 0x32);
    tracer.decide(trace);
    traced += RequestTracer::traced(trace) ? 1 : 0;
  }
  CHECK(traced == 3);
  RequestTracer sampling(options_with(4), std::make_unique<CatchingSink>());
  traced = 0;
  for (int i = 0; i < 20; ++i) {
    shm::TraceContext none{};
    sampling.decide(none);
    if (RequestTracer::traced(none)) {
      ++traced;
      CHECK(none.span_id == tracing::SpanId{});  // a root
    }
  }
  CHECK(traced == 5);
  // A hostile client's half-set context is none.
  shm::TraceContext half{};
  half.trace_id.fill(1);
  RequestTracer off(options_with(0), std::make_unique<CatchingSink>());
  off.decide(half);
  CHECK_FALSE(RequestTracer::traced(half));
}
