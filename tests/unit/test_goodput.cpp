// Goodput over a lineage (output/goodput.hpp) on synthetic attempts with chosen clocks, and the
// local part's image (checkpoint/local_part.hpp): round trip, a flipped byte, file names.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gridtrain/checkpoint/local_part.hpp"
#include "gridtrain/output/goodput.hpp"

using namespace gridtrain;

namespace {

// A metrics.jsonl line of `ledger`'s attempt at `step`, as Thermo writes it (the parts the ledger reads).
std::string line(const GoodputLedger& ledger, long long step, double loop, double ckpt, double eval, double now) {
  return "{\"step\": " + std::to_string(step) + ", \"elapsed_s\": " + std::to_string(loop) +
         ", \"goodput\": " + ledger.line_field(loop, ckpt, eval, now) + "}";
}

}  // namespace

TEST_CASE("goodput adds up the attempts of a lineage: kept, lost and restart time", "[goodput]") {
  // Attempt 1 starts at t = 1000 after 10 s of start-up; thermo lines at steps 10, 20, 30.
  const GoodputLedger first({}, 0, 10.0, 1000.0);
  std::vector<std::string> lines = {line(first, 10, 100, 5, 2, 1100), line(first, 20, 200, 10, 4, 1200),
                                    line(first, 30, 300, 15, 6, 1300)};
  const Goodput one = first.totals(300, 15, 6, 1300);
  CHECK(one.attempts == 1);
  CHECK(one.wall_s == Approx(310));
  CHECK(one.productive_s == Approx(300 - 15 - 6));
  CHECK(one.restart_s == Approx(10));
  CHECK(one.other_s() == Approx(0).margin(1e-9));
  // It dies after its last line; attempt 2 resumes from step 20 (its newest complete level), its
  // start-up of 20 s ending at t = 1400: steps 21-30 (100 s of loop) were lost, 1300 → 1380 restart.
  const GoodputLedger second(lines, 20, 20.0, 1400.0);
  const Goodput two = second.totals(50, 1, 1, 1450);
  CHECK(two.attempts == 2);
  CHECK(two.wall_s == Approx(460));
  CHECK(two.productive_s == Approx((200 - 10 - 4) + (50 - 1 - 1)));
  CHECK(two.lost_s == Approx(100));
  CHECK(two.restart_s == Approx(10 + 80 + 20));
  CHECK(two.checkpoint_s == Approx(10 + 1));
  CHECK(two.eval_s == Approx(4 + 1));
  CHECK(two.other_s() == Approx(460 - 234 - 100 - 110 - 11 - 5));
  // Attempt 3 reads attempt 2's lines after attempt 1's: only the last attempt's are its own.
  lines.push_back(line(second, 25, 50, 1, 1, 1450));
  const GoodputLedger third(lines, 25, 5.0, 1500.0);
  const Goodput three = third.totals(0, 0, 0, 1500);
  CHECK(three.attempts == 3);
  CHECK(three.productive_s == Approx(two.productive_s));
  CHECK(three.lost_s == Approx(100));
  CHECK(three.restart_s == Approx(110 + 45 + 5));
  CHECK(goodput_table(three).find("Lost (recomputed)") != std::string::npos);
}

TEST_CASE("a fresh run or lines without goodput start a new account", "[goodput]") {
  const GoodputLedger fresh({"{\"step\": 5, \"goodput\": {\"attempt\": 7}}"}, 0, 1.0, 10.0);
  CHECK(fresh.totals(0, 0, 0, 10).attempts == 1);
  const GoodputLedger old({"{\"step\": 5, \"loss\": 1.0}"}, 5, 1.0, 10.0);
  CHECK(old.totals(2, 0, 0, 12).attempts == 1);
  CHECK(old.totals(2, 0, 0, 12).wall_s == Approx(3));
}

TEST_CASE("a local part round-trips, and a flipped byte fails its checksum", "[local_part]") {
  PartHeader h;
  h.run_id = "0123456789abcdef";
  h.step = 40;
  h.rank = 3;
  h.world = 8;
  h.fingerprint = "feed";
  h.sample_index = 1234;
  PartImage image;
  image.begin(h, {{"/model/w", 12}, {"/rng/cpu", 5}});
  for (int i = 0; i < 12; ++i) image.blob(0)[i] = static_cast<unsigned char>(i);
  for (int i = 0; i < 5; ++i) image.blob(1)[i] = static_cast<unsigned char>(100 + i);
  image.seal();
  PartImage read;
  read.buffer() = image.bytes();
  read.parse();
  CHECK(read.header().run_id == h.run_id);
  CHECK(read.header().step == 40);
  CHECK(read.header().rank == 3);
  CHECK(read.header().sample_index == 1234);
  const auto [p, n] = read.find("/rng/cpu");
  REQUIRE(n == 5);
  CHECK(p[4] == 104);
  CHECK(read.names() == std::vector<std::string>{"/model/w", "/rng/cpu"});
  CHECK_THROWS_WITH(read.find("/optim/m"), Catch::Contains("holds no /optim/m"));
  for (std::size_t at : {std::size_t{0}, std::size_t{20}, image.bytes().size() - 12, image.bytes().size() - 1}) {
    CAPTURE(at);
    PartImage bad;
    bad.buffer() = image.bytes();
    bad.buffer()[at] ^= 0x01;
    CHECK_THROWS(bad.parse());
  }
  PartImage cut;
  cut.buffer().assign(image.bytes().begin(), image.bytes().end() - 8);
  CHECK_THROWS(cut.parse());
}

TEST_CASE("local part file names and partners", "[local_part]") {
  CHECK(part_name(3, 3) == "rank-00003.part");
  CHECK(part_name(3, 5) == "rank-00003.partner-00005.part");
  CHECK(part_ranks("x/rank-00003.part") == std::pair{3, 3});
  CHECK(part_ranks("x/rank-00003.partner-00005.part") == std::pair{3, 5});
  CHECK(part_ranks("x/rank-00003.part.tmp") == std::pair{-1, -1});
  CHECK(part_ranks("x/rank-00003.partner-00003.part") == std::pair{-1, -1});
  CHECK(part_ranks("x/rank-3x.part") == std::pair{-1, -1});
  CHECK(partner_of(0, 8, 4) == 4);
  CHECK(partner_of(6, 8, 4) == 2);
  CHECK(partner_of(1, 2, 1) == 0);
}
