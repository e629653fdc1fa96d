// Document-aware training (model/documents.hpp) on one rank: positions and the block-diagonal
// causal mask against a loop over the tokens; the gradients of documents packed into windows
// with the mask equal the sum of each document's gradients trained alone, for gpt and llama with
// both attention kernels; a document's hidden states do not depend on the document before it.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/documents.hpp"
#include "gridtrain/model/registry.hpp"

using namespace gridtrain;

namespace {

constexpr std::int64_t kEod = 0;  // the test vocabulary's end-of-document token
constexpr int kVocab = 50, kT = 16;

Config model_config(const std::string& family, const std::string& attention) {
  std::vector<std::string> args = {"--model.type=" + family, "--model.n_layer=2", "--model.n_head=4",
                                   "--model.n_embd=32", "--model.block_size=" + std::to_string(kT),
                                   "--model.attention=" + attention, "--data.reset_position_ids=true",
                                   "--data.document_mask=true", "--data.eod_mask_loss=true"};
  if (family == "llama") args.push_back("--model.n_kv_head=2");
  return parse_config("", "test", args);
}

std::shared_ptr<Model> make(const Config& c) {
  auto m = make_model(c, DataShape{kVocab, static_cast<int>(kEod)});
  m->initialize(7);
  return m;
}

// A document of n tokens drawn from 1 .. V−1, ended by the end-of-document token when `ended`.
std::vector<std::int64_t> document(int n, bool ended, std::uint64_t seed) {
  std::vector<std::int64_t> d;
  for (int i = 0; i < n; ++i) d.push_back(1 + static_cast<std::int64_t>((seed * 2654435761u + 97u * i) % (kVocab - 1)));
  if (ended) d.back() = kEod;
  return d;
}

torch::Tensor row(const std::vector<std::vector<std::int64_t>>& docs) {
  std::vector<std::int64_t> all;
  for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
  return torch::tensor(all, torch::kLong);
}

std::map<std::string, torch::Tensor> gradients(Model& m) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : m.named_parameters(true)) g[p.key()] = p.value().grad().clone();
  return g;
}

}  // namespace

TEST_CASE("documents: positions restart after each end-of-document token, and a token attends within its document",
          "[documents]") {
  const lm::DocumentRules rules{kEod, true, true, true};
  const auto ids = torch::stack({row({{3, 4, kEod}, {5, kEod}, {6, 7, 8}}), row({{kEod}, {9, 9, 9, 9, 9, 9, 9}})});
  const lm::Documents d = lm::documents(ids, rules);
  REQUIRE(d.positions.sizes() == torch::IntArrayRef{2, 8});
  REQUIRE(d.attend.sizes() == torch::IntArrayRef{2, 1, 8, 8});
  for (int b = 0; b < 2; ++b) {
    int start = 0;  // where the document of token t began
    for (int t = 0; t < 8; ++t) {
      if (t > 0 && ids[b][t - 1].item<std::int64_t>() == kEod) start = t;
      CAPTURE(b, t);
      CHECK(d.positions[b][t].item<std::int64_t>() == t - start);
      for (int j = 0; j < 8; ++j) CHECK(d.attend[b][0][t][j].item<bool>() == (j >= start && j <= t));
    }
  }
  // The loss targets: kNoLoss where the input is the end-of-document token.
  const auto targets = lm::loss_targets(ids, ids + 100, rules);
  CHECK(torch::equal(targets == lm::kNoLoss, ids == kEod));
  CHECK(torch::equal(lm::loss_targets(ids, ids, {kEod, true, true, false}), ids));
  // Without the keys, nothing is built.
  const lm::Documents none = lm::documents(ids, {kEod, false, false, true});
  CHECK(!none.positions.defined());
  CHECK(!none.attend.defined());
}

TEST_CASE("documents: gradients of documents packed with the mask equal the documents' gradients one per row",
          "[documents]") {
  const auto family = GENERATE(as<std::string>{}, "gpt", "llama");
  const auto attention = GENERATE(as<std::string>{}, "sdpa", "math");
  CAPTURE(family, attention);
  const Config c = model_config(family, attention);
  // Two windows of T + 1 tokens; each window's last document runs into the next window's targets.
  const std::vector<std::vector<std::vector<std::int64_t>>> windows = {
      {document(5, true, 1), document(7, true, 2), document(5, false, 3)},
      {document(3, true, 4), document(9, true, 5), document(5, false, 6)}};
  auto packed = make(c);
  const auto rows = torch::stack({row(windows[0]), row(windows[1])});  // (2, T + 1)
  REQUIRE(rows.size(1) == kT + 1);
  const auto [idx, targets] = packed->split(rows);
  // The predictions from the two windows' end-of-document tokens carry no loss; the loss trained
  // is the mean over the others.
  const double items = packed->items(targets);
  CHECK(items == 2 * kT - 4);
  const auto packed_loss = packed->head_loss_sum(packed->stage_forward(idx, 0, idx), targets) / items;
  packed_loss.backward();

  auto alone = make(c);
  torch::Tensor alone_loss = torch::zeros({});
  for (const auto& window : windows)
    for (const auto& doc : window) {
      const auto t = torch::tensor(doc, torch::kLong).unsqueeze(0);  // (1, n): its own row
      const auto in = t.slice(1, 0, t.size(1) - 1), out = t.slice(1, 1);
      const auto loss = alone->head_loss_sum(alone->stage_forward(in, 0, in), out) / items;
      loss.backward();
      alone_loss += loss.detach();
    }
  CHECK(packed_loss.item<double>() == Approx(alone_loss.item<double>()).epsilon(1e-6));
  // The bound, 1e-6, on gradients of the mean loss: they are O(1e-2) here, and the two
  // computations differ only in fp32 summation order (a few ulps of 1e-2, ~1e-9), whatever the kernels.
  const auto a = gradients(*packed), b = gradients(*alone);
  for (const auto& [name, g] : a) {
    CAPTURE(name);
    CHECK((g - b.at(name)).abs().max().item<double>() <= 1e-6);
    CHECK(g.abs().max().item<double>() > 1e-5);  // every parameter takes part
  }
}

TEST_CASE("documents: changing document 1 leaves document 2's hidden states unchanged, and without the mask it does not",
          "[documents]") {
  const auto family = GENERATE(as<std::string>{}, "gpt", "llama");
  const auto attention = GENERATE(as<std::string>{}, "sdpa", "math");
  CAPTURE(family, attention);
  torch::NoGradGuard no_grad;
  for (bool masked : {true, false}) {
    CAPTURE(masked);
    Config c = model_config(family, attention);
    c.data.document_mask = c.data.reset_position_ids = masked;
    auto m = make(c);
    const auto second = document(10, false, 9);
    const auto before = row({document(6, true, 1), second}).unsqueeze(0), after = row({document(6, true, 2), second}).unsqueeze(0);
    REQUIRE(!torch::equal(before, after));
    const auto h0 = m->stage_forward(before, 0, before).slice(1, 6), h1 = m->stage_forward(after, 0, after).slice(1, 6);
    // Masked keys weigh exp(−inf) = 0 exactly, so only blocked-softmax rescaling can move document
    // 2's states (ulps of O(1) values, far below 1e-6); unmasked, a different document 1 moves them
    // by O(0.1).
    const double change = (h0 - h1).abs().max().item<double>();
    if (masked) CHECK(change <= 1e-6);
    else CHECK(change > 1e-3);
  }
}
