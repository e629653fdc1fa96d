#include "gridtrain/data/prepare.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "corpus_writer.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/text_fidelity.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

constexpr std::uint64_t kBuffer = 16ULL << 20;  // tokens (or input bytes) handled at a time

// The first byte of the line that holds byte `at` of fd's `size` bytes, searching forward: at
// itself when it starts a line, else the byte after the next newline (size if none).
std::uint64_t line_start(int fd, std::uint64_t at, std::uint64_t size) {
  if (at == 0 || at >= size) return std::min(at, size);
  std::vector<char> buf(1 << 16);
  for (std::uint64_t from = at - 1; from < size; from += buf.size()) {
    const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(from));
    if (got <= 0) break;
    if (const auto* nl = static_cast<const char*>(std::memchr(buf.data(), '\n', static_cast<std::size_t>(got))))
      return from + static_cast<std::uint64_t>(nl - buf.data()) + 1;
  }
  return size;
}

// Calls fn(text, offset) on this rank's share of the input's lines, in pieces of at most kBuffer
// bytes that end after a newline (unless a line is longer than that).
template <class Fn>
void for_each_piece(const std::string& input, std::uint64_t size, int rank, int ranks, Fn fn) {
  const int fd = ::open(input.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("prepare: cannot read input file '" + input + "': " + std::strerror(errno));
  const std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) { ::close(*f), delete f; });
  const auto [lo, hi] = share(size, rank, ranks);
  const std::uint64_t begin = line_start(fd, lo, size), end = line_start(fd, hi, size);
  std::string text;
  for (std::uint64_t at = begin; at < end;) {
    text.resize(std::min(kBuffer, end - at));
    if (::pread(fd, text.data(), text.size(), static_cast<off_t>(at)) != static_cast<ssize_t>(text.size()))
      throw Error("prepare: reading '" + input + "' failed");
    const auto cut = at + text.size() < end ? text.rfind('\n') : std::string::npos;  // whole lines only
    if (cut != std::string::npos) text.resize(cut + 1);
    fn(text, at);
    at += text.size();
  }
}

// The lines of the input whose tokens do not decode back to them: how many, and the first (its
// byte offset, its text and what its tokens decode to).
struct LostLines {
  std::uint64_t lines = 0;
  std::uint64_t first = Unrepresentable::kNone;
  std::string text, decoded;  // of the first

  void note(std::uint64_t offset, std::string line, std::string back) { add({1, offset, std::move(line), std::move(back)}); }
  void add(LostLines other) {
    if (lines == 0) first = other.first, text = std::move(other.text), decoded = std::move(other.decoded);
    lines += other.lines;
  }
};

// The lines of `text` (at `offset` in the input) that do not come back from decode(encode(line)):
// called for a piece that did not come back whole. A piece whose lines each come back alone counts
// as one, at its start (a loss only the context of the piece shows).
LostLines lost_lines(const Tokenizer& tok, const std::string& text, std::uint64_t offset) {
  LostLines lost;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at), end = nl == std::string::npos ? text.size() : nl + 1;
    std::string line = text.substr(at, end - at);
    if (std::string back = tok.decode(tok.encode(line)); back != line) lost.note(offset + at, std::move(line), std::move(back));
    at = end;
  }
  if (lost.lines == 0) lost.note(offset, text, tok.decode(tok.encode(text)));
  return lost;
}

// SentencePiece and hf: this rank encodes its lines of the input into `tmp` (int32 ids, raw);
// returns how many ids. SentencePiece's are checked to decode back to the text (a model without
// byte fallback maps what it lacks to its unknown piece; another normalization rewrites text). An
// hf tokenizer's normalizer may rewrite text by design (lowercase, NFC): its ids are the library's.
std::uint64_t encode_share(const Tokenizer& tok, const std::string& input, std::uint64_t size, const std::string& tmp,
                           int rank, int ranks, LostLines& lost) {
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  std::uint64_t count = 0;
  for_each_piece(input, size, rank, ranks, [&](const std::string& text, std::uint64_t at) {
    const auto ids = tok.encode(text);
    if (tok.name() == "sentencepiece" && tok.decode(ids) != text) lost.add(lost_lines(tok, text, at));
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(std::int32_t)));
    count += ids.size();
  });
  if (!out.flush()) throw Error("prepare: cannot write '" + tmp + "'");
  return count;
}

// The line (1-based) that holds byte `offset` of the input.
std::uint64_t line_of(const std::string& input, std::uint64_t offset) {
  std::ifstream in(input, std::ios::binary);
  std::uint64_t line = 1;
  std::vector<char> buf(1 << 16);
  for (std::uint64_t left = offset; left > 0 && in;) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min<std::uint64_t>(left, buf.size())));
    const auto got = static_cast<std::size_t>(in.gcount());
    line += static_cast<std::uint64_t>(std::count(buf.data(), buf.data() + got, '\n'));
    left -= got;
  }
  return line;
}

// SentencePiece and hf: what of the input they would not carry through unchanged (described; ""
// if nothing), found by every rank in its share. An Error naming it unless accepted. hf: only
// bytes that are not UTF-8 (U+2581 is SentencePiece's space symbol, text to other tokenizers).
std::string check_fidelity(const PrepareOptions& o, std::uint64_t size, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  Unrepresentable mine;
  agree(comm, [&] {
    for_each_piece(o.input, size, rank, ranks,
                   [&](const std::string& text, std::uint64_t at) { mine.add(find_unrepresentable(text, at)); });
  });
  if (o.tokenizer == "hf") mine.meta_symbols = 0, mine.first_meta = Unrepresentable::kNone;
  std::uint64_t counts[2] = {mine.invalid_bytes, mine.meta_symbols}, firsts[2] = {mine.first_invalid, mine.first_meta};
  MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_UINT64_T, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, firsts, 2, MPI_UINT64_T, MPI_MIN, comm);
  const Unrepresentable all{counts[0], counts[1], firsts[0], firsts[1]};
  if (!all.any()) return "";
  const std::string found = describe(all, [&](std::uint64_t at) { return line_of(o.input, at); });
  if (!o.accept_lossy)
    throw Error("prepare: '" + o.input + "' holds " + found +
                (o.tokenizer == "hf" ? ": the Hugging Face tokenizer takes Unicode text only"
                                     : ": SentencePiece would not give this text back unchanged") +
                ". Convert it to UTF-8 (iconv -f LATIN1 -t UTF-8, or iconv -c to drop such bytes), use --tokenizer bytes "
                "(any bytes, unchanged), or pass --accept-lossy to store it so");
  return found;
}

// Up to 40 bytes of text from byte `from` (a UTF-8 sequence's first byte) for a message, quoted,
// newlines and tabs as escapes.
std::string excerpt(const std::string& text, std::size_t from) {
  std::size_t end = std::min(text.size(), from + 40);
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;  // whole characters
  std::string out = from > 0 ? "..." : "";
  for (std::size_t i = from; i < end; ++i) out += text[i] == '\n' ? "\\n" : text[i] == '\t' ? "\\t" : std::string(1, text[i]);
  return "\"" + out + (end < text.size() ? "...\"" : "\"");
}

// Every rank's lost lines summed, the first of them described ("" if none); an Error naming them
// unless accepted. The round trip proves what check_fidelity can only predict for gridtrain's
// own models: whatever the model (the user's --sp-model, without byte fallback or with another
// normalization), the stored tokens are the text.
std::string check_round_trip(const PrepareOptions& o, LostLines& lost, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  std::uint64_t lines = lost.lines, first = lost.first;
  MPI_Allreduce(MPI_IN_PLACE, &lines, 1, MPI_UINT64_T, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_UINT64_T, MPI_MIN, comm);
  if (lines == 0) return "";
  int owner = lost.lines > 0 && lost.first == first ? rank : ranks;
  MPI_Allreduce(MPI_IN_PLACE, &owner, 1, MPI_INT, MPI_MIN, comm);
  const std::string text = broadcast_text(lost.text, comm, owner), decoded = broadcast_text(lost.decoded, comm, owner);
  // Where the first line and its decoding part, from a few bytes before (at a character's start).
  std::size_t same = std::mismatch(text.begin(), text.end(), decoded.begin(), decoded.end()).first - text.begin();
  std::size_t from = same > 12 ? same - 12 : 0;
  while (from > 0 && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) --from;
  const std::string found = std::to_string(lines) + " line(s) whose tokens do not decode back to the text (the first at "
                            "byte " + std::to_string(first + same) + ", line " + std::to_string(line_of(o.input, first)) +
                            ": " + excerpt(text, from) + " decodes as " + excerpt(decoded, from) + ")";
  if (!o.accept_lossy)
    throw Error("prepare: '" + o.input + "' holds " + found + " with the SentencePiece model" +
                (o.sp_model.empty() ? std::string() : " '" + o.sp_model + "'") +
                ": characters it has no piece for become its unknown piece unless it was trained with byte fallback. "
                "Use a model trained with --byte_fallback=true (or let prepare train one: --train-tokenizer), "
                "--tokenizer bytes, or pass --accept-lossy to store the text so");
  return found;
}

// --format megatron: the token that ends a document (a line).
std::int32_t document_end(const Tokenizer& tok) {
  const auto nl = tok.encode("\n");
  if (nl.size() != 1)
    throw Error("prepare: --format megatron writes one document per line, but the " + tok.name() + " tokenizer "
                "encodes a newline as " + std::to_string(nl.size()) + " tokens, not one; use --tokenizer bytes "
                "or a model with a newline piece (--train-tokenizer trains one)");
  return nl.front();
}

}  // namespace

std::string shard_name(int k) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%06d.h5", k);
  return name;
}

PrepareReport prepare_text(const PrepareOptions& o, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  Corpus c;
  c.source = o.input;
  agree(comm, [&] { c.source_bytes = check_prepare_options(o); });
  const std::string lossy = o.tokenizer != "bytes" ? check_fidelity(o, c.source_bytes, comm) : "";
  agree(comm, [&] {  // the model: read, or trained on the input (rank 0; the others get it below)
    if (rank != 0) return;
    const bool train = o.tokenizer == "sentencepiece" && o.sp_model.empty();
    c.model = train ? train_sentencepiece(o.input, o.vocab_size, o.character_coverage) : read_tokenizer_model(o);
  });
  c.model = broadcast_text(c.model, comm);
  const EncodedShare scratch(o, comm);  // sentencepiece, hf: this rank's encoded ids
  std::uint64_t encoded = 0;
  LostLines lost;
  agree(comm, [&] {
    const auto tok = tokenizer_for(o, c.model);
    c.tokenizer = tok->name();
    c.vocab = tok->vocab_size();
    if (o.format == "megatron") c.newline = document_end(*tok);
    if (o.tokenizer == "bytes")
      c.tokens = StoredIntegers({{o.input, 0, c.source_bytes, 1, false}});
    else
      encoded = encode_share(*tok, o.input, c.source_bytes, scratch.file(), rank, ranks, lost);
  });
  const std::string round_trip = check_round_trip(o, lost, comm);
  if (o.tokenizer != "bytes") c.tokens = scratch.stream(encoded);
  PrepareReport r;
  r.lossy = lossy + (lossy.empty() || round_trip.empty() ? "" : "; ") + round_trip;
  write_corpus(o, c, r, comm);
  return r;
}

}  // namespace gridtrain
