// The run configuration: an INI deck (inputs/in.<name>) parsed by Boost.Program_options, with
// every key also accepted as a CLI flag (--section.key=value) that wins over the deck.
//
// parse_config() collects *every* problem (unknown key, wrong type, out of range, inconsistent
// values) and throws one gridtrain::Error listing them all, each with what would be valid.
// The key table (name, default, meaning, valid values) lives in config/keys.cpp and drives
// --help, the effective-config echo and docs/deck-reference.md.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gridtrain {

// Enum-valued keys. Each enum's deck spellings are enum_names(E{}), indexed by the enumerator's
// value; name_of(e) gives one back for messages and the effective-config echo.
enum class ModelType { Gpt, Cnn, Llama };
enum class Attention { Auto, Sdpa, Math };
enum class Matmul { Auto, OneDnn, Blas };
enum class OptimizerType { AdamW, Sgd, OnebitAdam };
enum class LrDecay { Cosine, Linear, Constant };
enum class LrScaling { None, Linear };
enum class DeviceKind { Auto, Cpu, Cuda };
enum class OnOom { Abort, Backoff };
enum class PipelineSchedule { OneFOneB, GPipe, Interleaved, ZbH1 };
enum class Recompute { None, Selective, Full };
enum class PrecisionType { Fp32, Bf16, Fp16 };
enum class LossScaling { Auto, Dynamic, None };
enum class Compression { None, Fp16, Bf16 };
enum class Backend { Auto, Mpi, Nccl };
enum class NonfiniteFault { None, Loss, Grad };
enum class TimerMode { Wall, Sync };
enum class SparsityMethod { None, Gmp, Set, Rigl };
enum class SparsityDistribution { Uniform, Erk };
enum class MoeRouter { Softmax, Sigmoid, Balanced };
enum class ContextExchange { Ring, Allgather };
/// What a parameter is, for sparsity.tensors and the sparsity report: a linear layer's matrix, a
/// convolution kernel, an embedding table, the output head's matrix, or a vector (biases, norms).
enum class TensorClass { Matrix, Conv, Embedding, Head, Vector };

constexpr auto enum_names(ModelType) { return std::array{"gpt", "cnn", "llama"}; }
constexpr auto enum_names(Attention) { return std::array{"auto", "sdpa", "math"}; }
constexpr auto enum_names(Matmul) { return std::array{"auto", "onednn", "blas"}; }
constexpr auto enum_names(OptimizerType) { return std::array{"adamw", "sgd", "onebit_adam"}; }
constexpr auto enum_names(LrDecay) { return std::array{"cosine", "linear", "constant"}; }
constexpr auto enum_names(LrScaling) { return std::array{"none", "linear"}; }
constexpr auto enum_names(DeviceKind) { return std::array{"auto", "cpu", "cuda"}; }
constexpr auto enum_names(OnOom) { return std::array{"abort", "backoff"}; }
constexpr auto enum_names(PipelineSchedule) { return std::array{"1f1b", "gpipe", "interleaved", "zb-h1"}; }
constexpr auto enum_names(Recompute) { return std::array{"none", "selective", "full"}; }
constexpr auto enum_names(PrecisionType) { return std::array{"fp32", "bf16", "fp16"}; }
constexpr auto enum_names(LossScaling) { return std::array{"auto", "dynamic", "none"}; }
constexpr auto enum_names(Compression) { return std::array{"none", "fp16", "bf16"}; }
constexpr auto enum_names(Backend) { return std::array{"auto", "mpi", "nccl"}; }
constexpr auto enum_names(NonfiniteFault) { return std::array{"none", "loss", "grad"}; }
constexpr auto enum_names(TimerMode) { return std::array{"wall", "sync"}; }
constexpr auto enum_names(SparsityMethod) { return std::array{"none", "gmp", "set", "rigl"}; }
constexpr auto enum_names(SparsityDistribution) { return std::array{"uniform", "erk"}; }
constexpr auto enum_names(MoeRouter) { return std::array{"softmax", "sigmoid", "balanced"}; }
constexpr auto enum_names(ContextExchange) { return std::array{"ring", "allgather"}; }
constexpr auto enum_names(TensorClass) { return std::array{"matrix", "conv", "embedding", "head", "vector"}; }

/// The deck spelling of e ("fp16", "1f1b", ...).
template <class E>
constexpr const char* name_of(E e) {
  return enum_names(e)[static_cast<std::size_t>(e)];
}

/// checkpoint.resume: none, auto, or a path (a checkpoint file, a directory, a `latest` pointer).
struct Resume {
  enum class Mode { None, Auto, Path } mode = Mode::None;
  std::string path;  ///< Mode::Path only
};

struct Config {
  struct Grid {
    int dp = 0;  ///< data-parallel size; 0 = auto (world / (cp·tp·pp))
    int tp = 1;  ///< tensor-parallel size
    int pp = 1;  ///< pipeline-parallel size
    int ep = 1;  ///< expert-parallel size: ranks of dp that split each MoE layer's experts (divides dp)
    int cp = 1;  ///< context-parallel size: ranks each sequence is split over
    ContextExchange cp_comm = ContextExchange::Ring;  ///< how attention reaches the other cp ranks' keys and values
    std::vector<int> stage_layers;  ///< layers per pipeline stage ("n0,n1,..."); empty = auto
    bool sequence_parallel = false;  ///< Megatron SP: norms, residual and embedding hold T/tp of the sequence
    int virtual_stages = 1;  ///< model chunks per pipeline rank (train.schedule = interleaved)
  } grid;
  struct Model {
    ModelType type = ModelType::Gpt;
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;
    int block_size = 128;  ///< context length T, tokens
    int vocab_size = 0;    ///< 0 = take it from the dataset's vocab_size attribute
    Attention attention = Attention::Auto;  ///< auto: sdpa where the LibTorch has it (>= 2.0)
    Matmul matmul = Matmul::Auto;  ///< fp32 CPU linears' library (precision/matmul.hpp); auto: onednn where present
    std::vector<int> channels = {32, 64};  ///< cnn: output channels per stage
    int n_kv_head = 0;         ///< llama: key/value heads (grouped-query attention); 0 = n_head
    int ffn_hidden = 0;        ///< llama: SwiGLU width F; 0 = Llama's rule from multiple_of
    int multiple_of = 256;     ///< llama: F = multiple_of · ceil((8C/3) / multiple_of) when ffn_hidden = 0
    double norm_eps = 1e-5;    ///< llama: RMSNorm epsilon
    double rope_theta = 1e4;   ///< llama: rotary embedding base θ
    bool tie_embeddings = false;  ///< llama: output head = the token embedding (gpt always ties)
  } model;
  struct Data {
    std::string path = "data/kjv.h5";  ///< a token file, a directory of shard files, or a glob; or a Megatron prefix
    std::string blend;          ///< "0.7 pathA 0.3 pathB" (Megatron's --data-path); "" = data.path alone
    std::string split;          ///< Megatron datasets: train,validation,test weights over documents; "" (auto) = 969,30,1
    bool allow_change = false;  ///< resume onto another corpus than the checkpoint's
    int prefetch = 2;           ///< batches the loader thread keeps ready ahead; 0 = load on the step loop's thread
    int random_crop = 0;        ///< cnn: zero-padding, pixels, of the random-crop augmentation; 0 = off
    // Document-aware training (Megatron's --reset-position-ids, --reset-attention-mask, --eod-mask-loss).
    int eod_token = -1;               ///< the end-of-document token id; -1 (auto) = the corpus's eod_id attribute
    bool reset_position_ids = false;  ///< positions restart after each end-of-document token
    bool document_mask = false;       ///< each token attends within its own document only
    bool eod_mask_loss = false;       ///< the prediction from an end-of-document token carries no loss
    bool documents() const { return reset_position_ids || document_mask || eod_mask_loss; }
  } data;
  struct Optim {
    OptimizerType type = OptimizerType::AdamW;
    double lr = 1e-3;           ///< peak learning rate (before the linear scaling rule)
    double min_lr = 1e-4;       ///< floor the decay ends at
    int warmup_steps = 100;     ///< linear warmup length, steps
    LrDecay schedule = LrDecay::Cosine;
    int decay_steps = 0;        ///< step at which decay reaches min_lr; 0 = train.steps
    double weight_decay = 0.1;  ///< decoupled (AdamW), on >= 2-D weights only
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double momentum = 0.9;  ///< sgd only
    int freeze_step = 100;  ///< onebit_adam: full-precision Adam steps before compression starts
    double frozen_v_floor = 0;  ///< onebit_adam: floor on √v̂ from the freeze on (gradient units); 0 = none
    double clip_grad = 1.0;  ///< max global L2 norm; 0 = off
    int zero_stage = 0;      ///< ZeRO stage over dp: 0, 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters)
    bool zero_prefetch = true;  ///< stage 3: start the next unit's all-gather ahead of its use
    LrScaling scale_lr = LrScaling::None;  ///< linear: lr × global_batch / reference_batch
    int reference_batch = 0;        ///< batch that optim.lr was tuned for (linear rule)
  } optim;
  struct Train {
    int steps = 1000;
    int micro_batch = 16;   ///< sequences per forward/backward on one rank
    int global_batch = 32;  ///< sequences per optimizer step over all dp ranks
    int eval_interval = 100;  ///< steps between validation passes; 0 = only at the end
    int eval_samples = 256;   ///< validation samples per pass (fixed subset)
    std::uint64_t seed = 1337;
    DeviceKind device = DeviceKind::Auto;  ///< auto: cuda when built for it and a GPU is visible
    int max_consecutive_skips = 10;  ///< non-finite steps in a row (at the minimum loss scale) before aborting
    bool skip_outliers = false;      ///< skip steps whose loss or grad norm is a z-score outlier
    int outlier_window = 100;        ///< accepted steps the z-score is taken over
    double outlier_z = 6.0;          ///< z-score above which a step is an outlier
    OnOom on_oom = OnOom::Abort;     ///< backoff: halve the micro-batch, double accumulation
    PipelineSchedule schedule = PipelineSchedule::OneFOneB;
    Recompute recompute = Recompute::None;  ///< activation recomputation in backward (model/recompute.hpp)
  } train;
  struct Precision {
    gridtrain::PrecisionType type = gridtrain::PrecisionType::Fp32;  ///< autocast compute
    /// Parameters and gradients: fp32, or 2 bytes with fp32 master weights in the optimizer.
    gridtrain::PrecisionType weights = gridtrain::PrecisionType::Fp32;
    LossScaling loss_scaling = LossScaling::Auto;  ///< auto: dynamic for fp16
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int growth_interval = 1000;
    int hysteresis = 2;
    double min_scale = 1.0;
  } precision;
  struct Comm {
    double bucket_mb = 25.0;  ///< gradient bucket size, MiB
    bool overlap = true;      ///< start each bucket's allreduce during backward
    double timeout_s = 300;   ///< a communication taking longer is an error; 0 = no limit
    Compression compression = Compression::None;  ///< gradient exchange format
    Backend backend = Backend::Auto;  ///< auto: nccl on cuda, else mpi
  } comm;
  struct Checkpoint {
    std::string dir = "none";  ///< directory of step-XXXXXXXX.h5 and `latest`; none = no checkpoints
    int interval = 0;          ///< steps between checkpoints; 0 = only after the last step
    int keep_last = 3;         ///< checkpoints kept (older ones are deleted)
    bool async = false;        ///< write in the background (needs MPI_THREAD_MULTIPLE)
    Resume resume;
    std::string init_from = "none";  ///< a fresh run starts from this checkpoint's weights only
    /// Node-memory checkpoints (checkpoint/local_part.hpp): each rank's part every local_interval
    /// steps (0 = none) into local_dir, and a copy on its partner's node.
    std::string local_dir = "auto";  ///< auto = /dev/shm/gridtrain-$SLURM_JOB_ID (outside Slurm: -$USER)
    int local_interval = 0;
    bool partner = true;       ///< keep a copy of each part on the partner rank's node
    int ranks_per_node = 0;    ///< 0 = from MPI's node-local split; set to simulate nodes on one host
    bool enabled() const { return dir != "none"; }
  } checkpoint;
  struct Output {
    std::string dir = "out";
    bool overwrite = false;    ///< a fresh run may replace another run's metrics and checkpoints
    int thermo = 10;           ///< steps between thermo lines
    bool tensorboard = false;  ///< thermo's figures as TensorBoard event files in dir
    double peak_gflops = 0.0;  ///< per-rank peak for MFU; 0 = device table (CUDA) or a matmul probe (CPU)
    TimerMode timer = TimerMode::Wall;  ///< sync: synchronize the device at each section stamp
    double straggler_factor = 1.2;  ///< a rank whose busy time per step exceeds the others' median by this is named
  } output;

  /// Dynamic sparse training (sparse/sparse_training.hpp): which weights are masked to zero, and
  /// how the masks change.
  struct Sparsity {
    SparsityMethod method = SparsityMethod::None;
    double target = 0.8;   ///< final fraction of zeros over the sparsified tensors
    int start = 0;         ///< step of the first mask update (set, rigl: the initial pruning)
    int end = 0;           ///< last step at which masks change; 0 = 3/4 of train.steps (RigL's T_end)
    int interval = 100;    ///< steps between mask updates (ΔT)
    SparsityDistribution distribution = SparsityDistribution::Uniform;
    double drop_fraction = 0.3;  ///< set: fraction of active weights dropped and regrown; rigl: its initial value α
    std::vector<TensorClass> tensors = {TensorClass::Matrix, TensorClass::Conv};  ///< classes sparsified
    bool enabled() const { return method != SparsityMethod::None; }
    /// The last mask-update step in effect: end, or 3/4 of steps for end = 0.
    int end_step(int steps) const { return end > 0 ? end : steps * 3 / 4; }
  } sparsity;

  /// Mixture of experts in a llama's MLPs (model/moe.hpp): which layers, how many experts, how
  /// tokens are routed to them and how the routing is balanced.
  struct Moe {
    int experts = 0;             ///< routed experts E of each MoE layer; 0 = dense (no MoE)
    int top_k = 2;               ///< experts each token is routed to
    int every = 1;               ///< moe.layers = every:N: layers N − 1, 2N − 1, ... (1: all)
    std::vector<int> list;       ///< moe.layers as a list of layer indices; empty: by `every`
    int ffn_hidden = 0;          ///< each expert's SwiGLU width; 0 = the dense MLP's
    int shared_ffn_hidden = 0;   ///< Qwen2-MoE's shared expert's width; 0 = none
    bool norm_topk_prob = true;  ///< the k chosen probabilities renormalized to sum 1 (Mixtral)
    MoeRouter router = MoeRouter::Softmax;  ///< how tokens choose experts (model/router.hpp)
    double expert_bias_rate = 0.0;          ///< γ of the auxiliary-loss-free expert bias; 0 = none
    double aux_loss_coeff = 0.01;  ///< load-balancing loss weight (Switch Transformer's α)
    double z_loss_coeff = 0.0;     ///< router z-loss weight (ST-MoE)
    double capacity_factor = 0.0;  ///< slots per expert per micro-batch: ⌈factor · N·k / E⌉; 0 = dropless
    bool enabled() const { return experts > 0; }
    /// Whether global layer `layer` (0-based) is an MoE layer.
    bool on(int layer) const {
      if (!enabled()) return false;
      if (list.empty()) return (layer + 1) % every == 0;
      return std::find(list.begin(), list.end(), layer) != list.end();
    }
  } moe;

  struct Debug {
    double slow_checkpoint_s = 0.0;  ///< fault injection: sleep before closing a checkpoint file
    int stall_rank = -1;             ///< fault injection: this world rank stalls at the start of step 2
    double stall_s = 0.0;            ///< ... for this many seconds (a rank late to its collectives)
    NonfiniteFault nonfinite = NonfiniteFault::None;  ///< fault injection: NaN loss / Inf gradient
    int nonfinite_step = 1;          ///< ... first step (1-based) it happens at
    int nonfinite_steps = 1;         ///< ... for this many steps in a row
    int nonfinite_rank = 0;          ///< ... on this world rank
    double alloc_limit_mb = 0.0;     ///< a step whose activations + model-state peak exceed this fails like an OOM
    bool sync_check = false;         ///< GPU: a host synchronisation inside forward/backward/step is an error
    int kill_rank = -1;              ///< fault injection: this world rank is SIGKILLed ...
    int kill_step = 0;               ///< ... as it begins the step after this one, in a run that started fresh
    bool kill_memory = false;        ///< ... its node memory lost with it (the local parts it holds deleted)
    bool kill_partner = false;       ///< ... and its partner rank killed with it
    int slow_rank = -1;              ///< fault injection: this world rank is slower ...
    double slow_s = 0.0;             ///< ... by this many seconds of every step (a straggler)
  } debug;

  std::string deck_name;  ///< where the deck came from (path or "built in")
};

/// One deck key: its name, default, meaning and what values are valid.
struct KeyInfo {
  std::string name;
  std::string default_value;
  std::string help;
  std::string valid;
};

/// Parses deck_text (INI) and then the CLI overrides (argv-style "--section.key=value" strings).
/// Throws gridtrain::Error listing every problem found, naming deck_name, the key and the value.
Config parse_config(const std::string& deck_text, const std::string& deck_name,
                    const std::vector<std::string>& cli_overrides);

/// Every key with its default, meaning and valid values, in deck order.
std::vector<KeyInfo> config_keys();

/// The effective configuration as an INI deck (sections in deck order), suitable to re-run.
std::string config_text(const Config& c);

/// One key's value in c as deck text (e.g. "auto" or "3,3,2" for grid.stage_layers). Throws
/// std::out_of_range for a key that does not exist.
std::string show_key(const Config& c, const std::string& name);

/// "3,3,2": integers joined by commas, the deck's list format ("" for none).
std::string comma_list(const std::vector<int>& v);

/// The --help text for the keys: "  --section.key=DEFAULT   meaning [valid]".
std::string config_help();

}  // namespace gridtrain
