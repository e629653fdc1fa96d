// The deck keys. Adding a key = one line here plus its field in Config; --help, the echo, the
// deck reference and the unknown-key check all follow from this table.
#include "keys.hpp"

#include <algorithm>

#include "gridtrain/config/data_blend.hpp"
#include "gridtrain/config/data_split.hpp"
#include "gridtrain/util/error.hpp"
#include "key_makers.hpp"
#include "checkpoint_keys.hpp"
#include "moe_keys.hpp"
#include "sparsity_keys.hpp"

namespace gridtrain::detail {
namespace {

// grid.dp: a positive integer or "auto" (stored as 0).
Key dp_key() {
  auto ref = [](auto& c) -> auto& { return c.grid.dp; };
  Key k = int_key<int>("grid.dp", ref, "data-parallel size; auto = world size / (cp * tp * pp)", 1);
  auto parse_int = k.assign;
  k.info.default_value = "auto";
  k.info.valid = "auto or integer >= 1";
  k.assign = [parse_int](Config& c, const std::string& text) -> std::optional<std::string> {
    if (text == "auto") {
      c.grid.dp = 0;
      return std::nullopt;
    }
    if (parse_int(c, text)) return "not auto or a positive integer; valid: auto or integer >= 1";
    return std::nullopt;
  };
  k.show = [](const Config& c) { return c.grid.dp == 0 ? std::string("auto") : std::to_string(c.grid.dp); };
  return k;
}

// A comma-separated list of per-stage counts of `unit` >= 1, "3,3,2", or the problem with it
// (naming the item).
std::optional<std::string> parse_counts(const std::string& text, const std::string& unit, const std::string& valid,
                                        std::vector<int>& out) {
  if (text.empty()) return "empty; valid: " + valid;
  out.clear();
  for (std::size_t begin = 0;;) {  // every item a whole decimal integer >= 1
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const auto n = parse_number<int>(item);
    if (!n) return "'" + item + "' is not a " + unit + " count; valid: " + valid;
    if (*n < 1) return "every stage needs at least one " + unit + ", got " + item + "; valid: " + valid;
    out.push_back(*n);
    if (end == text.size()) return std::nullopt;
    begin = end + 1;
  }
}

// grid.stage_layers: auto (stored empty) or one count >= 1 per stage, "3,3,2".
Key stage_layers_key() {
  const std::string valid = "auto, or one layer count >= 1 per stage separated by commas, e.g. 3,3,2";
  return {{"grid.stage_layers", "auto",
           "transformer layers per pipeline stage: auto (as even as possible, earlier stages take the extra ones) "
           "or a comma-separated count per stage, e.g. 3,3,2", valid},
          [valid](Config& c, const std::string& text) -> std::optional<std::string> {
            std::vector<int> layers;
            if (text != "auto")
              if (auto problem = parse_counts(text, "layer", valid, layers)) return problem;
            c.grid.stage_layers = layers;
            return std::nullopt;
          },
          [](const Config& c) {
            return c.grid.stage_layers.empty() ? std::string("auto") : comma_list(c.grid.stage_layers);
          }};
}

// model.channels: the cnn's width per stage, "32,64".
Key channels_key() {
  const std::string valid = "one channel count >= 1 per stage separated by commas, e.g. 32,64";
  const Config defaults;  // a named object: GCC 12 warns of a temporary's fields as maybe uninitialized
  return {{"model.channels", comma_list(defaults.model.channels),
           "cnn: output channels of each stage (two 3x3 conv-batch-norm-ReLU layers, then 2x2 max-pooling)", valid},
          [valid](Config& c, const std::string& text) -> std::optional<std::string> {
            std::vector<int> widths;
            if (auto problem = parse_counts(text, "channel", valid, widths)) return problem;
            c.model.channels = widths;
            return std::nullopt;
          },
          [](const Config& c) { return comma_list(c.model.channels); }};
}

std::vector<Key> grid_keys() {
  return {
      dp_key(),
      int_key<int>("grid.tp", GT_REF(grid.tp), "tensor-parallel size (Megatron-style)", 1),
      int_key<int>("grid.pp", GT_REF(grid.pp), "pipeline-parallel size (stages)", 1),
      int_key<int>("grid.ep", GT_REF(grid.ep),
                   "expert-parallel size (MoE, G22): each MoE layer's moe.experts are split over grid.ep "
                   "consecutive dp ranks, and tokens reach their experts by all-to-all; the experts' gradients "
                   "average over the dp / ep ranks that hold the same ones. Divides grid.dp and moe.experts", 1),
      int_key<int>("grid.cp", GT_REF(grid.cp),
                   "context-parallel size (G23): each sequence of model.block_size T tokens is split over grid.cp "
                   "ranks in the load-balanced causal layout (2 * cp chunks of T / (2 * cp); rank i holds chunks i "
                   "and 2 * cp - 1 - i, Megatron-Core's get_batch_on_this_cp_rank) and attention reaches the other "
                   "ranks' keys and values by grid.cp_comm; dense gradients average and ZeRO shards over dp * cp. "
                   "Needs model.block_size divisible by 2 * cp (and by 2 * cp * tp with grid.sequence_parallel); "
                   "gpt and llama only", 1),
      enum_key("grid.cp_comm", GT_REF(grid.cp_comm),
               "with grid.cp > 1: ring (ring attention, Liu et al. 2023: key/value chunks travel around the cp "
               "ranks, each transfer overlapped with the attention over the chunk before, partial results merged "
               "by log-sum-exp in fp32; backward sends the key/value gradients home) or allgather (Llama 3's: "
               "all-gather the keys and values over cp, one causal attention over them; backward reduce-scatters "
               "their gradients)"),
      stage_layers_key(),
      int_key<int>("grid.virtual_stages", GT_REF(grid.virtual_stages),
                   "model chunks per pipeline rank for train.schedule = interleaved (Narayanan et al. 2021, "
                   "§2.2.2): rank r holds virtual stages r, r + pp, ..., the bubble shrinks by this factor; "
                   "grid.stage_layers then gives pp * virtual_stages counts", 1),
      bool_key("grid.sequence_parallel", GT_REF(grid.sequence_parallel),
               "sequence parallelism with grid.tp > 1 (Korthikanti et al. 2022): between the tensor-parallel "
               "layers (norms, residual stream, embedding) each tp rank holds T/tp of the sequence, and the tp "
               "all-reduces become reduce-scatter + all-gather (same bytes); activations there shrink by tp. "
               "Needs model.block_size divisible by grid.tp; no effect with grid.tp = 1"),
  };
}

std::vector<Key> model_keys() {
  return {
      enum_key("model.type", GT_REF(model.type),
               "model family: gpt (GPT-2-style language model on a token corpus), llama (Llama 2/3 decoder: "
               "RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, no biases), cnn (image classifier on "
               "an image set from `gridtrain prepare idx`)"),
      int_key<int>("model.n_layer", GT_REF(model.n_layer), "transformer blocks L", 1),
      int_key<int>("model.n_head", GT_REF(model.n_head), "attention heads H per block", 1),
      int_key<int>("model.n_embd", GT_REF(model.n_embd), "embedding width C (divisible by n_head)", 1),
      int_key<int>("model.block_size", GT_REF(model.block_size), "context length T, tokens", 1),
      int_key<int>("model.vocab_size", GT_REF(model.vocab_size),
                   "vocabulary size V; 0 = the dataset's vocab_size attribute", 0),
      enum_key("model.attention", GT_REF(model.attention),
               "causal self-attention kernel: sdpa (at::scaled_dot_product_attention: flash / memory-efficient "
               "kernels on CUDA, the fused kernel on CPU), math (matmul, mask, softmax, matmul: keeps "
               "(B, H, T, T) scores), auto = sdpa"),
      enum_key("model.matmul", GT_REF(model.matmul),
               "library of the linear layers' fp32 matmuls on the CPU (forward and backward): onednn (oneDNN "
               "inside LibTorch, kernels chosen by instruction set: AVX-512 on any x86 CPU that has it), blas "
               "(at::addmm, MKL's sgemm, as PyTorch eager's nn.Linear; MKL runs its AVX2 path on AMD CPUs), "
               "auto = onednn where it runs on this CPU, else blas (ATen's oneDNN matmul needs AVX-512 BW/VL/DQ or "
               "AVX-NE-CONVERT: not on AMD EPYC Rome/Milan nor Intel before Skylake-SP; the log says which and why; "
               "an explicit onednn there is refused). CUDA and autocast's bf16/fp16 are unaffected"),
      channels_key(),
      int_key<int>("model.n_kv_head", GT_REF(model.n_kv_head),
                   "llama: key/value heads of grouped-query attention (Ainslie et al. 2023), dividing n_head; "
                   "0 = n_head (multi-head attention)", 0),
      int_key<int>("model.ffn_hidden", GT_REF(model.ffn_hidden),
                   "llama: SwiGLU MLP width F; 0 = Llama's rule, 8C/3 rounded up to a multiple of model.multiple_of", 0),
      int_key<int>("model.multiple_of", GT_REF(model.multiple_of),
                   "llama: what the SwiGLU width is rounded up to a multiple of when model.ffn_hidden = 0", 1),
      real_key("model.norm_eps", GT_REF(model.norm_eps), "llama: RMSNorm epsilon", 0.0, true),
      real_key("model.rope_theta", GT_REF(model.rope_theta),
               "llama: rotary position embedding base theta (Su et al. 2021; Llama 2 1e4, Llama 3 5e5)", 1.0, true),
      bool_key("model.tie_embeddings", GT_REF(model.tie_embeddings),
               "llama: the output head is the token embedding (Press & Wolf 2017); gpt always ties"),
  };
}

// A text key whose value `unset` (a word, stored as "") means the default, and whose other values
// `check` parses as the loader will, throwing gridtrain::Error "NAME = 'TEXT': why".
template <class Ref>
Key parsed_text_key(const std::string& name, Ref ref, std::string help, const std::string& unset, std::string valid,
                    void (*check)(const std::string&)) {
  Key k = text_key(name, ref, std::move(help));
  k.info.default_value = unset;
  k.info.valid = std::move(valid);
  k.assign = [=](Config& c, const std::string& text) -> std::optional<std::string> {
    if (text == unset) {
      ref(c).clear();
      return std::nullopt;
    }
    try {
      check(text);
    } catch (const Error& e) {
      return std::string(e.what()).substr((name + " = '" + text + "': ").size());
    }
    ref(c) = text;
    return std::nullopt;
  };
  k.show = [=](const Config& c) { return ref(c).empty() ? unset : ref(c); };
  return k;
}

// data.split: Megatron's weights, checked as the loader will read them; auto is Megatron's
// default for a Megatron dataset and nothing for an HDF5 corpus, which has its split.
Key split_key() {
  return parsed_text_key(
      "data.split", GT_REF(data.split),
      "Megatron indexed datasets: weights of the train, validation and test splits over documents, in order "
      "(Megatron's --split; the test split is held out); auto = 969,30,1. An HDF5 corpus carries its own split "
      "(auto only)",
      "auto", "auto, or 1 to 3 comma-separated non-negative weights, e.g. 969,30,1",
      [](const std::string& text) { split_weights(text); });
}

// data.blend: checked as the loader will read it; none trains on data.path alone.
Key blend_key() {
  return parsed_text_key(
      "data.blend", GT_REF(data.blend),
      "language models: weighted datasets in Megatron's --data-path syntax, '0.7 data/a 0.3 data/b' (each of any "
      "data.path kind; weights normalized), in place of data.path. Sample j of the blend comes from the dataset "
      "with the largest w·max(j,1) - samples drawn so far (Megatron's greedy rule), so each dataset's count stays "
      "within one of w·j at every layout; each dataset has its own order and wraps its epochs. Validation runs over "
      "each dataset (train.eval_samples each) and reports each, and their weighted mean as ValLoss. Resuming with "
      "other weights needs data.allow_change; none = data.path alone",
      "none", "none, or two or more pairs of a positive weight and a dataset path",
      [](const std::string& text) { parse_blend(text); });
}

// data.eod_token: auto (stored as -1) is what the corpus records; Megatron datasets record nothing.
Key eod_key() {
  Key k = int_key<int>("data.eod_token", GT_REF(data.eod_token),
                       "the end-of-document token id that data.reset_position_ids, data.document_mask and "
                       "data.eod_mask_loss split documents at; auto = the corpus's eod_id attribute (written by "
                       "`gridtrain prepare jsonl --append-eod`); a Megatron indexed dataset records none: give the "
                       "id its tokenizer appended (Megatron's preprocess_data.py --append-eod)", 0);
  k.info.default_value = "auto";
  k.info.valid = "auto, or a token id >= 0 below the vocabulary size";
  k.assign = [assign = k.assign](Config& c, const std::string& text) -> std::optional<std::string> {
    if (text == "auto") {
      c.data.eod_token = -1;
      return std::nullopt;
    }
    auto problem = assign(c, text);
    return problem ? std::optional(*problem + ", or auto") : problem;
  };
  k.show = [](const Config& c) { return c.data.eod_token < 0 ? std::string("auto") : std::to_string(c.data.eod_token); };
  return k;
}

std::vector<Key> data_keys() {
  return {
      text_key("data.path", GT_REF(data.path),
               "gpt: token corpus written by `gridtrain prepare text` (HDF5): a file, a directory of shard files "
               "(*.h5) or a glob; shards are concatenated in name order. Or Megatron indexed datasets: a prefix P "
               "of P.idx and P.bin, or a directory or glob of *.idx (model.vocab_size must be set: the index "
               "records none). cnn: image set written by `gridtrain prepare idx` (one HDF5 file)"),
      blend_key(),
      split_key(),
      int_key<int>("data.random_crop", GT_REF(data.random_crop),
                   "cnn: random-crop augmentation, pixels: each training image is zero-padded by this many pixels "
                   "and cut back to its size at an offset drawn from (train.seed, sample index); 0 = off", 0, 64),
      int_key<int>("data.prefetch", GT_REF(data.prefetch),
                   "training batches a loader thread reads ahead (per-rank pread of each window); 0 = read "
                   "each on the step loop's thread when it is needed", 0, 64),
      eod_key(),
      bool_key("data.reset_position_ids", GT_REF(data.reset_position_ids),
               "language models: position ids restart at 0 after each end-of-document token (data.eod_token), so "
               "that a document packed mid-window is positioned as if it began the window (Megatron's "
               "--reset-position-ids)"),
      bool_key("data.document_mask", GT_REF(data.document_mask),
               "language models: each token attends only to the tokens of its own document at or before it (a "
               "block-diagonal causal mask; a document ends with its end-of-document token); both attention "
               "kernels take the mask (Megatron's --reset-attention-mask)"),
      bool_key("data.eod_mask_loss", GT_REF(data.eod_mask_loss),
               "language models: the position whose input is the end-of-document token (its prediction of the "
               "next document's first token) carries no loss; the loss is the mean over the global batch's other "
               "tokens (Megatron's --eod-mask-loss)"),
      bool_key("data.allow_change", GT_REF(data.allow_change),
               "resume onto a corpus other than the checkpoint's (its sha256 or token counts differ); the data "
               "position then indexes the new corpus"),
  };
}

std::vector<Key> optim_keys() {
  return {
      enum_key("optim.type", GT_REF(optim.type), "optimizer"),
      real_key("optim.lr", GT_REF(optim.lr), "peak learning rate (before optim.scale_lr)", 0.0, true),
      real_key("optim.min_lr", GT_REF(optim.min_lr), "learning rate at the end of the decay", 0.0, false),
      int_key<int>("optim.warmup_steps", GT_REF(optim.warmup_steps),
                   "linear warmup steps: lr(s) = lr * (s+1) / warmup_steps for s < warmup_steps", 0),
      enum_key("optim.schedule", GT_REF(optim.schedule), "decay after warmup, down to min_lr"),
      int_key<int>("optim.decay_steps", GT_REF(optim.decay_steps),
                   "step at which the decay reaches min_lr; 0 = train.steps", 0),
      real_key("optim.weight_decay", GT_REF(optim.weight_decay),
               "decoupled weight decay, applied to >= 2-D weights only", 0.0, false),
      real_key("optim.beta1", GT_REF(optim.beta1), "Adam first-moment decay", 0.0, false, 0.9999),
      real_key("optim.beta2", GT_REF(optim.beta2), "Adam second-moment decay", 0.0, false, 0.9999),
      real_key("optim.eps", GT_REF(optim.eps), "Adam denominator epsilon", 0.0, true),
      real_key("optim.momentum", GT_REF(optim.momentum), "SGD momentum (optim.type = sgd)", 0.0, false, 1.0),
      int_key<int>("optim.freeze_step", GT_REF(optim.freeze_step),
                   "onebit_adam: AdamW steps on full-precision gradients before the variance freezes and "
                   "momentum is exchanged 1-bit compressed", 0),
      real_key("optim.frozen_v_floor", GT_REF(optim.frozen_v_floor),
               "onebit_adam: floor on sqrt of the bias-corrected second moment when it freezes (gradient units): "
               "a coordinate whose gradient was ~0 until then (a key bias, unused positions) moves at most "
               "lr * |momentum| / floor a step, not lr * |momentum| / eps; 0 = none, as Tang et al.", 0.0, false),
      real_key("optim.clip_grad", GT_REF(optim.clip_grad), "max global gradient L2 norm; 0 = no clipping", 0.0, false),
      int_key<int>("optim.zero_stage", GT_REF(optim.zero_stage),
                   "ZeRO stage over dp (Rajbhandari et al. 2020): 0 = every dp rank holds all optimizer state; 1 = "
                   "each holds the state of its 1/dp of the parameters, gradients are reduce-scattered and the "
                   "parameters all-gathered after the update; 2 = as 1, and the full gradient buckets are freed "
                   "once reduce-scattered; 3 = as 2, and each rank keeps 1/dp of the parameters: a layer's are "
                   "all-gathered before its forward and again before its backward, and freed after each", 0, 3),
      bool_key("optim.zero_prefetch", GT_REF(optim.zero_prefetch),
               "ZeRO stage 3: start the all-gather of the layer used next while this one computes"),
      enum_key("optim.scale_lr", GT_REF(optim.scale_lr),
               "linear scaling rule: lr *= global_batch / reference_batch (Goyal et al. 2017)"),
      int_key<int>("optim.reference_batch", GT_REF(optim.reference_batch),
                   "global batch optim.lr was tuned for (needed by scale_lr = linear)", 0),
  };
}

std::vector<Key> train_keys() {
  return {
      int_key<int>("train.steps", GT_REF(train.steps), "optimizer steps to run", 1),
      int_key<int>("train.micro_batch", GT_REF(train.micro_batch), "sequences per forward/backward on one rank", 1,
                   1 << 20),
      int_key<int>("train.global_batch", GT_REF(train.global_batch),
                   "sequences per optimizer step over all dp ranks (= micro_batch * dp * accumulation)", 1, 1 << 24),
      int_key<int>("train.eval_interval", GT_REF(train.eval_interval),
                   "steps between validation passes; 0 = only after the last step", 0),
      int_key<int>("train.eval_samples", GT_REF(train.eval_samples), "validation samples per pass: windows of T + 1 tokens, or test images (a fixed subset)", 1,
                   1 << 20),
      int_key<std::uint64_t>("train.seed", GT_REF(train.seed), "seed of initialization and data order", 0),
      enum_key("train.device", GT_REF(train.device),
               "where the model trains: cuda needs the cuda build and a GPU (one per rank, by node-local rank); "
               "auto = cuda when both are there, else cpu"),

      int_key<int>("train.max_consecutive_skips", GT_REF(train.max_consecutive_skips),
                   "updates skipped in a row (a non-finite loss or gradient, with loss scaling only at "
                   "precision.min_scale; or an outlier) before the run stops with an error naming the step", 1),
      bool_key("train.skip_outliers", GT_REF(train.skip_outliers),
               "skip the update of a step whose loss or gradient norm is a z-score outlier over the last "
               "train.outlier_window accepted steps (a loss spike)"),
      int_key<int>("train.outlier_window", GT_REF(train.outlier_window), "accepted steps the outlier z-score uses", 2,
                   100000),
      real_key("train.outlier_z", GT_REF(train.outlier_z), "z-score above which a step is an outlier", 0.0, true),
      enum_key("train.schedule", GT_REF(train.schedule),
               "pipeline schedule over a step's micro-batches (global_batch / (micro_batch * dp) of them): 1f1b "
               "(one forward, one backward; fewest activations in flight), gpipe (all forwards, then all "
               "backwards) or interleaved (1F1B over grid.virtual_stages model chunks per rank: bubble "
               "(pp - 1)/(virtual_stages * m) instead of (pp - 1)/m, more pp messages; needs m a multiple of pp) or "
               "zb-h1 (Qi et al. 2024's zero-bubble ZB-H1: 1F1B with some backwards split into the input gradient, "
               "sent on at once, and the linears' weight gradients, run later in the bubbles; bubble (pp - 1)(F + B - "
               "2W) instead of (pp - 1)(F + B + W), a deferred W keeping its linears' inputs; the dp exchange runs "
               "after backward)"),
      enum_key("train.recompute", GT_REF(train.recompute),
               "activation recomputation (Korthikanti et al. 2022): none; selective (the attention core, its "
               "scores and softmax, is run again in backward instead of kept); full (each transformer block keeps "
               "only its input and runs its forward again in backward: ~1/3 more compute, a fraction of the memory)"),
      enum_key("train.on_oom", GT_REF(train.on_oom),
               "out of memory in forward/backward: abort, or backoff (every rank halves train.micro_batch and "
               "doubles accumulation, so the global batch and LR stay, and retries the step)"),
  };
}

std::vector<Key> precision_keys() {
  return {
      enum_key("precision.type", GT_REF(precision.type),
               "compute precision under autocast; the optimizer state and the loss stay fp32, the weights are "
               "precision.weights. fp16 needs CUDA"),
      enum_key("precision.weights", GT_REF(precision.weights),
               "dtype of the parameters and gradients. fp32; or bf16 | fp16: 2 bytes each (gradients exchanged in 2 "
               "bytes), with fp32 master weights kept by the optimizer beside its state and sharded with it at "
               "optim.zero_stage >= 1, so that AdamW holds 2 + 2 + 12 bytes per parameter (Rajbhandari et al. 2020); "
               "checkpoints store the fp32 master. Needs precision.type = the same dtype"),
      enum_key("precision.loss_scaling", GT_REF(precision.loss_scaling),
               "dynamic loss scaling; auto = dynamic for fp16, none otherwise"),
      real_key("precision.init_scale", GT_REF(precision.init_scale), "initial loss scale", 0.0, true, 3.4e38),
      real_key("precision.growth_factor", GT_REF(precision.growth_factor),
               "scale multiplier after precision.growth_interval finite steps", 1.0, true),
      real_key("precision.backoff_factor", GT_REF(precision.backoff_factor), "scale multiplier on overflow", 0.0,
               true, 1.0),
      int_key<int>("precision.growth_interval", GT_REF(precision.growth_interval),
                   "finite steps in a row before the scale grows", 1),
      int_key<int>("precision.hysteresis", GT_REF(precision.hysteresis),
                   "overflows tolerated before the scale backs off", 1),
      real_key("precision.min_scale", GT_REF(precision.min_scale), "lowest loss scale", 0.0, true, 3.4e38),
  };
}

std::vector<Key> comm_keys() {
  return {
      real_key("comm.bucket_mb", GT_REF(comm.bucket_mb), "gradient bucket size for the dp allreduce, MiB", 0.0, true,
               4096.0),
      bool_key("comm.overlap", GT_REF(comm.overlap),
               "start each bucket's allreduce during backward, as soon as its gradients are ready"),
      enum_key("comm.compression", GT_REF(comm.compression),
               "gradient exchange format over dp: fp32 allreduce, or a two-phase allreduce of fp16/bf16 casts"),
      enum_key("comm.backend", GT_REF(comm.backend),
               "collectives on the tp/dp/pp axes: mpi (host buffers) or nccl (device buffers, one NCCL "
               "communicator and CUDA stream per axis); auto = nccl when train.device is cuda, else mpi"),
      real_key("comm.timeout_s", GT_REF(comm.timeout_s),
               "seconds a dp/tp/pp communication (gradient buckets, loss and norm reductions, ...) may take before "
               "the run stops with an error naming it; 0 = no limit", 0.0, false, 86400.0),
  };
}

std::vector<Key> output_keys() {
  return {
      text_key("output.dir", GT_REF(output.dir),
               "directory for log.gridtrain and metrics.jsonl; a run holds gridtrain.lock there (and in "
               "checkpoint.dir) while it runs"),
      bool_key("output.overwrite", GT_REF(output.overwrite),
               "let a fresh run (checkpoint.resume = none) start where another run left metrics or checkpoints: "
               "they are deleted. Without it such a run stops; checkpoint.resume = auto continues that run"),
      int_key<int>("output.thermo", GT_REF(output.thermo), "steps between thermo lines", 1),
      bool_key("output.tensorboard", GT_REF(output.tensorboard),
               "also write each thermo line's figures as TensorBoard scalars (rank 0): event files in output.dir, "
               "flushed at every line (tensorboard --logdir output.dir); a resumed run continues their curves"),
      real_key("output.peak_gflops", GT_REF(output.peak_gflops),
               "per-rank peak GFLOP/s for MFU; 0 = on CUDA the device's datasheet dense peak at precision.type, on "
               "the CPU a matmul probe at precision.type with the run's threads", 0.0, false),
      real_key("output.straggler_factor", GT_REF(output.straggler_factor),
               "a rank whose busy time per step (its step time less its waits in collectives) exceeds the other "
               "ranks' median by this factor at two thermo lines in a row is named in the log as a straggler", 1.0, true),
      enum_key("output.timer", GT_REF(output.timer),
               "section timing: wall (host clock; on a GPU, queued kernels are charged to the first section that "
               "waits for them) or sync (synchronize the device at every stamp, as LAMMPS' timer sync: each "
               "section holds its own GPU work, at some cost in speed)"),
  };
}

std::vector<Key> debug_keys() {
  return {
      real_key("debug.slow_checkpoint_s", GT_REF(debug.slow_checkpoint_s),
               "fault injection: seconds to sleep before a checkpoint file is closed (crash tests)", 0.0, false, 3600.0),
      int_key<int>("debug.stall_rank", GT_REF(debug.stall_rank),
                   "fault injection: this world rank stalls at the start of step 2 (-1 = none), so that the "
                   "others' gradient allreduce hits comm.timeout_s", -1),
      real_key("debug.stall_s", GT_REF(debug.stall_s), "fault injection: seconds debug.stall_rank stalls", 0.0,
               false, 3600.0),
      enum_key("debug.nonfinite", GT_REF(debug.nonfinite),
               "fault injection: a NaN loss or an Inf gradient on debug.nonfinite_rank"),
      int_key<int>("debug.nonfinite_step", GT_REF(debug.nonfinite_step), "fault injection: first step (1-based)", 1),
      int_key<int>("debug.nonfinite_steps", GT_REF(debug.nonfinite_steps), "fault injection: steps in a row", 1),
      int_key<int>("debug.nonfinite_rank", GT_REF(debug.nonfinite_rank), "fault injection: the world rank", 0),
      real_key("debug.alloc_limit_mb", GT_REF(debug.alloc_limit_mb),
               "memory budget per rank, MiB: a step whose micro-batch's estimated activations plus the "
               "model state's measured peak (parameters, gradients, optimizer state) exceed it fails as out "
               "of memory (tests train.on_oom and ZeRO); 0 = off", 0.0, false),
      int_key<int>("debug.kill_rank", GT_REF(debug.kill_rank),
                   "fault injection: this world rank kills itself with SIGKILL as it begins the step after "
                   "debug.kill_step, in a run that started at step 0 (a relaunch that resumes does not die again); "
                   "-1 = none", -1),
      int_key<int>("debug.kill_step", GT_REF(debug.kill_step), "fault injection: the step debug.kill_rank completes", 0),
      bool_key("debug.kill_memory", GT_REF(debug.kill_memory),
               "fault injection: the killed rank's node memory is lost with it: the local parts it holds are deleted"),
      bool_key("debug.kill_partner", GT_REF(debug.kill_partner),
               "fault injection: the killed rank's partner (checkpoint.partner) is killed with it"),
      int_key<int>("debug.slow_rank", GT_REF(debug.slow_rank),
                   "fault injection: this world rank is slower by debug.slow_s in every step (a straggler); -1 = none", -1),
      real_key("debug.slow_s", GT_REF(debug.slow_s), "fault injection: seconds debug.slow_rank adds to every step", 0.0,
               false, 3600.0),
      bool_key("debug.sync_check", GT_REF(debug.sync_check),
               "on a GPU, stop with an error at any host synchronisation (.item(), a copy to the host) inside "
               "forward/backward or the optimizer step: c10's sync debug mode, error level. No effect on the CPU"),
  };
}

// The sections in deck order.
std::vector<Key> build_table() {
  std::vector<Key> table;
  for (auto section : {grid_keys, model_keys, moe_keys, data_keys, optim_keys, train_keys, precision_keys, comm_keys,
                       checkpoint_keys, sparsity_keys, output_keys, debug_keys})
    for (auto& key : section()) table.push_back(std::move(key));
  return table;
}

}  // namespace

const std::vector<Key>& key_table() {
  static const std::vector<Key> table = build_table();
  return table;
}

}  // namespace gridtrain::detail
