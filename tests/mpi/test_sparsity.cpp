// Dynamic sparse training on every layout: gmp, set and rigl at (dp, tp, pp, ZeRO) layouts make
// the one-rank run's masks (bit for bit, gathered through the layout's checkpoint) and losses;
// resume is bit-exact; the masks hold (masked weights and optimizer state are zero) and the report
// counts them; the distributed top-k matches a sort of the whole tensor.
// Run under mpiexec -n 2, 4 and 8.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <mpi.h>

#include "../support/training.hpp"
#include "gridtrain/sparse/top_k.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// A 4-layer, 8-head language model every layout below can split, with `method` to 75 % zeros:
// mask updates after steps 0, 2, 4 and 5 (the end), half of the active weights dropped at the
// first regrowth; clipping active on every step.
Config sparse_lm(const std::string& dir, int steps, SparsityMethod method, int dp, int tp, int pp, int zero,
                 const std::string& family = "gpt") {
  Config c = tiny(dir, steps, 8);
  c.model.n_layer = 4;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c.optim.clip_grad = 0.1;
  c.optim.zero_stage = zero;
  c.grid.dp = dp, c.grid.tp = tp, c.grid.pp = pp;
  c = as_family(c, family);
  if (c.model.type == ModelType::Llama && tp > c.model.n_kv_head) c.model.n_kv_head = tp;
  c.sparsity.method = method;
  c.sparsity.target = 0.75;
  c.sparsity.interval = 2;
  c.sparsity.end = 5;
  c.sparsity.drop_fraction = 0.5;
  return c;
}

std::map<std::string, torch::Tensor> masks_of(Trainer& t) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& m : test::sparsity(t)->masks()) out[m.name] = m.param.clone();
  return out;
}

// On every rank alone: the one-rank run, and the layout's final state gathered from its
// checkpoint. The same losses and norms, the same masks bit for bit, the same weights.
void check_sparse_layout(const Config& layout, const RunResult& got, const Config& one) {
  QuietTrainer ref(one, MPI_COMM_SELF);
  const auto want = ref.run();
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(rel(got.losses[s], want.losses[s]) <= 1e-6);
    CHECK(rel(got.grad_norms[s], want.grad_norms[s]) <= 1e-5);
  }
  QuietTrainer loaded(resuming(one, layout.checkpoint.dir), MPI_COMM_SELF);
  const auto a = masks_of(loaded), b = masks_of(ref);
  REQUIRE(a.size() == b.size());
  REQUIRE(!b.empty());
  for (const auto& [name, m] : b) {
    CAPTURE(name);
    CHECK(torch::equal(a.at(name), m));
  }
  std::map<std::string, torch::Tensor> ref_weights;
  for (const auto& p : ref.model().named_parameters(true)) ref_weights[p.key()] = p.value();
  for (const auto& p : loaded.model().named_parameters(true)) {
    CAPTURE(p.key());
    CHECK(torch::allclose(p.value(), ref_weights.at(p.key()), 1e-5, 1e-6));
  }
}

}  // namespace

TEST_CASE("gmp, set and rigl at (dp, tp, pp, ZeRO) layouts make the one-rank run's masks and losses", "[np8]") {
  struct Layout {
    int dp, tp, pp, zero;
  };
  const auto method = GENERATE(SparsityMethod::Gmp, SparsityMethod::Set, SparsityMethod::Rigl);
  const std::string name = name_of(method);
  const auto dir = shared_dir("sparse-layouts-" + name);
  for (const Layout k : {Layout{2, 2, 2, 1}, Layout{1, 4, 2, 0}, Layout{4, 2, 1, 3}}) {
    CAPTURE(name, k.dp, k.tp, k.pp, k.zero);
    Config layout = sparse_lm(dir, 7, method, k.dp, k.tp, k.pp, k.zero);
    layout.checkpoint.dir = dir + "/ckpt-" + std::to_string(k.dp) + std::to_string(k.tp) + std::to_string(k.pp);
    layout.output.overwrite = true;
    const auto got = quiet_run(layout);
    check_sparse_layout(layout, got, sparse_lm(dir, 7, method, 1, 1, 1, 0));
  }
}

TEST_CASE("rigl of matrices, the tied embedding and a tp-padded vocabulary at (2, 4, 1), and of a llama at (2, 2, 2) "
          "with ZeRO 2, make the one-rank run's masks and losses", "[np8]") {
  const auto dir = shared_dir("sparse-embedding");
  auto config = [&](int dp, int tp, int pp, int zero, const std::string& family) {
    Config c = sparse_lm(dir, 7, SparsityMethod::Rigl, dp, tp, pp, zero, family);
    if (family == "gpt") {
      c.model.vocab_size = 257;  // 65 rows per tp rank, the last with 3 rows of padding
      c.sparsity.tensors = {TensorClass::Matrix, TensorClass::Embedding};
      c.sparsity.distribution = SparsityDistribution::Erk;
    }
    return c;
  };
  for (const std::string family : {"gpt", "llama"}) {
    CAPTURE(family);
    Config layout = family == "gpt" ? config(2, 4, 1, 0, family) : config(2, 2, 2, 2, family);
    layout.checkpoint.dir = dir + "/ckpt-" + family;
    layout.output.overwrite = true;
    const auto got = quiet_run(layout);
    check_sparse_layout(layout, got, config(1, 1, 1, 0, family));
  }
}

TEST_CASE("sparse training resumes bit for bit, masks included, at ZeRO 0 and 2 (gpt) and for the cnn", "[np2]") {
  const auto method = GENERATE(SparsityMethod::Gmp, SparsityMethod::Set, SparsityMethod::Rigl);
  const std::string name = name_of(method);
  const auto dir = shared_dir("sparse-resume-" + name), images = shared_image_dir("sparse-resume-cnn-" + name);
  for (int zero : {0, 2}) {
    CAPTURE(name, zero);
    check_resume(dir + "/ckpt-" + std::to_string(zero), [&](int steps) {  // resumed at step 4, a mask update
      return sparse_lm(dir, steps, method, 2, 1, 1, zero);
    }, 4, 8);
  }
  check_resume(images + "/ckpt", [&](int steps) {
    Config c = tiny_cnn(images, steps, 8);
    c.sparsity = sparse_lm(dir, steps, method, 2, 1, 1, 0).sparsity;
    return c;
  }, 3, 8);
}

TEST_CASE("masks hold: masked weights and optimizer state are zero, the report counts the target, rigl regrows",
          "[np2]") {
  const auto dir = shared_image_dir("sparse-masks");
  auto config = [&](int steps, SparsityMethod method, int zero) {
    Config c = tiny_cnn(dir, steps, 8);
    c.optim.zero_stage = zero;
    c.sparsity = sparse_lm(dir, steps, method, 2, 1, 1, 0).sparsity;
    c.sparsity.target = 0.8;
    c.sparsity.end = 6;
    return c;
  };
  for (int zero : {0, 1}) {
    CAPTURE(zero);
    QuietTrainer t(config(7, SparsityMethod::Set, zero));
    t.run();
    const SparsityReport r = test::sparsity(t)->report();
    CHECK(r.sparsified == Approx(0.8).margin(1e-3));  // each tensor's k rounded to a whole element
    const auto conv = std::find_if(r.by_class.begin(), r.by_class.end(), [](auto& c) { return c.first == "conv"; });
    REQUIRE(conv != r.by_class.end());
    CHECK(conv->second == Approx(0.8).margin(1e-3));
    for (const auto& [cls, zeros] : r.by_class)
      if (cls != "conv") CHECK(zeros == 0.0);  // the head and the batch-norm vectors stay dense
    CHECK(r.layer_flops_per_item == Approx(0.2 * r.layer_dense_flops_per_item).epsilon(1e-3));
    CHECK(r.flops_per_item == Approx(r.dense_flops_per_item - r.layer_dense_flops_per_item + r.layer_flops_per_item));
    std::map<std::string, torch::Tensor> state;
    for (const auto& s : t.optimizer().state()) state[s.name] = s.param;
    for (const auto& m : test::sparsity(t)->masks()) {
      const std::string param = m.name.substr(0, m.name.find('/'));
      CAPTURE(param);
      const auto off = m.param.eq(0);  // at ZeRO 1 a rank's piece of a small tensor may be empty
      for (const auto& suffix : {"/exp_avg", "/exp_avg_sq"})
        CHECK(state.at(param + suffix).masked_select(off).abs().sum().item<float>() == 0.0f);
    }
    if (zero == 0) {  // whole masks over whole weights (at ZeRO 1 they are pieces of the flat buffers)
      const auto params = t.model().named_parameters(true);
      for (const auto& m : test::sparsity(t)->masks())
        CHECK(params[m.name.substr(0, m.name.find('/'))].masked_select(m.param.eq(0)).abs().sum().item<float>() == 0.0f);
    }
  }
  // rigl: the masks after step 3 (update at 2: half dropped and regrown) differ from those after
  // step 1 (the initial pruning), by at most the regrown count twice; gmp is dense before start.
  auto masks_after = [&](int steps, SparsityMethod method) {
    QuietTrainer t(config(steps, method, 0));
    t.run();
    return masks_of(t);
  };
  const auto first = masks_after(1, SparsityMethod::Rigl), later = masks_after(3, SparsityMethod::Rigl);
  double changed = 0, active = 0;
  for (const auto& [name, m] : first) changed += m.ne(later.at(name)).sum().item<double>(), active += m.sum().item<double>();
  CHECK(changed > 0);
  CHECK(changed <= 2 * std::ceil(0.5 * active) + 2);
  // RigL's FLOPs over its 7 steps: step 0 ran dense (pruned after it), steps 1-6 at density 0.2, and
  // its regrowing updates (after steps 2 and 4; not the first, not at the end) computed the dense
  // weight gradient: 2 f_S + f_D instead of 3 f_S.
  QuietTrainer rigl(config(7, SparsityMethod::Rigl, 0));
  rigl.run();
  const SparsityReport r = test::sparsity(rigl)->report();
  CHECK(r.mean_layer_flops_per_item ==
        Approx((1.0 + 6 * 0.2 + 2 * 0.8 / 3.0) / 7.0 * r.layer_dense_flops_per_item).epsilon(1e-12));
  Config late = config(3, SparsityMethod::Gmp, 0);
  late.sparsity.start = 4;
  QuietTrainer t(late);
  t.run();
  CHECK(test::sparsity(t)->report().sparsified == 0.0);
  Config none = config(1, SparsityMethod::Gmp, 0);  // a class the cnn lacks: refused on every rank
  none.sparsity.tensors = {TensorClass::Embedding};
  CHECK_THROWS_WITH(QuietTrainer(none),
                    Catch::Contains("sparsity.tensors = embedding: model.type = cnn has no parameter of these classes; "
                                    "valid: classes it has: conv, head, vector"));
}

TEST_CASE("distributed top-k over 4 ranks' interleaved parts selects what a sort of the whole tensor does", "[np4]") {
  const std::int64_t n = 4000;
  std::mt19937 rng(11);  // the same global tensor on every rank
  std::vector<int> keys(n);
  for (auto& k : keys) k = static_cast<int>(rng() % 50) - 1;
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return keys[a] != keys[b] ? keys[a] > keys[b] : a < b; });
  const int rank = world_rank(), size = world_size();
  std::vector<int> my_keys;
  std::vector<std::int64_t> my_index;
  for (std::int64_t i = (rank * 7) % size; i < n; i += size) my_keys.push_back(keys[i]), my_index.push_back(i);
  auto sum = [](std::vector<double>& c) {
    MPI_Allreduce(MPI_IN_PLACE, c.data(), static_cast<int>(c.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  };
  const auto candidates = std::count_if(keys.begin(), keys.end(), [](int k) { return k >= 0; });
  for (std::int64_t k : {std::int64_t{1}, std::int64_t{999}, std::int64_t{candidates}}) {
    CAPTURE(k);
    const auto got = select_top_k({{torch::tensor(my_keys, torch::kInt), torch::tensor(my_index, torch::kLong), n, k,
                                    true}}, sum)[0];
    const std::set<std::int64_t> want(order.begin(), order.begin() + k);
    for (std::size_t i = 0; i < my_index.size(); ++i)
      CHECK(got[static_cast<std::int64_t>(i)].item<bool>() == want.contains(my_index[i]));
    double selected = got.sum().item<double>();
    MPI_Allreduce(MPI_IN_PLACE, &selected, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(selected == static_cast<double>(k));
  }
}

// At sparsity.target = 0 every mask update keeps every weight: set and rigl drop and regrow the
// same connections, which keep their values (only connections new to the mask start at zero), so
// the run is the dense one bit for bit, and setup says that nothing is pruned. At a real target,
// the zeros the weights hold after training are the zeros the report counts.
TEST_CASE("sparsity at target 0 is the dense run bit for bit; the report counts the weights' zeros", "[np2]") {
  const auto dir = shared_dir("sparse-target0");
  Config dense = sparse_lm(dir, 7, SparsityMethod::None, 2, 1, 1, 0);
  QuietTrainer want(dense);
  const auto want_run = want.run();
  for (auto method : {SparsityMethod::Set, SparsityMethod::Rigl, SparsityMethod::Gmp}) {
    CAPTURE(name_of(method));
    Config c = sparse_lm(dir, 7, method, 2, 1, 1, 0);
    c.sparsity.target = 0.0;
    QuietTrainer t(c);
    CHECK_THAT(test::sparsity(t)->never_prunes(), Catch::Contains("sparsity.target = 0: no weight is ever pruned"));
    const auto got = t.run();
    check_same_run(got, want_run, 0.0);
    const auto a = t.model().named_parameters(true), b = want.model().named_parameters(true);
    for (const auto& p : b) {
      CAPTURE(p.key());
      CHECK(torch::equal(a[p.key()], p.value()));
    }
    CHECK(test::sparsity(t)->report().sparsified == 0.0);
  }
  Config late = sparse_lm(dir, 7, SparsityMethod::Rigl, 2, 1, 1, 0);
  late.sparsity.start = 8;
  late.sparsity.end = 9;
  QuietTrainer late_run(late);
  CHECK_THAT(test::sparsity(late_run)->never_prunes(),
             Catch::Contains("sparsity.start = 8 is past train.steps = 7"));
  // rigl to 75 %: its last update (step 5) regrew connections at zero, which step 6 trained.
  QuietTrainer rigl(sparse_lm(dir, 7, SparsityMethod::Rigl, 2, 1, 1, 0));
  rigl.run();
  CHECK(test::sparsity(rigl)->never_prunes().empty());
  const auto params = rigl.model().named_parameters(true);
  double zeros = 0, elements = 0;
  for (const auto& m : test::sparsity(rigl)->masks()) {
    const auto& w = params[m.name.substr(0, m.name.find('/'))];
    zeros += w.eq(0).sum().item<double>(), elements += static_cast<double>(w.numel());
  }
  CHECK(zeros / elements == Approx(test::sparsity(rigl)->report().sparsified).epsilon(1e-12));
  CHECK(zeros / elements == Approx(0.75).margin(1e-2));
}
