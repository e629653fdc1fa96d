#include "gridtrain/app/generate.hpp"

#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/checkpoint/tokenizer_record.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {
namespace {

// The next token from one position's logits (V,) fp32 on the host.
std::int64_t sample_next(torch::Tensor logits, double temperature, int top_k, at::Generator& gen) {
  if (temperature == 0) return logits.argmax().item<std::int64_t>();
  logits = logits / temperature;
  if (top_k > 0 && top_k < logits.size(0)) {
    const auto kth = std::get<0>(logits.topk(top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(torch::softmax(logits, 0), 1, /*replacement=*/false, gen).item<std::int64_t>();
}

}  // namespace

InferenceModel load_language_model(const std::string& path) {
  auto file = CheckpointFile::open(path, MPI_COMM_SELF);
  file.check_header();
  const Config cfg = parse_config(h5_read_attr_string(file.root(), "deck"), path + " (its deck)", {});
  if (!language_model(cfg))
    throw Error(path + ": a " + name_of(cfg.model.type) + " checkpoint; generate samples text from language models");
  std::unique_ptr<Tokenizer> tokenizer;
  if (const auto t = read_tokenizer_record(file)) tokenizer = make_tokenizer(t->name, t->model);
  // The vocabulary as training resolved it: model.vocab_size, or (0) the data's, which is its tokenizer's.
  const int vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : tokenizer->vocab_size();
  auto model = make_model(cfg, DataShape{vocab});
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters(true)) {
    const std::vector<hsize_t> shape(p.value().sizes().begin(), p.value().sizes().end());
    file.read("/model/" + p.key(), DType::F32, shape, Slab::all(shape), p.value().data_ptr(), false);
  }
  return {model, std::move(tokenizer), cfg.model.matmul};
}

Generated generate_text(const GenerateOptions& o) {
  Generated r;
  if (o.prompt.empty()) throw Error("generate: --prompt is empty; give at least one character");
  if (o.max_new_tokens < 0 || o.temperature < 0 || o.top_k < 0)
    throw Error("generate: --max-new-tokens, --temperature and --top-k must be >= 0");
  InferenceModel loaded;
  try {
    loaded = load_language_model(o.checkpoint);
  } catch (const std::runtime_error& e) {  // gridtrain::Error included: its message gets the file
    throw Error("generate: checkpoint '" + o.checkpoint + "': " + e.what());
  }
  auto& [model, tokenizer, deck_matmul] = loaded;
  try {
    set_matmul_backend(o.matmul.value_or(deck_matmul));  // as training ran it, unless --matmul says otherwise
  } catch (const Error& e) {
    throw Error(std::string("generate: ") + e.what() + (o.matmul ? "" : " (--matmul overrides the checkpoint's deck)"));
  }
  if (!tokenizer)
    throw Error("generate: checkpoint '" + o.checkpoint + "' has no tokenizer (weights imported from a directory "
                "without tokenizer.json, or trained on a Megatron indexed dataset, which records none, from no "
                "checkpoint.init_from that had one); train from it on a corpus prepared with the model's tokenizer by "
                "`gridtrain prepare`, then generate");
  const torch::Device device(o.device);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw Error("generate: --device " + o.device + ", but no CUDA device is visible to this build");
  model->to(device);
  torch::NoGradGuard no_grad;
  const auto block = model->plan().items_per_sample();  // the context length T: a sample's tokens
  const auto prompt = tokenizer->encode(o.prompt);
  if (prompt.empty())
    throw Error("generate: the " + tokenizer->name() + " tokenizer encodes --prompt '" + o.prompt +
                "' to no tokens; give a prompt with visible text");
  if (static_cast<std::int64_t>(prompt.size()) > block)
    std::fprintf(stderr, "WARNING: generate: --prompt is %zu tokens, longer than the model's context of %lld "
                 "(model.block_size): only its last %lld tokens are seen\n", prompt.size(),
                 static_cast<long long>(block), static_cast<long long>(block));
  std::vector<std::int64_t> ids(prompt.begin(), prompt.end());
  auto gen = at::detail::createCPUGenerator(o.seed);
  std::vector<std::int32_t> out;
  // With the cache, the prompt runs once and each new token costs one position, while the
  // context holds them all; past it (and without the cache) each token runs the last T tokens.
  KvCache cache;
  auto tensor = [&](auto from, auto to) { return torch::tensor(std::vector<std::int64_t>(from, to)).view({1, -1}).to(device); };
  Stopwatch clock;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    torch::Tensor logits;
    if (o.kv_cache && static_cast<std::int64_t>(ids.size()) <= block) {
      logits = model->logits(tensor(ids.begin() + cache.length, ids.end()), &cache);
    } else {
      const auto from = ids.size() > static_cast<std::size_t>(block) ? ids.end() - block : ids.begin();
      logits = model->logits(tensor(from, ids.end()));
    }
    const auto next = sample_next(logits[0][-1].cpu(), o.temperature, o.top_k, gen);
    if (i == 0) r.first_token_s = clock.seconds();
    ids.push_back(next);
    out.push_back(static_cast<std::int32_t>(next));
  }
  r.later_tokens_s = clock.seconds() - r.first_token_s;
  r.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  r.text = tokenizer->decode(out);
  return r;
}

}  // namespace gridtrain
