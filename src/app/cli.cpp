// Command line of the gridtrain program and the two kinds of error exits (see util/error.hpp).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <boost/program_options.hpp>

#include "gridtrain/app/cli.hpp"

#include "gridtrain/app/app.hpp"
#include "gridtrain/app/generate.hpp"
#include "gridtrain/checkpoint/inspect.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/prepare_idx.hpp"
#include "gridtrain/default_deck.hpp"
#include "gridtrain/interop/hf.hpp"
#include "gridtrain/plan/dry_run.hpp"
#include "gridtrain/plan/predict.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/process_setup.hpp"
#include "gridtrain/util/signals.hpp"
#include "gridtrain/app/build_info.hpp"

namespace po = boost::program_options;

namespace gridtrain {
namespace {

constexpr const char* kUsage =
    "Usage:\n"
    "  mpirun -np N gridtrain [-i DECK] [--section.key=value ...]   train (no -i: built-in KJV GPT deck)\n"
    "  mpirun -np N gridtrain [-i DECK] --restart CKPT [...]         resume (= --checkpoint.resume=CKPT)\n"
    "  mpirun -np N gridtrain [-i DECK] --dry-run [...]              memory per rank and FLOPs per step, no training\n"
    "  gridtrain config [-i DECK] [--section.key=value ...]          the resolved configuration (as a run records it)\n"
    "  mpirun -np N gridtrain prepare text --input FILE --output FILE.h5|PREFIX|DIR [--format hdf5|megatron]\n"
    "                     [--val-fraction F] [--shard-size TOKENS]\n"
    "                     [--tokenizer bytes|sentencepiece --sp-model M.model | --train-tokenizer --vocab-size N\n"
    "                      [--character-coverage F] | hf --tokenizer-json PATH] [--accept-lossy]\n"
    "  mpirun -np N gridtrain prepare jsonl --input FILE.jsonl[.gz|.zst] --output FILE.h5|PREFIX|DIR [--json-key text]\n"
    "                     [--append-eod] [--format hdf5|megatron] [--val-fraction F] [--shard-size TOKENS]\n"
    "                     [--tokenizer bytes|sentencepiece --sp-model M.model | hf --tokenizer-json PATH]\n"
    "                     [--accept-lossy]\n"
    "                                                                 documents from JSON Lines (Megatron's input)\n"
    "  gridtrain prepare idx --images F --labels F --test-images F --test-labels F --output FILE.h5 [--classes N]\n"
    "                                                                 image set from IDX files (.gz or not)\n"
    "  gridtrain predict [-i DECK] --ranks N [--layout DP,TP,PP[,ZERO]] [--device a100|h100|h200|cpu]\n"
    "                     [--achievable F] [--flops-per-s R] [--ranks-per-node G] [--cores-per-node C]\n"
    "                     [--intra-gbps B --intra-us A --inter-gbps B --inter-us A] [--recompute] [--grad-bytes 2|4]\n"
    "                     [--top K] [--csv] [--section.key=value ...]  predicted step time of layouts (docs/scaling.md)\n"
    "  gridtrain inspect CKPT                                         metadata and checksums of a checkpoint\n"
    "  gridtrain generate CKPT [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "                     [--device cpu|cuda] [--kv-cache true|false] [--matmul auto|onednn|blas]\n"
    "                                                                 sample text from a checkpoint (one rank)\n"
    "  gridtrain export CKPT --format hf --output DIR [--max-shard-mb MB]\n"
    "                                                                 a transformers model directory (one rank)\n"
    "  gridtrain import DIR --output CKPT                             a transformers model as a weights-only\n"
    "                                                                 checkpoint (for checkpoint.init_from)\n"
    "  gridtrain --help | --version\n";

std::string read_deck(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read deck file '" + path + "' (given with -i); check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every verb's options: args parsed by desc (and positional, if given). With `overrides`, what desc
// does not know is collected there (the deck keys predict takes) instead of refused. Throws
// Error naming the verb, with the usage, on an unknown, missing or malformed option.
po::variables_map parse_options(const std::string& verb, const std::vector<std::string>& args,
                                const po::options_description& desc,
                                const po::positional_options_description* positional = nullptr,
                                std::vector<std::string>* overrides = nullptr) {
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    if (overrides) parser.allow_unregistered();
    const auto parsed = parser.run();
    po::store(parsed, vm);
    po::notify(vm);
    if (overrides) *overrides = po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    throw Error(verb + ": " + e.what() + "\n" + kUsage);
  }
  return vm;
}

// Refuses a verb that runs on one rank when started on more.
void require_one_rank(const std::string& verb) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks > 1) throw Error(verb + " runs on one rank; start it without mpirun (or with -np 1)");
}

// `prepare <format>`'s options: args after the format.
po::variables_map parse_prepare(const std::vector<std::string>& args, const po::options_description& desc) {
  return parse_options("prepare", {args.begin() + 1, args.end()}, desc);
}

int prepare_idx_main(const std::vector<std::string>& args, Log& log) {
  IdxOptions o;
  po::options_description desc("gridtrain prepare idx");
  desc.add_options()("images", po::value(&o.images)->required(), "training images (IDX, .gz or not)")(
      "labels", po::value(&o.labels)->required(), "training labels (IDX)")(
      "test-images", po::value(&o.test_images)->required(), "test images (IDX)")(
      "test-labels", po::value(&o.test_labels)->required(), "test labels (IDX)")(
      "output", po::value(&o.output)->required(), "HDF5 file to write")(
      "classes", po::value(&o.classes), "labels must lie in [0, N) (default: the largest label + 1)");
  const po::variables_map vm = parse_prepare(args, desc);
  if (vm.count("classes") && (o.classes < 2 || o.classes > 256))
    throw Error("prepare idx: --classes " + std::to_string(o.classes) + ": valid: 2 .. 256 (labels are bytes)");
  const IdxReport r = prepare_idx(o, MPI_COMM_WORLD);
  log.print("Wrote " + o.output + ": " + std::to_string(r.train) + " train + " + std::to_string(r.test) +
            " test images (" + std::to_string(r.channels) + "x" + std::to_string(r.height) + "x" + std::to_string(r.width) +
            "), " + std::to_string(r.classes) + " classes, sha256 " + r.sha256 + "\n");
  if (!r.unused.empty())
    log.warn("prepare idx: no image has label " + comma_list(r.unused) + " of the " + std::to_string(r.classes) +
             " classes" + (vm.count("classes") ? "" : " (the largest label + 1)") +
             ": the model gets output classes nothing trains; --classes N refuses labels outside [0, N)");
  return 0;
}

// `prepare text` and `prepare jsonl`'s options (jsonl: --json-key, --append-eod; no training).
po::options_description prepare_options(PrepareOptions& o, bool jsonl) {
  po::options_description desc(jsonl ? "gridtrain prepare jsonl" : "gridtrain prepare text");
  desc.add_options()("input", po::value(&o.input)->required(),
                     jsonl ? "JSON Lines file of documents (.jsonl, .jsonl.gz or .jsonl.zst)" : "text file to tokenize")(
      "output", po::value(&o.output)->required(),
      "HDF5 file to write (megatron: the prefix P of P.bin and P.idx), or with --shard-size the directory for the shards")(
      "format", po::value(&o.format)->default_value(o.format),
      jsonl ? "hdf5 | megatron (Megatron-LM's indexed dataset, one document per JSON line; split when read: data.split)"
            : "hdf5 | megatron (Megatron-LM's indexed dataset, one document per line; split when read: data.split)")(
      "val-fraction", po::value(&o.val_fraction)->default_value(o.val_fraction),
      "hdf5: share of the tokens (tail) kept for validation")(
      "shard-size", po::value(&o.shard_size)->default_value(0), "tokens per shard file (0: one file)")(
      "tokenizer", po::value(&o.tokenizer)->default_value(o.tokenizer), "bytes | sentencepiece | hf")(
      "sp-model", po::value(&o.sp_model), "sentencepiece: the tokenizer model file (.model)")(
      "tokenizer-json", po::value(&o.hf_tokenizer),
      "hf: a transformers tokenizer.json, or a model directory holding one (its tokenizer_config.json names the "
      "eos_token); encoded by Hugging Face's tokenizers, no BOS/EOS added")(
      "accept-lossy", po::bool_switch(&o.accept_lossy),
      "sentencepiece, hf: store text they do not give back unchanged (bytes not UTF-8 -> U+FFFD; sentencepiece: "
      "U+2581 -> space), warning");
  if (jsonl)
    desc.add_options()("json-key", po::value(&o.json_key)->default_value(o.json_key), "the key of each line's text")(
        "append-eod", po::bool_switch(&o.append_eod), "end each document with the tokenizer's end-of-document token");
  else
    desc.add_options()("train-tokenizer", "sentencepiece: train a model on the input first")(
        "vocab-size", po::value(&o.vocab_size)->default_value(o.vocab_size), "pieces of the model --train-tokenizer trains")(
        "character-coverage", po::value(&o.character_coverage)->default_value(o.character_coverage),
        "--train-tokenizer: share of the characters given pieces of their own, (0, 1]; the rarest rest are byte pieces");
  return desc;
}

// The tokenizer options that go together, resolved into o.tokenizer.
void check_prepare_tokenizer(const po::variables_map& vm, PrepareOptions& o) {
  const bool train = vm.count("train-tokenizer") > 0, model = vm.count("sp-model") > 0;
  if (train && model) throw Error("prepare: give --sp-model or --train-tokenizer, not both");
  if (vm.count("vocab-size") && (!vm["vocab-size"].defaulted() || !vm["character-coverage"].defaulted()) && !train)
    throw Error("prepare: --vocab-size and --character-coverage are for --train-tokenizer");
  if ((train || model) && !vm["tokenizer"].defaulted() && o.tokenizer != "sentencepiece")
    throw Error("prepare: --sp-model and --train-tokenizer are for --tokenizer sentencepiece, not " + o.tokenizer);
  const bool json = vm.count("tokenizer-json") > 0;
  if (json && (train || model))
    throw Error("prepare: --tokenizer-json is for --tokenizer hf, not with --sp-model or --train-tokenizer");
  if (json && !vm["tokenizer"].defaulted() && o.tokenizer != "hf")
    throw Error("prepare: --tokenizer-json is for --tokenizer hf, not " + o.tokenizer);
  if (json) o.tokenizer = "hf";
  if (o.tokenizer == "hf" && !json)
    throw Error("prepare: --tokenizer hf needs --tokenizer-json PATH (a tokenizer.json, or a transformers model "
                "directory with one)");
  if (o.format == "megatron" && !vm["val-fraction"].defaulted())
    throw Error("prepare: --val-fraction is for --format hdf5; a Megatron dataset is split by documents when it is "
                "read (deck key data.split, e.g. 969,30,1)");
  if (train || model) o.tokenizer = "sentencepiece";
  else if (o.tokenizer == "sentencepiece")
    throw Error("prepare: --tokenizer sentencepiece needs --sp-model M.model" +
                std::string(vm.count("vocab-size") ? ", or --train-tokenizer [--vocab-size N]" : ""));
}

int prepare_tokens_main(const std::vector<std::string>& args, Log& log) {
  PrepareOptions o;
  const bool jsonl = args.front() == "jsonl";
  const po::variables_map vm = parse_prepare(args, prepare_options(o, jsonl));
  check_prepare_tokenizer(vm, o);
  const PrepareReport r = jsonl ? prepare_jsonl(o, MPI_COMM_WORLD) : prepare_text(o, MPI_COMM_WORLD);
  if (!r.lossy.empty())
    log.warn("prepare: --accept-lossy: " + o.input + " holds " + r.lossy + "; decoding these tokens does not give the text back");
  const std::string documents = jsonl || o.format == "megatron" ? " in " + std::to_string(r.documents) + " documents" : "";
  const std::string tokens = o.format == "megatron"
                                 ? std::to_string(r.train_tokens) + " tokens" + documents
                                 : std::to_string(r.train_tokens) + " train + " + std::to_string(r.val_tokens) + " val tokens" + documents;
  log.print("Wrote " + o.output + (o.format == "megatron" && r.shards == 1 ? ".bin/.idx" : "") +
            (r.shards > 1 ? " (" + std::to_string(r.shards) + " shards)" : "") + ": " + tokens + " (" +
            r.tokenizer + ", vocab " + std::to_string(r.vocab_size) + ") from " + std::to_string(r.source_bytes) +
            " bytes, sha256 " + r.sha256 + "\n");
  return 0;
}

int prepare_main(const std::vector<std::string>& args, Log& log) {
  if (!args.empty() && (args.front() == "text" || args.front() == "jsonl")) return prepare_tokens_main(args, log);
  if (!args.empty() && args.front() == "idx") return prepare_idx_main(args, log);
  throw Error("prepare: expected `prepare text`, `prepare jsonl` or `prepare idx`; known formats: text, jsonl, idx\n" +
              std::string(kUsage));
}

// `gridtrain predict -i DECK --ranks N ...`: the model's options here, deck keys as overrides.
int predict_main(const std::vector<std::string>& args, Log& log) {
  PredictRequest r;
  std::string layout, deck_name = kDefaultDeckName;
  po::options_description desc("gridtrain predict");
  desc.add_options()("in,i", po::value(&deck_name), "deck")("ranks", po::value(&r.ranks)->required(), "ranks (GPUs)")(
      "layout", po::value(&layout), "dp,tp,pp[,zero]")("device", po::value(&r.device), "a100|h100|h200|cpu")(
      "achievable", po::value(&r.achievable), "fraction of peak")("flops-per-s", po::value(&r.flops_per_s), "per rank")(
      "ranks-per-node", po::value(&r.ranks_per_node), "")("cores-per-node", po::value(&r.cores_per_node), "")(
      "intra-gbps", po::value(&r.intra_gbps), "")("intra-us", po::value(&r.intra_us), "")(
      "inter-gbps", po::value(&r.inter_gbps), "")("inter-us", po::value(&r.inter_us), "")(
      "recompute", po::bool_switch(&r.recompute), "")("grad-bytes", po::value(&r.grad_bytes), "")(
      "top", po::value(&r.top), "")("csv", po::bool_switch(&r.csv), "");
  std::vector<std::string> overrides;
  const po::variables_map vm = parse_options("predict", args, desc, nullptr, &overrides);
  for (std::size_t at = 0; !layout.empty();) {  // "dp,tp,pp[,zero]", each field a whole integer
    const std::size_t comma = std::min(layout.find(',', at), layout.size());
    int v = 0;
    const auto [end, ec] = std::from_chars(layout.data() + at, layout.data() + comma, v);
    if (ec != std::errc() || end != layout.data() + comma || comma == at)
      throw Error("predict: --layout " + layout + ": valid: dp,tp,pp[,zero] as whole numbers, e.g. 4,2,1,1");
    r.layout.push_back(v);
    if (comma == layout.size()) break;
    at = comma + 1;
  }
  std::string deck = kDefaultDeck;
  if (vm.count("in")) agree(MPI_COMM_WORLD, [&] { deck = read_deck(deck_name); });
  return predict(parse_config(deck, deck_name, overrides), r, MPI_COMM_WORLD, log);
}

int generate_main(const std::vector<std::string>& args, Log& log) {
  GenerateOptions o;
  std::string matmul;
  po::options_description desc("gridtrain generate");
  desc.add_options()("checkpoint", po::value(&o.checkpoint)->required(), "checkpoint file")(
      "prompt", po::value(&o.prompt)->default_value(o.prompt), "text to continue")(
      "max-new-tokens", po::value(&o.max_new_tokens)->default_value(o.max_new_tokens), "tokens to generate")(
      "temperature", po::value(&o.temperature)->default_value(o.temperature), "logits divisor; 0 = greedy")(
      "top-k", po::value(&o.top_k)->default_value(o.top_k), "sample among the k most likely; 0 = all")(
      "seed", po::value(&o.seed)->default_value(o.seed), "sampling seed")(
      "device", po::value(&o.device)->default_value(o.device), "cpu or cuda[:N]")(
      "kv-cache", po::value(&o.kv_cache)->default_value(o.kv_cache), "reuse the keys and values of earlier positions")(
      "matmul", po::value(&matmul), "auto|onednn|blas (default: the checkpoint deck's model.matmul)");
  po::positional_options_description positional;
  positional.add("checkpoint", 1);
  parse_options("generate", args, desc, &positional);
  require_one_rank("generate");
  if (!matmul.empty()) {
    const auto names = enum_names(Matmul{});
    const auto it = std::find(names.begin(), names.end(), matmul);
    if (it == names.end()) throw Error("generate: --matmul " + matmul + ": valid: auto, onednn, blas");
    o.matmul = static_cast<Matmul>(it - names.begin());
  }
  const Generated g = generate_text(o);
  log.print(o.prompt + g.text + "\n");
  const double per_token = o.max_new_tokens > 1 ? 1e3 * g.later_tokens_s / (o.max_new_tokens - 1) : 0.0;
  std::fprintf(stderr, "generate: prompt %lld tokens; first new token after %.3f s, then %.2f ms per token (KV cache %s)\n",
               static_cast<long long>(g.prompt_tokens), g.first_token_s, per_token, o.kv_cache ? "on" : "off");
  return 0;
}

// `export` and `import`: one rank, options as generate's.
int interop_main(const std::string& verb, const std::vector<std::string>& args, Log& log) {
  HfExportOptions ex;
  HfImportOptions im;
  std::string format;
  po::options_description desc("gridtrain " + verb);
  desc.add_options()("input", po::value(verb == "export" ? &ex.checkpoint : &im.input)->required(),
                     verb == "export" ? "checkpoint file" : "transformers model directory")(
      "output", po::value(verb == "export" ? &ex.output : &im.output)->required(), "what to write");
  if (verb == "export")
    desc.add_options()("format", po::value(&format)->required(), "hf")(
        "max-shard-mb", po::value(&ex.max_shard_mb)->default_value(ex.max_shard_mb), "safetensors shard size, MB");
  po::positional_options_description positional;
  positional.add("input", 1);
  parse_options(verb, args, desc, &positional);
  if (verb == "export" && format != "hf") throw Error("export: --format " + format + ": valid: hf");
  require_one_rank(verb);
  log.print(verb == "export" ? export_hf(ex) : import_hf(im));
  return 0;
}

int run(int argc, char** argv, int rank, Log& log) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Help, for any verb, before the verbs' options are checked: help never requires other options.
  auto given = [&](const char* flag) { return std::find(args.begin(), args.end(), flag) != args.end(); };
  if (given("--help") || given("-h")) {
    log.print(std::string(kUsage) + "\nDeck keys (also accepted as --section.key=value; CLI wins over the deck):\n" +
              config_help());
    return 0;
  }
  if (!args.empty() && args.front() == "prepare") return prepare_main({args.begin() + 1, args.end()}, log);
  if (!args.empty() && args.front() == "generate") return generate_main({args.begin() + 1, args.end()}, log);
  if (!args.empty() && (args.front() == "export" || args.front() == "import"))
    return interop_main(args.front(), {args.begin() + 1, args.end()}, log);
  if (!args.empty() && args.front() == "predict") return predict_main({args.begin() + 1, args.end()}, log);
  if (!args.empty() && args.front() == "inspect") {
    if (args.size() != 2) throw Error(std::string("inspect: expected one checkpoint file\n") + kUsage);
    int code = 0;
    agree(MPI_COMM_WORLD, [&] {
      if (rank == 0) code = inspect_checkpoint(args[1], log);
    });
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return code;
  }

  // `config` prints what a training run with the same deck and overrides would run with.
  const bool config = !args.empty() && args.front() == "config";
  if (config) args.erase(args.begin());

  po::options_description desc;
  desc.add_options()("version,V", "")("in,i", po::value<std::string>())(
      "restart", po::value<std::string>())("dry-run", "");
  std::vector<std::string> overrides;
  const po::variables_map vm = parse_options("gridtrain", args, desc, nullptr, &overrides);
  if (vm.count("version")) {
    log.print(build_info());
    return 0;
  }
  const bool have_deck = vm.count("in") > 0;
  const std::string deck_name = have_deck ? vm["in"].as<std::string>() : kDefaultDeckName;
  std::string deck = kDefaultDeck;
  if (have_deck) agree(MPI_COMM_WORLD, [&] { deck = read_deck(deck_name); });
  if (vm.count("restart")) overrides.push_back("--checkpoint.resume=" + vm["restart"].as<std::string>());
  const Config cfg = parse_config(deck, deck_name, overrides);
  if (config) {
    log.print(config_text(cfg));
    return 0;
  }
  return vm.count("dry-run") ? dry_run(cfg, MPI_COMM_WORLD, log) : run_training(cfg, MPI_COMM_WORLD, log);
}

}  // namespace

int cli_main(int argc, char** argv) {
  prepare_process();
  start_signal_thread();  // before MPI_Init's threads, which then block the stop signals too
  int provided = 0;
  // MULTIPLE: the asynchronous checkpoint writer runs collectives on its own thread.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Log log(rank == 0);
  int code = 0;
  try {
    code = run(argc, argv, rank, log);
  } catch (const Error& e) {
    // Every rank sees the same problem: report once, exit cleanly.
    if (rank == 0) std::fprintf(stderr, "ERROR: %s\n", e.what());
    code = kExitError;
  } catch (const po::error& e) {
    if (rank == 0) std::fprintf(stderr, "ERROR: command line: %s\n%s", e.what(), kUsage);
    code = kExitError;
  } catch (const std::exception& e) {
    // A fault on this rank only (I/O, allocation, LibTorch): the others may be waiting in a
    // collective, so take the whole job down rather than hang.
    abort_job(e.what());
  }
  MPI_Finalize();
  return code;
}

}  // namespace gridtrain
