// Run under mpiexec -n 2: 2 dp ranks × micro-batch B train like 1 rank × micro-batch 2B, and
// the replicas stay bitwise identical.
#include <catch2/catch.hpp>

#include <cstring>

#include "../support/corpus.hpp"
#include "../support/mpi_util.hpp"
#include "../support/training.hpp"
#include "gridtrain/app/trainer.hpp"

using namespace gridtrain;

namespace {
Config small_config(const std::string& data) {
  Config c = parse_config("", "test", {});
  c.data.path = data;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.block_size = 16;
  c.train.steps = 5;
  c.train.eval_samples = 8;
  c.train.eval_interval = 0;
  c.optim.warmup_steps = 2;
  c.output.dir = test::temp_dir("dp-eq");
  return c;
}

std::vector<float> flat(Model& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    auto c = p.contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}
}  // namespace

TEST_CASE("2 dp ranks x micro-batch B == 1 rank x micro-batch 2B", "[np2]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path =
      test::bcast(rank == 0 ? test::make_corpus(test::temp_dir("dp-eq-data"), 20000) : "", MPI_COMM_WORLD);

  Config c = small_config(path);
  c.train.micro_batch = 4;
  c.train.global_batch = 8;
  QuietTrainer dp2(c);
  const RunResult r2 = dp2.run();
  const auto w2 = flat(dp2.model());

  c.train.micro_batch = 8;
  QuietTrainer dp1(c, MPI_COMM_SELF);
  const RunResult r1 = dp1.run();

  REQUIRE(r1.losses.size() == 5);
  REQUIRE(r2.losses.size() == 5);
  for (std::size_t s = 0; s < r1.losses.size(); ++s) {
    CHECK(r2.losses[s] == Approx(r1.losses[s]).epsilon(1e-5));
    CHECK(r2.grad_norms[s] == Approx(r1.grad_norms[s]).epsilon(1e-5));
  }
  CHECK(r2.losses.back() < r2.losses.front());
  CHECK(test::rel_diff(dp2.model(), dp1.model()) <= 1e-5);

  // Bitwise-identical replicas: compare rank 1's weights with rank 0's.
  std::vector<float> other(w2.size());
  if (rank == 0) MPI_Recv(other.data(), static_cast<int>(other.size()), MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rank == 1) MPI_Send(w2.data(), static_cast<int>(w2.size()), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
  if (rank == 0) CHECK(std::memcmp(other.data(), w2.data(), w2.size() * sizeof(float)) == 0);
}

TEST_CASE("gradient accumulation: micro-batch B with 2 accumulation steps == micro-batch 2B", "[np2]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Config c = small_config(test::make_corpus(test::temp_dir("accum-data-" + std::to_string(rank)), 20000));
  c.train.micro_batch = 4;
  c.train.global_batch = 8;
  QuietTrainer accum(c, MPI_COMM_SELF);
  REQUIRE(accum.accumulation() == 2);
  const auto ra = accum.run();
  c.train.micro_batch = 8;
  QuietTrainer whole(c, MPI_COMM_SELF);
  const auto rw = whole.run();
  REQUIRE(ra.losses.size() == rw.losses.size());
  REQUIRE(!ra.losses.empty());
  for (std::size_t s = 0; s < ra.losses.size(); ++s) CHECK(ra.losses[s] == Approx(rw.losses[s]).epsilon(1e-5));
}

TEST_CASE("training with overlap on is bitwise identical to overlap off", "[np2]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path =
      test::bcast(rank == 0 ? test::make_corpus(test::temp_dir("overlap-data"), 20000) : "", MPI_COMM_WORLD);
  Config c = small_config(path);
  c.train.micro_batch = 2;
  c.train.global_batch = 8;  // 2 accumulation micro-batches per rank
  c.comm.bucket_mb = 0.01;   // several buckets
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<double>> losses;
  for (bool overlap : {false, true}) {
    c.comm.overlap = overlap;
    QuietTrainer t(c);
    losses.push_back(t.run().losses);
    weights.push_back(flat(t.model()));
  }
  REQUIRE(losses[0].size() == static_cast<std::size_t>(c.train.steps));
  CHECK(losses[0] == losses[1]);
  REQUIRE(weights[0].size() == weights[1].size());
  CHECK(std::memcmp(weights[0].data(), weights[1].data(), weights[0].size() * sizeof(float)) == 0);
}
