#include "gridtrain/model/gpt.hpp"

#include <cmath>

#include "gridtrain/data/sampler.hpp"

namespace gridtrain {
namespace {

torch::nn::LayerNorm layer_norm(std::int64_t c) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})); }

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GptShape& s) : n_head_(s.n_head) {
  c_attn_ = register_module("c_attn", torch::nn::Linear(s.n_embd, 3 * s.n_embd));
  c_proj_ = register_module("c_proj", torch::nn::Linear(s.n_embd, s.n_embd));
  // A buffer, so that module->to(device) moves it with the parameters.
  mask_ = register_buffer("mask", torch::ones({s.block_size, s.block_size}, torch::kBool).triu(1));
}

torch::Tensor CausalSelfAttention::forward(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head_;
  auto qkv = c_attn_->forward(x).split(C, 2);  // 3 × (B, T, C)
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, D}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);  // (B, H, T, D)
  // Scale q (B, H, T, D) rather than the scores (B, H, T, T), and mask in place: two fewer passes
  // over the largest activation (matmul's backward needs q and k, not its output).
  auto att = torch::matmul(q * (1.0 / std::sqrt(static_cast<double>(D))), k.transpose(-2, -1));  // (B, H, T, T)
  att.masked_fill_(mask_.slice(0, 0, T).slice(1, 0, T), -std::numeric_limits<float>::infinity());
  att = torch::softmax(att, -1);
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});  // (B, T, C)
  return c_proj_->forward(y);
}

Mlp::Mlp(const GptShape& s) {
  c_fc_ = register_module("c_fc", torch::nn::Linear(s.n_embd, 4 * s.n_embd));
  c_proj_ = register_module("c_proj", torch::nn::Linear(4 * s.n_embd, s.n_embd));
}

torch::Tensor Mlp::forward(const torch::Tensor& x) {
  return c_proj_->forward(torch::gelu(c_fc_->forward(x), "tanh"));  // (B, T, 4C) inside
}

Block::Block(const GptShape& s) {
  ln_1_ = register_module("ln_1", layer_norm(s.n_embd));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(s));
  ln_2_ = register_module("ln_2", layer_norm(s.n_embd));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(s));
}

torch::Tensor Block::forward(const torch::Tensor& x) {
  auto y = x + attn_->forward(ln_1_->forward(x));
  return y + mlp_->forward(ln_2_->forward(y));
}

Gpt::Gpt(const GptShape& s) : s_(s) {
  wte_ = register_module("wte", torch::nn::Embedding(s.vocab_size, s.n_embd));
  wpe_ = register_module("wpe", torch::nn::Embedding(s.block_size, s.n_embd));
  auto h = register_module("h", torch::nn::ModuleList());  // names h.<i>.* (no dots allowed in module names)
  for (std::int64_t i = 0; i < s.n_layer; ++i) {
    h_.push_back(std::make_shared<Block>(s));
    h->push_back(h_.back());
  }
  ln_f_ = register_module("ln_f", layer_norm(s.n_embd));
}

torch::Tensor Gpt::forward(const torch::Tensor& idx) {
  const auto T = idx.size(1);
  auto pos = torch::arange(T, idx.options());  // (T,) int64 on idx's device
  auto x = wte_->forward(idx) + wpe_->forward(pos);  // (B, T, C)
  for (auto& block : h_) x = block->forward(x);
  x = ln_f_->forward(x);
  return torch::nn::functional::linear(x, wte_->weight);  // (B, T, V), tied head
}

// Logits (B·T, V) in fp32 whatever autocast computed them in: the softmax and its sum over
// the vocabulary need fp32's range and precision.
torch::Tensor Gpt::fp32_logits(const torch::Tensor& idx) {
  return forward(idx).view({-1, s_.vocab_size}).to(torch::kFloat);
}

torch::Tensor Gpt::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(fp32_logits(idx), targets.reshape({-1}));
}

torch::Tensor Gpt::loss_sum(const torch::Tensor& idx, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(fp32_logits(idx), targets.reshape({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

double Gpt::activation_bytes(int micro_batch, int elem_bytes) const {
  const double b = micro_batch, T = s_.block_size, C = s_.n_embd, H = s_.n_head, V = s_.vocab_size;
  const double per_layer = b * T * C * (34.0 + 5.0 * H * T / C) * elem_bytes / 2.0;
  return s_.n_layer * per_layer + 8.0 * b * T * V;
}

double Gpt::flops_per_token() const {
  const double n = static_cast<double>(count_parameters(*this) - s_.block_size * s_.n_embd);
  return 6.0 * n + 12.0 * s_.n_layer * s_.n_embd * s_.block_size;
}

void Gpt::initialize(std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double std_residual = 0.02 / std::sqrt(2.0 * s_.n_layer);
  for (auto& p : named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    auto& t = p.value();
    auto gen = at::detail::createCPUGenerator(splitmix64(seed ^ fnv1a(name)));
    if (ends_with(name, ".bias")) {
      t.zero_();
    } else if (name.starts_with("ln_") || name.find(".ln_") != std::string::npos) {
      t.fill_(1.0);
    } else {
      t.normal_(0.0, ends_with(name, "c_proj.weight") ? std_residual : 0.02, gen);
    }
  }
}

}  // namespace gridtrain
