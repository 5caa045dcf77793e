// The response cache's segment (shm/cache_writer.hpp, shm/cache_reader.hpp): hits answer right,
// only the whole input decides a hit, a model's records go with its epoch, a reader racing the
// writer through eviction churn never returns a wrong answer (threads, which TSan checks, and
// processes), and a reader cannot write the segment.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shm/cache_reader.hpp"
#include "shm/cache_writer.hpp"
#include "shm/clock.hpp"
#include "shm/memfd_region.hpp"
#include "tests/helpers.hpp"

using namespace batchd::shm;

namespace {

// Each key's one right answer; lengths vary so values start and end mid-word, and some are long,
// so that a copy takes long enough for the writer to overwrite it midway.
std::string key_of(std::uint64_t i) { return "input-" + std::to_string(i * 2654435761ULL % 1000003); }
std::string answer_of(std::string_view key) {
  std::string out = "answer(" + std::string(key) + ")";
  const std::size_t h = std::hash<std::string_view>{}(key);
  out.append(h % 7 == 0 ? 1500 + h % 500 : h % 13, static_cast<char>('a' + h % 26));
  return out;
}

// The writer's churn: 600 keys the readers look for, alternating every 600 stores with 600 they
// do not, so the log (a few hundred records) is reused under the readers all the time.
std::string churn_key(std::uint64_t i) { return key_of(i % 600 + (i / 600 % 2) * 600); }

std::unique_ptr<CacheWriter> make_writer(std::uint64_t bytes, CacheHash hash = CacheHash::kKeyed) {
  auto created = CacheWriter::create("test-cache", bytes, hash);
  REQUIRE(created);
  return std::move(*created);
}

struct ReadOnlyMapping {
  boost::interprocess::mapped_region map;
  CacheReader reader;
  explicit ReadOnlyMapping(const CacheWriter& w)
      : map(map_fd(w.fd(), w.bytes(), false).value()),
        reader(CacheReader::open(map.get_address(), w.bytes()).value()) {}
};

// Looks keys up until told to stop; counts hits and wrong answers.
struct Verdict {
  std::uint64_t hits = 0, misses = 0, wrong = 0;
};
Verdict read_until(const CacheReader& reader, const std::atomic<bool>& stop, std::uint64_t keys) {
  Verdict v;
  std::string out;
  std::uint64_t i = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    const std::string key = key_of(i++ % keys);
    if (!reader.lookup(0, 0, key, out)) {
      ++v.misses;
      continue;
    }
    ++v.hits;
    if (out != answer_of(key)) ++v.wrong;
  }
  return v;
}

}  // namespace

TEST_CASE("a stored answer is found whole, a model not cached or another input misses") {
  auto w = make_writer(1 << 20);
  ReadOnlyMapping client(*w);
  std::string out;
  CHECK_FALSE(w->insert(0, 0, "a", "A"));  // not cached until the model has an epoch
  w->set_epoch(0, 7);
  w->set_epoch(3, 9);
  CHECK(client.reader.epoch(0) == 7);
  CHECK(client.reader.epoch(1) == 0);
  for (std::uint64_t i = 0; i < 200; ++i) REQUIRE(w->insert(0, 0, key_of(i), answer_of(key_of(i))));
  for (std::uint64_t i = 0; i < 200; ++i) {
    REQUIRE(client.reader.lookup(0, 0, key_of(i), out));
    CHECK(out == answer_of(key_of(i)));
  }
  CHECK_FALSE(client.reader.lookup(0, 0, "never stored", out));
  CHECK_FALSE(client.reader.lookup(3, 0, key_of(1), out));  // the same input for another model
  CHECK_FALSE(client.reader.lookup(1, 0, key_of(1), out));  // a model not cached here
  CHECK(w->insert(0, 0, key_of(1), "a second answer"));      // already there: kept as it was
  REQUIRE(client.reader.lookup(0, 0, key_of(1), out));
  CHECK(out == answer_of(key_of(1)));
  CHECK(w->insert(0, 0, "", "empty input"));
  // The same input for another caller's scope is another key.
  CHECK_FALSE(client.reader.lookup(0, 7, key_of(1), out));
  REQUIRE(w->insert(0, 7, key_of(1), "scope 7's"));
  REQUIRE(client.reader.lookup(0, 7, key_of(1), out));
  CHECK(out == "scope 7's");
  REQUIRE(client.reader.lookup(0, 0, key_of(1), out));
  CHECK(out == answer_of(key_of(1)));
  REQUIRE(client.reader.lookup(0, 0, "", out));
  CHECK(out == "empty input");
  const CacheCounts counts = w->counts();
  CHECK(counts.entries == 202);
  CHECK(counts.inserts == 202);
  CHECK(counts.evictions == 0);
}

TEST_CASE("inputs forced into one bucket with one tag each get their own answer") {
  auto w = make_writer(1 << 20, CacheHash::kOneValue);
  ReadOnlyMapping client(*w);
  w->set_epoch(0, 1);
  std::string out;
  // More than a bucket's ways: the later ones displace the earlier, never answer for them.
  for (std::uint64_t i = 0; i < 3 * kCacheWays; ++i) {
    REQUIRE(w->insert(0, 0, key_of(i), answer_of(key_of(i))));
    for (std::uint64_t j = 0; j <= i; ++j) {
      if (client.reader.lookup(0, 0, key_of(j), out)) CHECK(out == answer_of(key_of(j)));
    }
    REQUIRE(client.reader.lookup(0, 0, key_of(i), out));
  }
  // Prefixes and same-length neighbours of a stored input are other inputs.
  w->insert(0, 0, "abcdefgh12", "long");
  CHECK_FALSE(client.reader.lookup(0, 0, "abcdefgh1", out));
  CHECK_FALSE(client.reader.lookup(0, 0, "abcdefgh13", out));
  CHECK(w->counts().entries == kCacheWays);
}

TEST_CASE("a new epoch or none drops the model's records") {
  auto w = make_writer(1 << 20);
  ReadOnlyMapping client(*w);
  std::string out;
  w->set_epoch(2, 1);
  w->set_epoch(4, 1);
  for (std::uint64_t i = 0; i < 50; ++i) w->insert(2, 0, key_of(i), answer_of(key_of(i)));
  w->insert(4, 0, "other", "model's");
  CHECK(w->counts().entries == 51);
  w->set_epoch(2, 2);  // a reload, or a new version
  CHECK(w->counts().entries == 1);
  CHECK_FALSE(client.reader.lookup(2, 0, key_of(3), out));
  REQUIRE(client.reader.lookup(4, 0, "other", out));
  w->insert(2, 0, key_of(3), "the new version's");
  REQUIRE(client.reader.lookup(2, 0, key_of(3), out));
  CHECK(out == "the new version's");
  w->set_epoch(2, 0);  // unloaded
  CHECK_FALSE(client.reader.lookup(2, 0, key_of(3), out));
  CHECK_FALSE(w->insert(2, 0, key_of(3), "x"));
  CHECK(w->counts().entries == 1);
}

TEST_CASE("a full log reuses its oldest records first, and big answers are not stored") {
  auto w = make_writer(kCacheMinBytes);
  ReadOnlyMapping client(*w);
  w->set_epoch(0, 1);
  std::string out;
  CHECK_FALSE(w->insert(0, 0, "big", std::string(client.reader.geometry().log_bytes / 4, 'x')));
  const std::uint64_t keys = 2000;
  for (std::uint64_t i = 0; i < keys; ++i) REQUIRE(w->insert(0, 0, key_of(i), answer_of(key_of(i))));
  const CacheCounts counts = w->counts();
  CHECK(counts.evictions > 0);
  CHECK(counts.entries + counts.evictions == keys);
  CHECK(counts.bytes <= client.reader.geometry().log_bytes);
  CHECK(client.reader.lookup(0, 0, key_of(keys - 1), out));
  CHECK_FALSE(client.reader.lookup(0, 0, key_of(0), out));
}

TEST_CASE("readers racing the writer through eviction churn never get a wrong answer (threads)") {
  auto w = make_writer(kCacheMinBytes);
  ReadOnlyMapping client(*w);
  w->set_epoch(0, 1);
  std::atomic<bool> stop{false};
  Verdict verdict;
  std::thread reader([&] { verdict = read_until(client.reader, stop, 600); });
  const std::uint64_t rounds = batchd::test::scaled(200'000, 20'000);
  for (std::uint64_t i = 0; i < rounds; ++i) {
    const std::string key = churn_key(i);
    w->insert(0, 0, key, answer_of(key));
  }
  stop = true;
  reader.join();
  MESSAGE("hits " << verdict.hits << ", misses " << verdict.misses << ", evictions " << w->counts().evictions);
  CHECK(verdict.wrong == 0);
  CHECK(verdict.hits > 0);
  CHECK(w->counts().evictions > 0);
}

TEST_CASE("a reader process racing the writer through eviction churn never gets a wrong answer") {
  auto w = make_writer(kCacheMinBytes);
  w->set_epoch(0, 1);
  std::atomic<bool>* stop = static_cast<std::atomic<bool>*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(stop != MAP_FAILED);
  new (stop) std::atomic<bool>(false);
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Its own read-only mapping, as a client's.
    auto map = map_fd(w->fd(), w->bytes(), false);
    if (!map) ::_exit(2);
    auto reader = CacheReader::open(map->get_address(), w->bytes());
    if (!reader) ::_exit(3);
    const Verdict v = read_until(*reader, *stop, 600);
    (void)!::write(report[1], &v, sizeof(v));
    ::_exit(0);
  }
  const std::uint64_t rounds = batchd::test::scaled(300'000, 30'000);
  for (std::uint64_t i = 0; i < rounds; ++i) {
    const std::string key = churn_key(i);
    w->insert(0, 0, key, answer_of(key));
  }
  stop->store(true);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  Verdict v;
  REQUIRE(::read(report[0], &v, sizeof(v)) == sizeof(v));
  ::close(report[0]);
  ::close(report[1]);
  ::munmap(stop, 4096);
  MESSAGE("reader process: hits " << v.hits << ", misses " << v.misses);
  CHECK(v.wrong == 0);
  CHECK(v.hits > 0);
}

TEST_CASE("a client cannot write the cache: no writable mapping, and a write through its own faults") {
  auto w = make_writer(kCacheMinBytes);
  w->set_epoch(0, 1);
  REQUIRE(w->insert(0, 0, "key", "the answer"));
  errno = 0;
  void* writable = ::mmap(nullptr, w->bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, w->fd(), 0);
  CHECK(writable == MAP_FAILED);
  CHECK(errno == EPERM);
  ReadOnlyMapping client(*w);
  CHECK(::mprotect(client.map.get_address(), 4096, PROT_READ | PROT_WRITE) != 0);
  const int status = batchd::test::write_in_child(client.map.get_address(), client.reader.geometry().log_offset + 40);
  CHECK_MESSAGE(batchd::test::faulted(status), batchd::test::describe_exit(status));
  std::string out;
  REQUIRE(client.reader.lookup(0, 0, "key", out));
  CHECK(out == "the answer");
}
