#include "gridtrain/config/config.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>

#include "gridtrain/util/error.hpp"
#include "keys.hpp"
#include "moe_keys.hpp"
#include "sparsity_keys.hpp"

namespace po = boost::program_options;

namespace gridtrain {
namespace {

using detail::Key;
using detail::key_table;

po::options_description key_options() {
  po::options_description desc;
  for (const Key& k : key_table()) desc.add_options()(k.info.name.c_str(), po::value<std::string>());
  return desc;
}

// Closest known key, to suggest for a typo (Levenshtein distance <= 3).
std::string suggest(const std::string& unknown) {
  std::string best;
  size_t best_d = 4;
  for (const Key& k : key_table()) {
    const std::string& a = unknown;
    const std::string& b = k.info.name;
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    if (row[b.size()] < best_d) best_d = row[b.size()], best = b;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

const Key* find_key(const std::string& name) {
  for (const Key& k : key_table())
    if (k.info.name == name) return &k;
  return nullptr;
}

// Applies one parsed source (deck or CLI) to c, appending problems to errors.
void apply(const po::parsed_options& parsed, const std::string& where, Config& c,
           std::vector<std::string>& errors) {
  std::map<std::string, int> seen;
  for (const auto& opt : parsed.options) {
    const std::string key = opt.string_key;
    const Key* k = find_key(key);
    if (opt.unregistered || k == nullptr) {
      errors.push_back(where + ": unknown key '" + key + "'" + suggest(key) +
                       "; run `gridtrain --help` for the list of keys");
      continue;
    }
    if (++seen[key] == 2) errors.push_back(where + ": key '" + key + "' is given more than once");
    if (opt.value.size() != 1) {
      errors.push_back(where + ": key '" + key + "' needs exactly one value");
      continue;
    }
    if (auto problem = k->assign(c, opt.value.front()))
      errors.push_back(where + ": " + key + " = '" + opt.value.front() + "': " + *problem);
  }
}

// The llama's keys: grouped-query heads, rotary pairs; the other models have no such keys.
void check_llama(const Config& c, std::vector<std::string>& errors) {
  const auto& m = c.model;
  if (m.type != ModelType::Llama) {
    if (m.n_kv_head != 0)
      errors.push_back("model.n_kv_head = " + std::to_string(m.n_kv_head) + " is a llama key, but model.type = " +
                       name_of(m.type) + "; valid: 0, or model.type = llama");
    return;
  }
  if (m.n_kv_head > m.n_head || (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0))
    errors.push_back("model.n_kv_head = " + std::to_string(m.n_kv_head) + " does not divide model.n_head = " +
                     std::to_string(m.n_head) + "; valid: 0 (= n_head) or a divisor of n_head");
  if (m.n_embd % m.n_head == 0 && (m.n_embd / m.n_head) % 2 != 0)
    errors.push_back("model.n_embd / model.n_head = " + std::to_string(m.n_embd / m.n_head) +
                     " is odd; rotary embeddings rotate pairs of a head's features: valid: an even head width");
}

// Checks that involve more than one key (those involving the world size live in the grid/app).
void check_consistency(const Config& c, std::vector<std::string>& errors) {
  check_llama(c, errors);
  detail::check_sparsity(c, errors);
  detail::check_moe(c, errors);
  if (c.model.n_embd % c.model.n_head != 0)
    errors.push_back("model.n_embd = " + std::to_string(c.model.n_embd) + " is not divisible by model.n_head = " +
                     std::to_string(c.model.n_head) + "; valid: a multiple of n_head");
  if (c.train.global_batch % c.train.micro_batch != 0)
    errors.push_back("train.global_batch = " + std::to_string(c.train.global_batch) +
                     " is not a multiple of train.micro_batch = " + std::to_string(c.train.micro_batch));
  if (c.data.random_crop > 0 && c.model.type != ModelType::Cnn)
    errors.push_back("data.random_crop = " + std::to_string(c.data.random_crop) + " crops images, but model.type = " +
                     name_of(c.model.type) + " trains on tokens; valid: 0, or model.type = cnn");
  if (!c.data.blend.empty() && c.model.type == ModelType::Cnn)
    errors.push_back("data.blend mixes token datasets, but model.type = cnn trains on one image set; valid: none, or "
                     "model.type = gpt or llama");
  if (c.data.documents() && c.model.type == ModelType::Cnn)
    errors.push_back("data.reset_position_ids, data.document_mask and data.eod_mask_loss split token windows into "
                     "documents, but model.type = cnn trains on images; valid: false, or model.type = gpt or llama");
  if (c.train.recompute != Recompute::None && c.model.type == ModelType::Cnn)
    errors.push_back(std::string("train.recompute = ") + name_of(c.train.recompute) +
                     " recomputes transformer blocks, but model.type = cnn has none; valid: train.recompute = none");
  if (c.optim.min_lr > c.optim.lr)
    errors.push_back("optim.min_lr = " + std::to_string(c.optim.min_lr) + " is above optim.lr = " +
                     std::to_string(c.optim.lr) + "; valid: min_lr <= lr");
  if (c.optim.scale_lr == LrScaling::Linear && c.optim.reference_batch == 0)
    errors.push_back("optim.scale_lr = linear needs optim.reference_batch > 0 (the batch optim.lr was tuned for)");
  if (c.optim.type == OptimizerType::OnebitAdam && c.comm.compression != Compression::None)
    errors.push_back(std::string("optim.type = onebit_adam compresses its own momentum exchange; comm.compression = ") +
                     name_of(c.comm.compression) + " would compress the warm-up gradients too; set comm.compression = none");
  if (c.optim.zero_stage > 0 && c.optim.type == OptimizerType::OnebitAdam)
    errors.push_back("optim.zero_stage = " + std::to_string(c.optim.zero_stage) + " with optim.type = onebit_adam: "
                     "1-bit Adam exchanges whole momentum tensors itself; use optim.zero_stage = 0, or adamw/sgd");
  if (c.optim.zero_stage > 0 && c.comm.compression != Compression::None)
    errors.push_back("optim.zero_stage = " + std::to_string(c.optim.zero_stage) + " reduce-scatters fp32 gradients; "
                     "comm.compression = " + name_of(c.comm.compression) + " compresses allreduces only; set "
                     "comm.compression = none, or optim.zero_stage = 0");
  if (c.comm.backend == Backend::Nccl && c.train.device == DeviceKind::Cpu)
    errors.push_back("comm.backend = nccl moves device buffers, but train.device = cpu; use comm.backend = mpi "
                     "(or auto), or train.device = cuda");
  if (c.comm.backend == Backend::Mpi && c.train.device == DeviceKind::Cuda)
    errors.push_back("comm.backend = mpi with train.device = cuda would need CUDA-aware MPI, which gridtrain does "
                     "not use; use comm.backend = nccl (or auto)");
  if (c.precision.type == PrecisionType::Fp16 && c.train.device == DeviceKind::Cpu)
    errors.push_back("precision.type = fp16 needs CUDA (CPU autocast computes in bf16); use precision.type = bf16 "
                     "on the CPU");
  if (c.precision.weights != PrecisionType::Fp32) {
    const std::string weights = std::string("precision.weights = ") + name_of(c.precision.weights);
    if (c.precision.type != c.precision.weights)
      errors.push_back(weights + " runs the forward in " + name_of(c.precision.weights) + ", but precision.type = " +
                       name_of(c.precision.type) + "; valid: precision.type = " + name_of(c.precision.weights) +
                       ", or precision.weights = fp32");
    if (c.comm.compression != Compression::None)
      errors.push_back(weights + " exchanges 2-byte gradients already; comm.compression = " +
                       name_of(c.comm.compression) + " would compress them again; set comm.compression = none");
    if (c.model.type == ModelType::Cnn)
      errors.push_back(weights + " is for the transformers (gpt, llama); model.type = cnn keeps fp32 weights beside "
                       "its fp32 batch-norm statistics; valid: precision.weights = fp32");
  }
  if (c.precision.min_scale > c.precision.init_scale)
    errors.push_back("precision.min_scale = " + std::to_string(c.precision.min_scale) + " is above precision.init_scale = " +
                     std::to_string(c.precision.init_scale) + "; valid: min_scale <= init_scale");
  if (c.checkpoint.resume.mode == Resume::Mode::Auto && !c.checkpoint.enabled())
    errors.push_back("checkpoint.resume = auto needs checkpoint.dir (it is 'none'); set checkpoint.dir");
  if (c.checkpoint.local_interval > 0 && !c.checkpoint.enabled())
    errors.push_back("checkpoint.local_interval = " + std::to_string(c.checkpoint.local_interval) +
                     " needs checkpoint.dir (it is 'none'): the local levels hold the newest steps, checkpoint.dir "
                     "the lineage and the steps that outlive the job; set checkpoint.dir");
  if (c.debug.kill_rank >= 0 && c.debug.kill_step < 1)
    errors.push_back("debug.kill_rank = " + std::to_string(c.debug.kill_rank) + " needs debug.kill_step >= 1 (it is " +
                     std::to_string(c.debug.kill_step) + ")");
  if (c.optim.decay_steps != 0 && c.optim.decay_steps <= c.optim.warmup_steps)
    errors.push_back("optim.decay_steps = " + std::to_string(c.optim.decay_steps) +
                     " must exceed optim.warmup_steps = " + std::to_string(c.optim.warmup_steps) + " (or be 0)");
}

}  // namespace

Config parse_config(const std::string& deck_text, const std::string& deck_name,
                    const std::vector<std::string>& cli_overrides) {
  Config c;
  c.deck_name = deck_name;
  std::vector<std::string> errors;
  const auto desc = key_options();

  try {
    std::istringstream in(deck_text);
    apply(po::parse_config_file(in, desc, /*allow_unregistered=*/true), "deck " + deck_name, c, errors);
  } catch (const po::error& e) {
    errors.push_back("deck " + deck_name + ": " + e.what() +
                     "; valid lines are '[section]', 'key = value' and '# comment'");
  }
  try {
    std::vector<std::string> args(cli_overrides);
    auto parsed = po::command_line_parser(args).options(desc).allow_unregistered()
                      .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
                      .run();
    for (const auto& opt : parsed.options)
      if (opt.string_key.empty())  // positional argument
        errors.push_back("command line: unexpected argument '" + opt.original_tokens.front() +
                         "'; overrides look like --section.key=value");
    std::erase_if(parsed.options, [](const po::option& o) { return o.string_key.empty(); });
    apply(parsed, "command line", c, errors);
  } catch (const po::error& e) {
    errors.push_back(std::string("command line: ") + e.what());
  }
  if (errors.empty()) check_consistency(c, errors);
  if (!errors.empty()) {
    std::string msg = std::to_string(errors.size()) + " problem(s) in the configuration:";
    for (const auto& e : errors) msg += "\n  - " + e;
    throw Error(msg);
  }
  return c;
}

std::vector<KeyInfo> config_keys() {
  std::vector<KeyInfo> out;
  for (const Key& k : key_table()) out.push_back(k.info);
  return out;
}

std::string config_text(const Config& c) {
  std::string out, section;
  for (const Key& k : key_table()) {
    const auto dot = k.info.name.find('.');
    const std::string s = k.info.name.substr(0, dot);
    if (s != section) out += (section.empty() ? "[" : "\n[") + s + "]\n", section = s;
    out += k.info.name.substr(dot + 1) + " = " + k.show(c) + "\n";
  }
  return out;
}

std::string show_key(const Config& c, const std::string& name) {
  const Key* k = find_key(name);
  if (!k) throw std::out_of_range("no deck key '" + name + "'");
  return k->show(c);
}

std::string comma_list(const std::vector<int>& v) {
  std::string out;
  for (int x : v) (out += out.empty() ? "" : ",") += std::to_string(x);
  return out;
}

std::string config_help() {
  std::string out;
  for (const Key& k : key_table()) {
    std::string flag = "  --" + k.info.name + "=" + k.info.default_value;
    if (flag.size() < 34) flag.resize(34, ' ');
    out += flag + " " + k.info.help + " [" + k.info.valid + "]\n";
  }
  return out;
}

}  // namespace gridtrain
