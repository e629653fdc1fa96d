#include "gridtrain/data/token_data.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <sstream>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/dataset_part.hpp"
#include "gridtrain/data/indexed_dataset.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/sha256.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {

void copy_window(const StoredIntegers& split, std::uint64_t start, int block_size, std::int64_t* out) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(block_size) + 1);
  split.read(start, tokens.size(), tokens.data());
  std::copy(tokens.begin(), tokens.end(), out);
}

// ---- load_tokens ----

namespace {

constexpr const char* kSplits[2] = {"/train/tokens", "/val/tokens"};
constexpr const char* kNoVocabulary =
    "a Megatron indexed dataset does not record its vocabulary; set model.vocab_size to the tokenizer's (padded as "
    "Megatron's --make-vocab-size-divisible-by pads it, if the model was trained so)";
constexpr const char* kMegatronSplit = "969,30,1";  // data.split's default: Megatron's

// data.path as files: itself, the *.h5 of a directory, or a glob's matches; sorted.
std::vector<std::string> corpus_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".h5") files.push_back(e.path().string());
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    if (::glob(path.c_str(), 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  } else if (fs::exists(path)) {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}


// A split's dataset in an open file: 1-D token ids.
StoredIntegers::Part describe_split(hid_t file, const std::string& path, const std::string& name) {
  std::vector<std::uint64_t> dims;
  StoredIntegers::Part p = dataset_part(file, path, name, dims);
  if (dims.size() != 1) throw std::runtime_error("dataset " + name + " is not 1-D");
  return p;
}

struct Shard {
  std::string format = "hdf5";  // TokenData::format
  long long vocab = 0;
  long long eod = -1;  // the eod_id attribute (`prepare jsonl --append-eod`), or -1
  long long shard = -1, shards = 0;  // its index, and how many the corpus was written as (-1, 0: not recorded)
  std::string model;                 // /tokenizer/model, or ""
  std::string tokenizer, sha256;
  StoredIntegers::Part split[2];
};

Shard describe_shard(const std::string& path) {
  if (H5Fis_hdf5(path.c_str()) <= 0) throw Error("not an HDF5 file (write one with `gridtrain prepare`)");
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "cannot open the file");
  Shard s;
  s.vocab = h5_read_attr_int(file, "vocab_size");
  if (s.vocab < 1 || s.vocab > std::numeric_limits<std::int32_t>::max())
    throw Error("vocab_size = " + std::to_string(s.vocab) + "; valid: 1 .. " +
                std::to_string(std::numeric_limits<std::int32_t>::max()));
  s.tokenizer = h5_read_attr_string(file, "tokenizer");
  s.eod = h5_has_attr(file, "eod_id") ? h5_read_attr_int(file, "eod_id") : -1;
  s.sha256 = h5_has_attr(file, "sha256") ? h5_read_attr_string(file, "sha256") : "";
  s.shard = h5_has_attr(file, "shard") ? h5_read_attr_int(file, "shard") : -1;
  s.shards = h5_has_attr(file, "shards") ? h5_read_attr_int(file, "shards") : 0;
  if (H5Lexists(file, "/tokenizer", H5P_DEFAULT) > 0 && H5Lexists(file, "/tokenizer/model", H5P_DEFAULT) > 0)
    s.model = h5_read_bytes(file, "/tokenizer/model");
  for (int i = 0; i < 2; ++i) s.split[i] = describe_split(file, path, kSplits[i]);
  return s;
}

// The shards' metadata as text (one line per shard, tab-separated), and back.
std::string to_text(const std::vector<Shard>& shards) {
  std::ostringstream out;
  for (const auto& s : shards) {
    out << s.format << '\t' << s.vocab << '\t' << s.eod << '\t' << s.tokenizer << '\t' << s.sha256;
    for (const auto& p : s.split) out << '\t' << p.file << '\t' << p.offset << '\t' << p.count << '\t' << p.width << '\t' << p.is_signed;
    out << '\n';
  }
  return out.str();
}

std::vector<Shard> from_text(const std::string& text) {
  std::vector<Shard> shards;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    Shard s;
    std::string vocab, eod;
    std::getline(f, s.format, '\t');
    std::getline(f, vocab, '\t');
    std::getline(f, eod, '\t');
    s.vocab = std::stoll(vocab);
    s.eod = std::stoll(eod);
    std::getline(f, s.tokenizer, '\t');
    std::getline(f, s.sha256, '\t');
    for (auto& p : s.split) {
      std::string field;
      std::getline(f, p.file, '\t');
      f >> p.offset >> p.count >> p.width >> p.is_signed;
      f.ignore();
    }
    shards.push_back(std::move(s));
  }
  return shards;
}

// The shard files of an HDF5 corpus (rank 0). Errors name the shard.
std::vector<Shard> describe_h5_corpus(const std::string& path, const std::string& where, const std::string& prepare_hint) {
  const auto files = corpus_files(path);
  const bool pattern = std::filesystem::is_directory(path) || path.find_first_of("*?[") != std::string::npos;
  if (files.empty())
    throw Error(where + (pattern ? "no shard files (*.h5 or Megatron *.idx) match. "
                                 : "file not found (nor a Megatron dataset: no " + path + ".idx). ") + prepare_hint);
  std::vector<Shard> shards;
  for (const auto& f : files) {
    const std::string at = files.size() > 1 ? where + "shard '" + f + "': " : where;
    try {
      shards.push_back(describe_shard(f));
    } catch (const Error& e) {
      throw Error(at + e.what());
    } catch (const std::runtime_error& e) {
      throw Error(at + e.what() + "; expected the layout of `gridtrain prepare` (/train/tokens, /val/tokens, "
                  "attributes vocab_size and tokenizer)");
    }
    const Shard &s = shards.back(), &first = shards.front();
    if (s.vocab != first.vocab || s.tokenizer != first.tokenizer || s.model != first.model || s.eod != first.eod)
      throw Error(at + "vocab_size " + std::to_string(s.vocab) + ", tokenizer '" + s.tokenizer + "', eod_id " +
                  std::to_string(s.eod) + " or the tokenizer's model differ from the first shard's (" +
                  std::to_string(first.vocab) + ", '" + first.tokenizer + "', " + std::to_string(first.eod) + ")");
    // A directory or glob must find the whole set `prepare` wrote, in order.
    if (pattern && first.shards > 0 && (s.shards != first.shards || s.shard != static_cast<long long>(shards.size()) - 1))
      throw Error(at + "is shard " + std::to_string(s.shard) + " of " + std::to_string(s.shards) + " where shard " +
                  std::to_string(shards.size() - 1) + " of " + std::to_string(first.shards) +
                  " belongs: the set is mixed up or a shard is missing");
  }
  if (pattern && shards.front().shards > 0 && static_cast<long long>(shards.size()) != shards.front().shards)
    throw Error(where + std::to_string(shards.size()) + " shard files, but `gridtrain prepare` wrote the corpus as " +
                std::to_string(shards.front().shards) + " (attribute shards): a shard is missing or extra");
  return shards;
}

// data.path as Megatron indexed datasets: P itself when P.idx exists, or the prefixes of a
// directory's or a glob's *.idx files, sorted; none when it names no index.
std::vector<std::string> indexed_prefixes(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(path + ".idx")) return {path};
  if (path.ends_with(".bin") && fs::is_regular_file(path.substr(0, path.size() - 4) + ".idx"))
    return {path.substr(0, path.size() - 4)};  // the data file named instead of the prefix
  std::vector<std::string> prefixes;
  const bool directory = fs::is_directory(path);
  for (const auto& f : directory ? std::vector<std::string>{} : corpus_files(path))
    if (f.ends_with(".idx")) prefixes.push_back(f.substr(0, f.size() - 4));
  if (directory)
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".idx") prefixes.push_back((e.path().parent_path() / e.path().stem()).string());
  std::sort(prefixes.begin(), prefixes.end());
  return prefixes;
}

// A corpus of Megatron indexed datasets read as one stream, documents in order, split by
// documents with Megatron's rule (rank 0). No vocabulary is recorded: vocab 0.
std::vector<Shard> describe_indexed_corpus(const std::vector<std::string>& prefixes, const std::string& split,
                                           const std::string& where) {
  std::vector<IndexedDataset> sets;
  std::uint64_t documents = 0;
  for (const auto& p : prefixes) {
    try {
      sets.push_back(IndexedDataset::open(p));
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
    documents += sets.back().documents;
  }
  const std::string weights = split.empty() ? kMegatronSplit : split;
  const auto ranges = split_ranges(weights, documents);
  std::vector<Shard> shards;
  std::uint64_t first = 0;  // the set's first document in the corpus
  for (const auto& d : sets) {
    // The split bookends (train and validation) within this set, as its own document numbers.
    std::vector<std::uint64_t> local;
    for (const auto& r : {ranges[0], ranges[1]})
      for (const std::uint64_t b : {r.first, r.second}) local.push_back(std::clamp(b, first, first + d.documents) - first);
    std::vector<std::uint64_t> sorted = local;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    std::vector<std::uint64_t> starts;
    try {
      starts = d.document_starts(sorted);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
    auto token = [&](std::uint64_t doc) { return starts[std::lower_bound(sorted.begin(), sorted.end(), doc) - sorted.begin()]; };
    Shard s;
    s.format = "megatron";
    s.tokenizer = "none";
    for (int i = 0; i < 2; ++i) s.split[i] = d.tokens(token(local[2 * i]), token(local[2 * i + 1]));
    shards.push_back(std::move(s));
    first += d.documents;
  }
  if (documents == 0) throw Error(where + "the Megatron dataset holds no documents (D = 0 in its index)");
  if (ranges[1].first == ranges[1].second)
    throw Error(where + "data.split = '" + weights + "' leaves no validation document of " + std::to_string(documents) +
                "; give the validation split a larger weight (e.g. 969,30,1)");
  return shards;
}

// Rank 0 reads every shard's metadata; the others learn it.
std::vector<Shard> describe_corpus(const std::string& path, const std::string& split, MPI_Comm comm,
                                   const std::string& where, const std::string& prepare_hint,
                                   std::string& tokenizer_model) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string text;
  agree(comm, [&] {
    if (rank != 0) return;
    const auto prefixes = indexed_prefixes(path);
    if (!prefixes.empty() && std::filesystem::is_directory(path) && !corpus_files(path).empty())
      throw Error(where + "holds both HDF5 shards (*.h5) and Megatron indexes (*.idx); keep one kind per directory");
    const auto shards = prefixes.empty() ? describe_h5_corpus(path, where, prepare_hint)
                                         : describe_indexed_corpus(prefixes, split, where);
    if (prefixes.empty() && !split.empty())
      throw Error(where + "data.split = '" + split + "' splits Megatron indexed datasets by documents; this corpus "
                  "carries its own split (`gridtrain prepare --val-fraction`): leave data.split = auto");
    tokenizer_model = shards.front().model;
    text = to_text(shards);
  });
  tokenizer_model = broadcast_text(tokenizer_model, comm);
  return from_text(broadcast_text(text, comm));
}

}  // namespace

TokenData load_tokens(const std::string& path, MPI_Comm comm, std::size_t min_tokens, const std::string& prepare_hint,
                      const CorpusOptions& options) {
  const std::string where = "data.path = '" + path + "': ";
  h5_silence_errors();
  TokenData d;
  const auto shards = describe_corpus(path, options.split, comm, where, prepare_hint, d.tokenizer_model);
  d.vocab_size = static_cast<int>(shards.front().vocab);
  d.tokenizer = shards.front().tokenizer;
  d.eod_id = static_cast<int>(shards.front().eod);
  d.format = shards.front().format;
  // A Megatron index records no vocabulary: its tokens are checked against the model's.
  const long long vocab = d.vocab_size > 0 ? d.vocab_size : options.vocab_size;
  if (vocab < 1) throw Error(where + kNoVocabulary);
  std::vector<StoredIntegers::Part> parts[2];
  std::string shas;
  for (const auto& s : shards) {
    d.files.push_back(s.split[0].file);
    for (int i = 0; i < 2; ++i) parts[i].push_back(s.split[i]);
    shas += s.sha256 + "\n";
    if (s.sha256.empty()) shas.clear();
  }
  d.sha256 = shards.size() == 1 ? shards.front().sha256 : shas.empty() ? "" : sha256_hex(shas);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  agree(comm, [&] {
    try {
      d.train = StoredIntegers(parts[0]);
      d.val = StoredIntegers(parts[1]);
    } catch (const Error& e) {  // e.g. more shard files than open files allowed
      throw Error(where + e.what() + " (" + std::to_string(shards.size()) + " files, each held open; raise `ulimit -n` "
                  "or write fewer, larger shards)");
    }
    for (int i = 0; i < 2; ++i) {
      const StoredIntegers& split = i == 0 ? d.train : d.val;
      const std::string name = d.format == "megatron" ? std::string(i == 0 ? "the training" : "the validation") +
                                                            " split (data.split)" : kSplits[i];
      if (split.size() < min_tokens)
        throw Error(where + name + " has " + std::to_string(split.size()) + " tokens; at least " +
                    std::to_string(min_tokens) + " (model.block_size + 1) are needed");
      // Every token checked once: each rank its share.
      const auto [begin, end] = share(split.size(), rank, ranks);
      if (const auto bad = split.first_outside(begin, end, vocab); !bad.empty())
        throw Error(where + name + " holds token " + bad + " outside [0, " +
                    (d.vocab_size > 0 ? "vocab_size = " : "model.vocab_size = ") + std::to_string(vocab) + ")");
    }
  });
  return d;
}

int corpus_vocab_size(const std::string& path, MPI_Comm comm, const std::string& prepare_hint, const std::string& split) {
  h5_silence_errors();
  std::string model;
  const std::string where = "data.path = '" + path + "': ";
  const auto vocab = describe_corpus(path, split, comm, where, prepare_hint, model).front().vocab;
  if (vocab < 1) throw Error(where + kNoVocabulary);
  return static_cast<int>(vocab);
}

}  // namespace gridtrain
