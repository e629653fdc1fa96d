#include "gridtrain/model/language_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <stdexcept>

#include "gridtrain/model/recompute.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/hash.hpp"

namespace gridtrain {

LanguageModelPlan::LanguageModelPlan(const ModelLayout& layout, std::int64_t n_layer, std::int64_t block_size,
                                     std::int64_t n_embd, std::int64_t vocab_size, Recompute recompute)
    : layout_(layout), n_layer_(n_layer), block_size_(block_size), n_embd_(n_embd), vocab_size_(vocab_size),
      recompute_(recompute) {
  if (layout_.tp && layout_.tp->size() == 1) layout_.tp = nullptr;
  if (tp_size() == 1) layout_.sequence_parallel = false;
  if (layout_.cp && layout_.cp->size() == 1) layout_.cp = nullptr;
  for (auto& chunk : layout_.chunks)
    if (chunk.count < 0) chunk.count = n_layer - chunk.first;
}

double LanguageModelPlan::activation_bytes(int micro_batch, int elem_bytes, int in_flight) const {
  const auto layer = layer_activations(micro_batch, elem_bytes);
  const double input =  // (B, T, C), or with context and sequence parallelism (B, T/(cp·t), C)
      static_cast<double>(micro_batch) * tokens() * n_embd_ * elem_bytes / sequence_split();
  // The backward of one layer's written-out softmax holds the gradients of its output and input,
  // each the size of the scores.
  const double softmax_backward = 2.0 * layer.scores;
  double kept = layer.scores + layer.rest, redone = softmax_backward + layer.transient;  // per layer; at one layer's backward
  if (recompute_ == Recompute::Selective) kept = layer.rest, redone += layer.scores;
  if (recompute_ == Recompute::Full) kept = input, redone += layer.scores + layer.rest;
  const double head = last_stage() ? 8.0 * micro_batch * tokens() * vocab_size_ / tp_size() : 0.0;
  return in_flight * (static_cast<double>(layers()) * kept + head) + (layers() > 0 ? redone : 0.0);
}

double LanguageModelPlan::score_keys(bool fused) const {
  if (fused || (cp_size() > 1 && layout_.cp_comm == ContextExchange::Ring)) return 0.0;
  return static_cast<double>(block_size_);
}

double LanguageModelPlan::gathered_kv_bytes(int micro_batch, int elem_bytes) const {
  if (cp_size() == 1 || layout_.cp_comm != ContextExchange::Allgather) return 0.0;
  return 2.0 * micro_batch * (static_cast<double>(block_size_) - tokens()) * kv_width() / tp_size() * elem_bytes;
}

double LanguageModelPlan::ring_tile_bytes(int micro_batch, double heads) const {
  if (cp_size() == 1 || layout_.cp_comm != ContextExchange::Ring) return 0.0;
  const double block = micro_batch * heads / tp_size() * tokens() * tokens();
  return 4.0 * std::min(static_cast<double>(kRingTileElements), block) * 4;
}

std::pair<double, double> LanguageModelPlan::context_bytes(int micro_batch, int elem_bytes) const {
  const double cp = cp_size();
  if (cp == 1) return {0.0, 0.0};
  const double chunk = 2.0 * micro_batch * tokens() * kv_width() / tp_size();  // elements: k and v of T/cp tokens
  const double again = recompute_ == Recompute::None ? 0.0 : 1.0;  // recomputation runs the exchange's forward again
  if (layout_.cp_comm == ContextExchange::Ring) {
    const double forward = (cp - 1) * chunk * 4;
    return {forward, (2 * cp - 1) * chunk * 4 + again * forward};
  }
  const double forward = (cp - 1) * chunk * elem_bytes;
  return {forward, (cp - 1) * chunk * 4 + again * forward};
}

std::int64_t LanguageModelPlan::layers() const {
  std::int64_t n = 0;
  for (const auto& chunk : layout_.chunks) n += chunk.count;
  return n;
}

int LanguageModelPlan::local_layer(std::int64_t layer) const {
  std::int64_t before = 0;
  for (const auto& chunk : layout_.chunks) {
    if (layer >= chunk.first && layer < chunk.first + chunk.count) return static_cast<int>(before + layer - chunk.first);
    before += chunk.count;
  }
  throw std::invalid_argument("layer " + std::to_string(layer) + " is not on this pipeline rank");
}

double LanguageModelPlan::recompute_flops_per_item() const {
  const double C = n_embd_, L = n_layer_, T = block_size_;
  switch (recompute_) {
    case Recompute::Full: return (flops_per_item() - 6.0 * vocab_size_ * C) / 3.0;
    case Recompute::Selective: return 4.0 * L * C * T;
    case Recompute::None: break;
  }
  return 0.0;
}

std::int64_t LanguageModelPlan::parameters() const {
  std::int64_t n = 0;
  for (const auto& name : names()) {
    std::int64_t elements = 1;
    for (auto d : local_shape(shard(name), tp_size())) elements *= d;
    n += elements;
  }
  return n;
}

torch::Tensor LanguageModel::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  return per_token_loss(stage_forward(idx, 0, idx), targets).sum() / items(targets);
}

double LanguageModel::items(const torch::Tensor& targets) const {
  if (!documents_.mask_loss) return Model::items(targets);
  return (targets != lm::kNoLoss).sum().item<double>();
}

torch::Tensor LanguageModel::head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& targets) {
  auto sum = per_token_loss(hidden, targets).sum();
  if (!routers_.enabled()) return sum;
  // Under cp the routers' sums of the whole sequences, each cp rank's loss weighing its share of
  // the tokens (their sum over cp is the one-rank term).
  if (Axis* cp = language_plan().context().cp)
    routers_.combine([cp](const torch::Tensor& s) { return sum_over_context(s, *cp); });
  // The balancing losses weigh as the micro-batch's tokens do, so that the step's mean over its
  // tokens (every layout divides by the same count) is their token-weighted mean over micro-batches.
  return sum + routers_.loss() * items(targets);
}

torch::Tensor LanguageModel::head_sums(const torch::Tensor& hidden, const torch::Tensor& targets) {
  return per_token_loss(hidden, targets).sum().reshape({1});
}

void LanguageModel::check_context(const torch::Tensor& idx, const KvCache* cache) const {
  const auto end = (cache ? cache->length : 0) + idx.size(1), T = language_plan().block_size();
  if (end > T)
    throw std::invalid_argument("logits: positions up to " + std::to_string(end) + " are past the context of " +
                                std::to_string(T) + " (model.block_size)");
}

std::pair<torch::Tensor, torch::Tensor> LanguageModel::split(const torch::Tensor& rows) const {
  const auto T = language_plan().block_size();  // rows (B, T + 1)
  const auto ids = rows.slice(1, 0, T);
  const CpRegion cp = language_plan().context();  // this rank's chunks, (B, T/cp)
  return {cp.local(ids), cp.local(lm::loss_targets(ids, rows.slice(1, 1, T + 1), documents_))};
}

void LanguageModel::add_blocks(torch::nn::Module& parent,
                               const std::function<std::shared_ptr<lm::DecoderBlock>(std::int64_t)>& make) {
  for (const auto& chunk : language_plan().chunks()) {
    for (std::int64_t i = chunk.first; i < chunk.first + chunk.count; ++i) {
      blocks_.push_back(make(i));
      parent.register_module(std::to_string(i), blocks_.back());
    }
    chunk_end_.push_back(blocks_.size());
  }
}

torch::Tensor LanguageModel::run_blocks(torch::Tensor x, KvCache* cache, int chunk, const lm::Documents& documents) {
  const LanguageModelPlan& plan = language_plan();
  const auto c = static_cast<std::size_t>(chunk);
  for (std::size_t i = c == 0 ? 0 : chunk_end_.at(c - 1); i < chunk_end_.at(c); ++i) {
    const int unit = first_block_unit_ + static_cast<int>(i);
    gather(unit);
    const lm::CacheSlot slot{cache, i, plan.block_size(), &mask_, documents, plan.context()};
    auto block = [b = blocks_[i], slot](const torch::Tensor& in) { return b->forward(in, slot); };
    x = release(unit, lm::block_forward(block, x, *blocks_[i], cache ? Recompute::None : plan.recompute()));
  }
  if (cache) cache->length += x.size(1);
  return x;
}

torch::Tensor LanguageModel::stage_forward(const torch::Tensor& input, int chunk, const torch::Tensor& ids) {
  if (documents_.every_stage() && !ids.defined())
    throw std::logic_error(describe() + ": document-aware training needs each micro-batch's ids on every stage");
  lm::Documents documents = lm::documents(ids, documents_);
  const CpRegion cp = language_plan().context();  // documents are refused under cp (plan_launch)
  if (cp.cp) documents.positions = cp.positions(input.size(0), language_plan().block_size(), input.device());
  const bool embeds = first_stage() && chunk == 0;
  routers_.start(std::exchange(carried_, {}));  // a micro-batch's pass: the sums of the stages before
  return run_blocks(embeds ? embed(input, 0, documents.positions) : input, nullptr, chunk, documents);
}

// The head's loss in fp32 whatever autocast computed the logits in: the softmax and its sum over
// the vocabulary need fp32's range and precision.
torch::Tensor LanguageModel::per_token_loss(const torch::Tensor& hidden, const torch::Tensor& targets) {
  gather(head_unit());
  if (tied()) gather(0);  // the embedding's unit
  // Predictions without loss (kNoLoss) score class 0 and are zeroed: a select, whose gradient there is 0.
  const bool masked = documents_.mask_loss;
  auto loss = release(head_unit(), lm::head_loss(final_norm(hidden), head_weight(),
                                                 masked ? targets.clamp_min(0) : targets, shard(head_name()),
                                                 language_plan().region()));
  if (masked) loss = torch::where(targets.reshape({-1}) == lm::kNoLoss, 0.0, loss);
  return tied() ? release(0, loss) : loss;
}

torch::Tensor LanguageModel::logits(const torch::Tensor& idx, KvCache* cache) {
  if (language_plan().tp() || language_plan().context().cp || !first_stage() || !last_stage() || gathers())
    throw std::logic_error(describe() + ": logits need the whole model and sequence on one rank, not sharded by ZeRO stage 3");
  check_context(idx, cache);
  routers_.start({});
  auto x = run_blocks(embed(idx, cache ? cache->length : 0, {}), cache, 0);
  return dense(final_norm(x), head_weight()).to(torch::kFloat);
}

std::vector<std::string> LanguageModel::tied_parameters() const {
  if (tied() && (first_stage() || last_stage())) return {embedding_name()};
  return {};
}

double LanguageModel::weight_flops_per_item(const std::string& name) const {
  if (name != embedding_name() || !tied()) return Model::weight_flops_per_item(name);
  const auto& vc = shard(name).global_shape;
  return 6.0 * static_cast<double>(vc[0]) * static_cast<double>(vc[1]);
}

double LanguageModel::residual_std() const {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(language_plan().n_layer()));
}

std::vector<std::pair<std::string, torch::Tensor>> LanguageModel::kept_state() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& b : named_buffers(true))
    if (b.key().ends_with(".e_score_correction_bias")) out.emplace_back(b.key(), b.value());
  return out;
}

void LanguageModel::initialize(std::uint64_t seed) {
  const LanguageModelPlan& plan = language_plan();
  lm::initialize(
      *this, [this](const std::string& n) { return shard(n); }, plan.tp_rank(), plan.tp_size(), seed,
      [this](const std::string& name, torch::Tensor& full, at::Generator& gen) { fill(name, full, gen); });
}

}  // namespace gridtrain

namespace gridtrain::lm {

torch::Tensor embed(const torch::Tensor& idx, const torch::Tensor& weight, const TpRegion& region) {
  if (!region.tp) return torch::embedding(weight, idx);
  return vocab_parallel_embedding(idx, weight, region.tp->rank() * weight.size(0), region);
}

torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& targets,
                        const ShardSpec& spec, const TpRegion& region) {
  const auto flat_targets = targets.reshape({-1});
  const auto rows = weight.size(0);
  Axis* tp = region.tp;
  if (!tp) {
    auto logits = dense(x, weight).view({-1, rows}).to(torch::kFloat);
    return torch::nn::functional::cross_entropy(
        logits, flat_targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  }
  auto logits = region.column(x, {weight})[0].view({-1, rows});  // (B·T, V/tp)
  return vocab_parallel_cross_entropy(logits, flat_targets, tp->rank() * rows,
                                      valid_rows(spec, tp->rank(), tp->size()), *tp);
}

const torch::Tensor& CausalMask::get(std::int64_t Tq, std::int64_t Tk, AttentionOffsets at, const torch::Device& device) {
  if (mask_.defined() && Tq == tq_ && Tk == tk_ && at.query == at_.query && at.key == at_.key && mask_.device() == device)
    return mask_;
  // Key j is after query i when at.key + j > at.query + i.
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto query = torch::arange(Tq, opts).add_(at.query).unsqueeze(1), key = torch::arange(Tk, opts).add_(at.key);
  mask_ = key.unsqueeze(0) > query;  // (Tq, Tk)
  tq_ = Tq, tk_ = Tk, at_ = at;
  return mask_;
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused,
                               AttentionOffsets at, CausalMask* masks, const torch::Tensor& attend) {
  const auto B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  if (at.key > at.query)
    throw std::invalid_argument("causal_attention: keys from position " + std::to_string(at.key) +
                                " leave the query at " + std::to_string(at.query) +
                                " nothing to attend to; valid: key offset <= query offset");
  if (attend.defined() && (at.query != 0 || at.key != 0))
    throw std::invalid_argument("causal_attention: a document mask covers a training window at offsets 0, 0, not " +
                                std::to_string(at.query) + ", " + std::to_string(at.key));
  const bool masked = at.key + Tk - 1 > at.query;  // some key lies after the first query
  CausalMask local;
  auto mask = [&]() -> const torch::Tensor& { return (masks ? *masks : local).get(Tq, Tk, at, q.device()); };
  if (fused) {
    // sdpa's is_causal is the aligned case (query i sees keys 0..i); other offsets pass the mask.
    const bool aligned = at.query == at.key && Tq == Tk;
    std::optional<torch::Tensor> keep;  // sdpa's boolean mask: true where a key takes part
    if (attend.defined()) keep = attend;
    else if (masked && !aligned) keep = mask().logical_not();
    return at::scaled_dot_product_attention(q, k, v, keep,
                                            /*dropout_p=*/0.0, /*is_causal=*/masked && aligned && !keep,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/Hkv < H);
  }
  auto expand = [&](const torch::Tensor& t) {  // (B, Hkv, Tk, D) -> (B, H, Tk, D)
    return Hkv == H ? t : t.unsqueeze(2).expand({B, Hkv, H / Hkv, Tk, D}).reshape({B, H, Tk, D});
  };
  // Scale q (B, H, Tq, D) rather than the scores (B, H, Tq, Tk), and mask in place: two fewer
  // passes over the largest activation (matmul's backward needs q and k, not its output).
  auto att = torch::matmul(q * (1.0 / std::sqrt(static_cast<double>(D))), expand(k).transpose(-2, -1));
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  if (attend.defined()) att.masked_fill_(attend.logical_not(), minus_inf);
  else if (masked) att.masked_fill_(mask(), minus_inf);
  return torch::matmul(torch::softmax(att, -1), expand(v));
}

torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused,
                             Recompute recompute, const CacheSlot& slot) {
  const AttentionOffsets at{slot.offset(), 0};
  // The document mask is captured by value: a recomputation in backward runs after the next
  // micro-batch's forward has moved on.
  auto core = [fused, at, mask = slot.mask, attend = slot.documents.attend,
               cp = slot.context](const std::vector<torch::Tensor>& t) {
    if (!cp.cp) return causal_attention(t[0], t[1], t[2], fused, at, mask, attend);
    if (cp.exchange == ContextExchange::Ring)
      return ring_attention(t[0], t[1], t[2], 1.0 / std::sqrt(static_cast<double>(t[0].size(3))), *cp.cp);
    const auto [keys, values] = all_gather_kv(t[1], t[2], *cp.cp);  // (B, Hkv, T, D), the whole sequence
    return causal_attention(t[0], keys, values, fused, {}, nullptr, cp.causal_mask(keys.size(2), t[0].device()));
  };
  return recompute == Recompute::Selective ? recomputed(core, {q, k, v}) : core({q, k, v});
}

torch::Tensor block_forward(const std::function<torch::Tensor(const torch::Tensor&)>& forward, const torch::Tensor& x,
                            const torch::nn::Module& block, Recompute recompute) {
  if (recompute != Recompute::Full) return forward(x);
  return recomputed([forward](const std::vector<torch::Tensor>& in) { return forward(in[0]); }, {x}, block.parameters());
}

std::pair<torch::Tensor, torch::Tensor> append_kv(const CacheSlot& slot, const torch::Tensor& k, const torch::Tensor& v) {
  if (!slot.cache) return {k, v};
  KvCache& c = *slot.cache;
  if (c.k.size() <= slot.layer) c.k.resize(slot.layer + 1), c.v.resize(slot.layer + 1);
  const auto begin = c.length, end = c.length + k.size(2);  // within capacity: LanguageModel::check_context
  auto& keys = c.k[slot.layer];
  auto& values = c.v[slot.layer];
  for (auto* t : {&keys, &values})  // preallocated: a decoding step writes its own position only
    if (!t->defined()) *t = torch::empty({k.size(0), k.size(1), slot.capacity, k.size(3)}, k.options());
  keys.slice(2, begin, end).copy_(k);
  values.slice(2, begin, end).copy_(v);
  return {keys.slice(2, 0, end), values.slice(2, 0, end)};
}

void initialize(torch::nn::Module& m, const std::function<ShardSpec(const std::string&)>& spec, int tp_rank,
                int tp_size, std::uint64_t seed, const Fill& fill) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    const ShardSpec s = spec(name);
    if (s.dim >= 0 && s.axis != AxisId::Tp)  // a model's layout places it on tp alone (ModelLayout)
      throw std::logic_error("initialize: " + name + " is split along an axis other than tp; the model's layout "
                             "knows its place on tp only");
    auto full = torch::empty(s.global_shape, p.value().options());
    auto gen = at::detail::createCPUGenerator(splitmix64(seed ^ fnv1a(name)));
    fill(name, full, gen);
    p.value().copy_(take_shard(full, s, tp_rank, tp_size));
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace gridtrain::lm
