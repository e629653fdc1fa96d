// What the decoder-only language models (gpt, llama) share: their plans' layout and shapes
// (LanguageModelPlan), the decoder scaffolding (LanguageModel: the blocks of each pipeline chunk,
// the stage forward, the head's loss and logits, the tied embedding, ZeRO stage 3's units,
// initialization), the vocabulary-parallel token embedding and output head with its fp32
// cross-entropy, causal attention at any query/key offsets with its cached mask, and the KV cache.
// A family supplies its blocks (lm::DecoderBlock), its embedding, final norm and head, and names.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/model/documents.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/model/moe.hpp"
#include "gridtrain/parallel/context_parallel.hpp"
#include "gridtrain/parallel/shard.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"

namespace gridtrain {

/// This rank's part of a decoder-only language model: a stage of its layers, on tp ranks;
/// windows of T tokens (with context parallelism this rank's 2·S = T/cp of each); (B, T, C)
/// activations between stages.
class LanguageModelPlan : public ModelPlan {
 public:
  /// layout's null-or-size-1 tp resolved to null (and sequence parallelism with it to off), as
  /// its cp, a chunk's count -1 (all) to the layers from its first on.
  LanguageModelPlan(const ModelLayout& layout, std::int64_t n_layer, std::int64_t block_size, std::int64_t n_embd,
                    std::int64_t vocab_size, Recompute recompute);
  const ModelLayout& layout() const { return layout_; }
  bool first_stage() const { return layout_.stage == 0; }
  bool last_stage() const { return layout_.stage + 1 == layout_.stages; }
  /// This rank's layers, one range per model chunk.
  const std::vector<LayerRange>& chunks() const { return layout_.chunks; }
  /// This rank's layers over all its chunks.
  std::int64_t layers() const;
  /// The position of global layer `layer` among this rank's layers (chunk by chunk). Throws
  /// std::invalid_argument for a layer this rank does not hold.
  int local_layer(std::int64_t layer) const;
  Axis* tp() const { return layout_.tp; }  ///< null without tensor parallelism
  int tp_rank() const { return layout_.tp ? layout_.tp->rank() : 0; }
  int tp_size() const { return layout_.tp ? layout_.tp->size() : layout_.tp_size; }
  /// Whether the sequence is split over tp between the tensor-parallel layers (grid.sequence_parallel).
  bool sequence_parallel() const { return layout_.sequence_parallel; }
  /// How this rank's tensor-parallel layers meet the rest.
  TpRegion region() const { return {layout_.tp, layout_.sequence_parallel}; }
  /// Where this rank's MoE layers' experts sit (null axis: planning ep_size ranks, as rank 0).
  EpRegion experts() const { return {layout_.ep}; }
  int ep_rank() const { return layout_.ep ? layout_.ep->rank() : 0; }
  int ep_size() const { return layout_.ep ? layout_.ep->size() : layout_.ep_size; }
  /// Where this rank's attention meets context parallelism (null axis: none, or planning cp_size()).
  CpRegion context() const { return {layout_.cp, layout_.cp_comm}; }
  int cp_size() const { return layout_.cp ? layout_.cp->size() : layout_.cp_size; }
  /// This rank's parameter names, in the module's registration order.
  virtual std::vector<std::string> names() const = 0;
  /// Throws std::invalid_argument for a name that is not one of the model's parameters.
  virtual ShardSpec shard(const std::string& name) const = 0;
  std::int64_t parameters() const override;
  std::int64_t items_per_sample() const override { return block_size_; }
  const char* item() const override { return "token"; }
  const char* flops_formula() const override { return "6N + 12LCT per token"; }
  std::string samples() const override { return "sequences of " + std::to_string(block_size_) + " tokens"; }
  /// (B, T, C); with context parallelism this rank's (B, T/cp, C), and with sequence parallelism
  /// its slice of that over tp (B, T/(cp·t), C).
  std::vector<std::int64_t> activation_shape(int micro_batch) const override {
    return {micro_batch, block_size_ / (cp_size() * sequence_split()), n_embd_};
  }
  Recompute recompute() const { return recompute_; }
  /// The width of one token's keys (and of its values) over all key/value heads: C, or Hkv·D.
  virtual std::int64_t kv_width() const = 0;
  /// Bytes one rank sends over cp per layer for a micro-batch of B windows: grid.cp_comm = ring
  /// sends its fp32 key/value chunks on cp − 1 times forward, (cp − 1)/cp · 2·B·T·kv_width/t · 4,
  /// and in backward those again and the key/value gradients cp times (home included),
  /// (2·cp − 1)/cp · 2·B·T·kv_width/t · 4; allgather's all-gather sends (cp − 1)/cp ·
  /// 2·B·T·kv_width/t · elem_bytes forward and its reduce-scatter that many fp32 bytes backward;
  /// with selective or full recomputation backward also runs the forward's exchange again.
  /// {forward, backward}; 0 without cp.
  std::pair<double, double> context_bytes(int micro_batch, int elem_bytes) const final;
  std::int64_t block_size() const { return block_size_; }  ///< T, the context
  std::int64_t n_layer() const { return n_layer_; }         ///< L, the whole model's layers
  /// Korthikanti et al. 2022, Table 2 (with context parallelism over this rank's T/cp tokens), per layer and micro-batch in flight: none keeps
  /// layer_activations() whole; selective all but the attention scores (rebuilt for one layer at
  /// a time in backward); full only the block's input b·T·C (/t with sequence parallelism; and
  /// one layer's whole activations rebuilt at a time). Plus on the last stage, per micro-batch, the fp32 logits and their
  /// softmax, 8·b·T·V/t; plus, once, the two score-sized gradients of one layer's softmax
  /// backward (written-out attention).
  double activation_bytes(int micro_batch, int elem_bytes, int in_flight) const final;
  /// full: the blocks' forward again, (flops_per_item − 6·V·C) / 3; selective: the attention
  /// core's forward again, q kᵀ and the weighted sum, 4·L·C·T.
  double recompute_flops_per_item() const final;

 protected:
  /// One layer's activations kept for backward by one micro-batch without recomputation, bytes
  /// at elem_bytes per element: the attention scores (the softmax output, (B, H/t, T, T); 0 with
  /// fused attention, which never stores them), and the rest.
  struct LayerActivations {
    double scores, rest;
    double transient = 0;  ///< built and freed inside one layer's backward (ring attention's tiles)
  };
  virtual LayerActivations layer_activations(int micro_batch, int elem_bytes) const = 0;
  /// The ranks the sequence is split over between the tensor-parallel layers: t with sequence
  /// parallelism, else 1 (Table 2's 10 s b h of norms and layer inputs, divided by it).
  int sequence_split() const { return layout_.sequence_parallel ? tp_size() : 1; }
  /// This rank's tokens of a sequence, T/cp: its queries.
  double tokens() const { return static_cast<double>(block_size_) / cp_size(); }
  /// The keys each query's scores span where the written-out attention keeps them: T (without
  /// cp, or the whole gathered sequence of grid.cp_comm = allgather); 0 with fused attention, and
  /// for ring attention, which keeps only each row's log-sum-exp.
  double score_keys(bool fused) const;
  /// Bytes per layer and micro-batch of B windows that grid.cp_comm = allgather keeps beside this
  /// rank's own: the other cp ranks' keys and values, 2·B·T·(cp − 1)/cp·kv_width/t elements.
  double gathered_kv_bytes(int micro_batch, int elem_bytes) const;
  /// Ring attention's backward holds about four fp32 score tiles of a block at a time (the scores,
  /// their probabilities, dS and dO·Vᵀ), each min(kRingTileElements, B·H/t·(2·S)²) elements; 0
  /// without the ring. heads: the model's H.
  double ring_tile_bytes(int micro_batch, double heads) const;

  ModelLayout layout_;
  std::int64_t n_layer_, block_size_, n_embd_, vocab_size_;
  Recompute recompute_;
};

}  // namespace gridtrain

namespace gridtrain::lm {

/// idx (B, T) int64 global ids → (B, T, C) rows of `weight`; with tp, weight (V/tp, C) is this
/// rank's vocabulary shard and the rows are summed over tp (Megatron's vocabulary-parallel
/// embedding), with sequence parallelism into this rank's slice (B, T/t, C).
torch::Tensor embed(const torch::Tensor& idx, const torch::Tensor& weight, const TpRegion& region);

/// Per-token cross-entropy (B·T,) fp32, nats, of the output head `weight` (V rows, or this rank's
/// V/tp of spec's padded vocabulary, × C) on x (B, T, C) (with sequence parallelism this rank's
/// slice (B, T/t, C)) against targets (B, T). The logits are taken to fp32 whatever autocast
/// computed them in: the softmax needs fp32's range.
torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& targets,
                        const ShardSpec& spec, const TpRegion& region);

/// Where a causal attention's queries and keys sit: query i at position query + i, key j at
/// key + j; a query attends to the keys at or before its position.
struct AttentionOffsets {
  std::int64_t query = 0, key = 0;
};

/// The written-out attention's boolean mask (Tq, Tk), true where a key is after its query, kept
/// for the next call with the same sizes, offsets and device (one per model: every layer of a
/// forward asks for the same one).
class CausalMask {
 public:
  const torch::Tensor& get(std::int64_t Tq, std::int64_t Tk, AttentionOffsets at, const torch::Device& device);

 private:
  torch::Tensor mask_;
  std::int64_t tq_ = -1, tk_ = -1;
  AttentionOffsets at_{};
};

/// Causal attention of q (B, H, Tq, D) over k, v (B, Hkv, Tk, D) (grouped-query where Hkv < H:
/// query head h reads key/value head h / (H/Hkv)), softmax(q kᵀ / sqrt(D)) v, → (B, H, Tq, D),
/// at offsets `at` (training: 0, 0; a decoding step after a KV cache of n positions: n, 0; a
/// contiguous chunk: its queries' first position and its keys'). fused:
/// at::scaled_dot_product_attention; else the written-out math, its mask from `masks` (null:
/// built for this call). attend (B, 1, Tq, Tk) bool, where defined, replaces the causal mask: a
/// document mask (lm::Documents), which both kernels take. Throws std::invalid_argument when a
/// query would see no key (the keys start after it), or for an attend mask at offsets other than 0, 0.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused,
                               AttentionOffsets at = {}, CausalMask* masks = nullptr, const torch::Tensor& attend = {});

/// Where one layer's attention keeps its keys and values while decoding (cache null: training,
/// validation and uncached logits), and the model's cached causal mask.
struct CacheSlot {
  KvCache* cache = nullptr;
  std::size_t layer = 0;       ///< the layer's index on this rank
  std::int64_t capacity = 0;   ///< the context length T
  CausalMask* mask = nullptr;  ///< the model's (LanguageModel); null: built per call
  Documents documents;         ///< the micro-batch's (data.document_mask, data.reset_position_ids; context
                               ///< parallelism's positions); empty: none
  CpRegion context;            ///< the sequence split over cp: attention reaches the other chunks
  std::int64_t offset() const { return cache ? cache->length : 0; }  ///< position of the first new token
};

/// causal_attention of a block's q, k, v at the slot's positions (queries from slot.offset(),
/// keys from 0), within the slot's documents; under context parallelism (slot.context) the whole
/// sequence's, by ring_attention or all_gather_kv (fused then ignored by the ring, which computes
/// in fp32 blocks); with recompute = selective it keeps only q, k, v for backward and computes its
/// scores and softmax again there (Korthikanti et al. 2022, §5).
torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused,
                             Recompute recompute, const CacheSlot& slot);

/// One transformer block of a decoder: x (B, T, C) → (B, T, C) (with sequence parallelism this
/// rank's slice (B, T/t, C)), its attention at the slot's positions.
class DecoderBlock : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x, const CacheSlot& slot) = 0;
};

/// forward(x) of a transformer block, x (B, T, C) → (B, T, C); with recompute = full the block
/// keeps only x for backward and runs forward again there (Megatron's full recomputation; its
/// parameters, block's, get their gradients as without it).
torch::Tensor block_forward(const std::function<torch::Tensor(const torch::Tensor&)>& forward, const torch::Tensor& x,
                            const torch::nn::Module& block, Recompute recompute);

/// k, v (B, Hkv, T, D) written at positions [offset, +T) of the slot's layer (its cache allocated
/// for `capacity` positions on first use, so that a decoding step copies its own position only);
/// returns views of the layer's keys and values so far; without a cache, k and v. The caller
/// advances cache.length after the last layer; LanguageModel::check_context keeps it within capacity.
std::pair<torch::Tensor, torch::Tensor> append_kv(const CacheSlot& slot, const torch::Tensor& k, const torch::Tensor& v);

/// How one parameter starts: fill `full` (its global shape, fp32) drawing from `gen`.
using Fill = std::function<void(const std::string& name, torch::Tensor& full, at::Generator& gen)>;

/// Sets every parameter of m from (seed, its name) alone, independent of the process grid: the
/// global tensor filled by fill with a generator seeded by splitmix64(seed ^ fnv1a(name)), then
/// this rank's shard (spec(name)) taken.
void initialize(torch::nn::Module& m, const std::function<ShardSpec(const std::string&)>& spec, int tp_rank,
                int tp_size, std::uint64_t seed, const Fill& fill);

/// Whether s ends with suffix (parameter-name matching).
bool ends_with(const std::string& s, const std::string& suffix);

}  // namespace gridtrain::lm

namespace gridtrain {

/// A decoder-only language model: windows split into ids and next ids, the mean or summed
/// per-token cross-entropy of its head, over the documents of the windows as its DocumentRules
/// say (positions, attention mask, targets without loss); the blocks of this rank's chunks and ZeRO stage 3's units:
/// the embedding's (unit 0 up to first_block_unit), block i's (first_block_unit + i), the final
/// norm's with the head (last).
class LanguageModel : public Model {
 public:
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) override;  // idx, targets (B, T)
  /// The cross-entropy summed over the targets' items, plus with MoE layers the micro-batch's
  /// balancing losses (RouterLog::loss) weighted by its items: what training minimises.
  torch::Tensor head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& targets) override;
  /// The cross-entropy sum alone, (1,): validation reports the language-model loss, comparable
  /// with a dense model's, without the balancing terms.
  torch::Tensor head_sums(const torch::Tensor& hidden, const torch::Tensor& targets) override;
  /// With DocumentRules::mask_loss the targets are kNoLoss after an end-of-document token; with
  /// context parallelism both are this rank's tokens (B, T/cp) of the windows (CpRegion::local).
  std::pair<torch::Tensor, torch::Tensor> split(const torch::Tensor& rows) const override;
  /// The targets that carry loss: all, or with DocumentRules::mask_loss those not kNoLoss.
  double items(const torch::Tensor& targets) const override;
  bool input_on_every_stage() const override { return documents_.every_stage(); }
  bool first_stage() const override { return language_plan().first_stage(); }
  bool last_stage() const override { return language_plan().last_stage(); }
  ShardSpec shard(const std::string& name) const override { return language_plan().shard(name); }
  const ModelPlan& plan() const override { return language_plan(); }
  /// The first stage embeds ids (B, T) before chunk 0; → (B, T, C) (SP: (B, T/t, C)). ids: the
  /// micro-batch's (B, T), which every stage needs when input_on_every_stage(); throws
  /// std::logic_error when they are missing there (a document mask is never dropped).
  torch::Tensor stage_forward(const torch::Tensor& input, int chunk = 0, const torch::Tensor& ids = {}) final;
  /// Throws std::logic_error unless the whole model is on this rank (no tp, no cp, one stage, no
  /// ZeRO stage 3), std::invalid_argument past the context.
  torch::Tensor logits(const torch::Tensor& idx, KvCache* cache = nullptr) final;
  /// The tied embedding on the first stage and on the last (the head's copy); untied: none.
  std::vector<std::string> tied_parameters() const final;
  /// A tied embedding is also the head: 6·V·C FLOPs per token.
  double weight_flops_per_item(const std::string& name) const final;
  /// Each tensor drawn whole (global shape) from its own generator seeded by splitmix64(seed,
  /// fnv1a(name)) and filled by the family's fill(), then this rank's shard taken.
  void initialize(std::uint64_t seed) final;
  /// The routing of the last forward's MoE layers (not enabled for a dense model), for its
  /// balancing losses; RouterStats takes its load.
  const moe::RouterLog& routers() const { return routers_; }
  moe::RouterLog& routers() { return routers_; }
  /// RouterLog::width() with MoE layers, else 0.
  /// The MoE routers' expert biases (model/router.hpp), "<layer>.mlp.gate.e_score_correction_bias".
  std::vector<std::pair<std::string, torch::Tensor>> kept_state() final;
  std::int64_t carried_width() const final { return routers_.enabled() ? routers_.width() : 0; }
  void carry_in(const torch::Tensor& sums) final { carried_ = sums; }
  torch::Tensor carry_out() const final { return routers_.sums(); }

 protected:
  /// first_block_unit: ZeRO stage 3 units before the blocks (the embeddings').
  LanguageModel(int first_block_unit, const lm::DocumentRules& documents)
      : first_block_unit_(first_block_unit), documents_(documents) {}
  virtual const LanguageModelPlan& language_plan() const = 0;
  /// Registers this rank's blocks, chunk after chunk, on `parent` under their global layer index
  /// (make(i) builds layer i).
  void add_blocks(torch::nn::Module& parent, const std::function<std::shared_ptr<lm::DecoderBlock>(std::int64_t)>& make);
  /// The unit of this rank's block `layer` (a global index), and of the final norm with the head.
  int block_unit(std::int64_t layer) const { return first_block_unit_ + language_plan().local_layer(layer); }
  int head_unit() const { return first_block_unit_ + static_cast<int>(blocks_.size()); }
  /// The GPT-2 scaling of the residual projections' init: 0.02 / sqrt(2·L).
  double residual_std() const;

  // The family's parts.
  /// ids (B, T) at positions offset.., or at `positions` (B, T) where defined (documents) → (B, T, C)
  /// (SP: (B, T/t, C)), gathering what it needs.
  virtual torch::Tensor embed(const torch::Tensor& idx, std::int64_t offset, const torch::Tensor& positions) = 0;
  /// The final norm of the last stage's output (B, T, C) (SP: this rank's slice).
  virtual torch::Tensor final_norm(const torch::Tensor& x) = 0;
  /// The output head's weight (V or V/tp padded rows × C) and its parameter's name.
  virtual torch::Tensor& head_weight() = 0;
  virtual std::string head_name() const = 0;
  /// Whether the head is the token embedding (tied), and the embedding's parameter name.
  virtual bool tied() const = 0;
  virtual std::string embedding_name() const = 0;
  /// Fills parameter `name`'s global tensor (fp32) for initialize().
  virtual void fill(const std::string& name, torch::Tensor& full, at::Generator& gen) const = 0;

  /// The MoE layers' routing of the micro-batch in flight (empty for a dense model): its
  /// balancing losses join the head's loss sum.
  moe::RouterLog routers_;
  torch::Tensor carried_;  // carry_in's, until the next stage_forward starts the router log with it

 private:
  /// The blocks of `chunk`: (B, T, C) → (B, T, C) (SP: (B, T/t, C)) within `documents`; with a
  /// cache, advances it.
  torch::Tensor run_blocks(torch::Tensor x, KvCache* cache, int chunk, const lm::Documents& documents = {});
  /// The last stage's output (B, T, C) → the per-token loss (B·T,) fp32, nats.
  torch::Tensor per_token_loss(const torch::Tensor& hidden, const torch::Tensor& targets);
  /// Throws std::invalid_argument when idx (B, T) after cache's positions runs past the context.
  void check_context(const torch::Tensor& idx, const KvCache* cache) const;

  int first_block_unit_;
  lm::DocumentRules documents_;
  std::vector<std::shared_ptr<lm::DecoderBlock>> blocks_;  // this rank's, chunk after chunk
  std::vector<std::size_t> chunk_end_;  // blocks_[chunk_end_[c − 1], chunk_end_[c]) are chunk c's
  lm::CausalMask mask_;  // the written-out attention's, shared by the blocks
};

}  // namespace gridtrain
