// The submission ring between two processes, and its full and corrupt cases.
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/memfd_region.hpp"
#include "shm/ring.hpp"
#include "shm/segment_view.hpp"
#include "tests/helpers.hpp"

using namespace batchd::shm;

namespace {

struct SharedSegment {
  Geometry geometry;
  UniqueFd request_fd, completion_fd;
  boost::interprocess::mapped_region request, completion;
  SegmentView view;

  explicit SharedSegment(std::uint32_t slots)
      : geometry(compute_geometry(SegmentParams{slots, 64, 256})),
        request_fd(create_memfd("test-req", geometry.request_region_bytes).value()),
        completion_fd(create_memfd("test-comp", geometry.completion_region_bytes).value()),
        request(map_fd(request_fd.get(), geometry.request_region_bytes, true).value()),
        completion(map_fd(completion_fd.get(), geometry.completion_region_bytes, true).value()),
        view(geometry, request.get_address(), completion.get_address()) {}

  RingProducer producer() const {
    return RingProducer(view.ring_tail(), view.ring_entries(), view.completion_header(),
                        view.slot_count());
  }
  RingConsumer consumer() const {
    return RingConsumer(view.ring_tail(), view.ring_entries(), view.completion_header(),
                        view.slot_count());
  }
};

}  // namespace

TEST_CASE("a producer process and a consumer process pass every item once, in order") {
  SharedSegment seg(1024);
  RingConsumer consumer = seg.consumer();  // zeroes the head before the producer starts
  const std::uint64_t items = batchd::test::scaled(1'000'000, 100'000);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    RingProducer producer = seg.producer();
    for (std::uint64_t i = 0; i < items;) {
      if (producer.try_push(i)) {
        ++i;
      } else {
        sched_yield();  // full: on two cores the consumer needs the CPU
      }
    }
    ::_exit(0);
  }
  std::uint64_t expected = 0;
  std::uint64_t out_of_order = 0;
  while (expected < items) {
    if (!consumer.refresh()) FAIL("producer position became impossible");
    if (consumer.available() == 0) {
      sched_yield();
      continue;
    }
    while (consumer.available() > 0) {
      if (consumer.peek() != expected) ++out_of_order;
      consumer.pop();
      ++expected;
    }
    consumer.publish();
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out_of_order == 0);
  CHECK(expected == items);
  const bool extra = consumer.refresh() && consumer.available() > 0;
  CHECK_FALSE(extra);  // nothing extra, no duplicate
}

TEST_CASE("a full ring refuses the producer until the consumer frees space") {
  SharedSegment seg(8);
  RingConsumer consumer = seg.consumer();
  RingProducer producer = seg.producer();
  for (std::uint64_t i = 0; i < 8; ++i) REQUIRE(producer.try_push(i));
  CHECK_FALSE(producer.try_push(99));
  REQUIRE(consumer.refresh());
  CHECK(consumer.available() == 8);
  consumer.pop();
  CHECK_FALSE(producer.try_push(99));  // not yet published
  consumer.publish();
  CHECK(producer.try_push(99));
  CHECK_FALSE(producer.try_push(100));
}

TEST_CASE("staged entries stay invisible until one publish shows them all") {
  SharedSegment seg(8);
  RingConsumer consumer = seg.consumer();
  RingProducer producer = seg.producer();
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(producer.try_stage(i + 10));
  REQUIRE(consumer.refresh());
  CHECK(consumer.available() == 0);
  producer.publish();
  REQUIRE(consumer.refresh());
  REQUIRE(consumer.available() == 3);
  for (std::uint64_t i = 0; i < 3; ++i) {
    CHECK(consumer.peek() == i + 10);
    consumer.pop();
  }
  // Staging counts against the ring's capacity like a push.
  for (std::uint64_t i = 0; i < 5; ++i) REQUIRE(producer.try_stage(i));
  CHECK_FALSE(producer.try_stage(99));  // 3 popped but not yet published by the consumer
  consumer.publish();
  CHECK(producer.try_stage(99));
}

TEST_CASE("the consumer refuses a producer position that is impossible") {
  SharedSegment seg(8);
  RingConsumer consumer = seg.consumer();
  seg.view.ring_tail()->tail.store(9);  // more than a ring ahead
  CHECK_FALSE(consumer.refresh());
  seg.view.ring_tail()->tail.store(~std::uint64_t{0});  // behind the consumer
  CHECK_FALSE(consumer.refresh());
  seg.view.ring_tail()->tail.store(8);
  CHECK(consumer.refresh());
  CHECK(consumer.available() == 8);
}
