// `gridtrain prepare jsonl` (data/prepare.hpp): JSON Lines documents into tokens.
#include <fstream>
#include <vector>

#include "corpus_writer.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/jsonl.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

// The documents of a JSON Lines file (rank 0 counts them; every rank learns the count).
std::uint64_t count_documents(const PrepareOptions& o, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  unsigned long long n = 0;
  agree(comm, [&] {
    if (rank != 0) return;
    JsonlReader in(o.input, o.json_key);
    while (in.skip()) ++n;
  });
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  return n;
}

// What one rank encoded: its ids in a file, each document's length, and the documents whose
// tokens do not decode back to their text.
struct Share {
  std::vector<std::uint64_t> lengths;  // of the non-empty documents, in order
  std::uint64_t tokens = 0, lossy = 0, first_lossy_line = 0;
};

// Documents encoded a batch at a time (one round trip to an hf tokenizer's process per batch).
constexpr std::size_t kBatchDocuments = 1024, kBatchBytes = 4 << 20;

// Encodes documents [begin, end) of the file into `tmp` (int32 ids, raw).
Share encode_documents(const PrepareOptions& o, const Tokenizer& tok, std::int32_t eod, std::uint64_t begin,
                       std::uint64_t end, const std::string& tmp) {
  JsonlReader in(o.input, o.json_key);
  for (std::uint64_t d = 0; d < begin; ++d) in.skip();
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  Share s;
  std::vector<std::string> texts;
  std::vector<std::uint64_t> lines;
  std::size_t bytes = 0;
  auto flush = [&] {
    auto batch = tok.encode_batch(texts);
    for (std::size_t i = 0; i < texts.size(); ++i) {
      auto& ids = batch[i];
      if (tok.name() == "sentencepiece" && tok.decode(ids) != texts[i] && s.lossy++ == 0) s.first_lossy_line = lines[i];
      if (ids.empty()) continue;  // an empty document: no tokens, no end-of-document token (as Megatron)
      if (eod >= 0) ids.push_back(eod);
      out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(std::int32_t)));
      s.lengths.push_back(ids.size());
      s.tokens += ids.size();
    }
    texts.clear(), lines.clear(), bytes = 0;
  };
  std::string text;
  for (std::uint64_t d = begin; d < end && in.next(text); ++d) {
    bytes += text.size();
    texts.push_back(std::move(text));
    lines.push_back(in.line());
    if (texts.size() == kBatchDocuments || bytes >= kBatchBytes) flush();
  }
  flush();
  if (!out.flush()) throw Error("prepare: cannot write '" + tmp + "'");
  return s;
}

// Every rank's document lengths, in rank order, as the token index each document ends at.
std::vector<std::uint64_t> document_ends(const Share& mine, MPI_Comm comm) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  int n = static_cast<int>(mine.lengths.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks));
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int r = 1; r < ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<std::uint64_t> ends(static_cast<std::size_t>(offsets.back() + counts.back()));
  MPI_Allgatherv(mine.lengths.data(), n, MPI_UINT64_T, ends.data(), counts.data(), offsets.data(), MPI_UINT64_T, comm);
  for (std::size_t i = 1; i < ends.size(); ++i) ends[i] += ends[i - 1];
  return ends;
}

}  // namespace

PrepareReport prepare_jsonl(const PrepareOptions& o, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  Corpus c;
  c.source = o.input;
  agree(comm, [&] {
    c.source_bytes = check_prepare_options(o);
    if (o.tokenizer == "sentencepiece" && o.sp_model.empty())
      throw Error("prepare jsonl: give the SentencePiece model with --sp-model (train one on a text file with "
                  "`gridtrain prepare text --train-tokenizer` or spm_train)");
    if (rank == 0) c.model = read_tokenizer_model(o);
  });
  c.model = broadcast_text(c.model, comm);
  const std::uint64_t documents = count_documents(o, comm);
  const EncodedShare scratch(o, comm);
  Share mine;
  agree(comm, [&] {
    const auto tok = tokenizer_for(o, c.model);
    c.tokenizer = tok->name();
    c.vocab = tok->vocab_size();
    if (o.append_eod && tok->eod_id() < 0)
      throw Error("prepare: --append-eod: the " + c.tokenizer + " tokenizer has no end-of-document token; use a "
                  "SentencePiece model with an eos piece (</s>), or for hf a model directory whose "
                  "tokenizer_config.json names its eos_token");
    if (o.append_eod) c.eod = tok->eod_id();
    const auto [begin, end] = share(documents, rank, ranks);
    mine = encode_documents(o, *tok, c.eod, begin, end, scratch.file());
  });
  unsigned long long lossy[2] = {mine.lossy, mine.lossy > 0 ? mine.first_lossy_line : ~0ULL};
  MPI_Allreduce(MPI_IN_PLACE, &lossy[0], 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &lossy[1], 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  PrepareReport r;
  if (lossy[0] > 0) {
    r.lossy = std::to_string(lossy[0]) + " document(s) whose tokens do not decode back to the text (the first on line " +
              std::to_string(lossy[1]) + ")";
    if (!o.accept_lossy)
      throw Error("prepare: '" + o.input + "' holds " + r.lossy + " with the SentencePiece model '" + o.sp_model +
                  "': without byte fallback it has no pieces for some characters, and no model carries U+2581 (its "
                  "space symbol). Use a model trained with --byte_fallback=true, or pass --accept-lossy to store "
                  "the text so");
  }
  c.document_ends = document_ends(mine, comm);
  if (c.document_ends.empty())
    throw Error("prepare: '" + o.input + "': none of its " + std::to_string(documents) + " document(s) holds any text");
  c.tokens = scratch.stream(mine.tokens);
  if (o.format != "megatron") r.documents = c.document_ends.size();
  write_corpus(o, c, r, comm);
  return r;
}

}  // namespace gridtrain
