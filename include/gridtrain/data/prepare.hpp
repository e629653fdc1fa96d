// `gridtrain prepare text`: turns a text file into tokens in HDF5, streaming it (bounded
// buffers, never the whole file), into one file or into shards. Tokenizers (data/tokenizer.hpp):
// bytes (vocab 256), SentencePiece from a model file or trained here on the input first, or a
// transformers model's tokenizer.json (hf, through Hugging Face's tokenizers: hf_tokenizer.hpp).
//
// File layout (read back by data/token_data.hpp):
//   /train/tokens      (N_train,) uint8 (vocab <= 256), uint16 (<= 65536) or int32; contiguous
//   /val/tokens        (N_val,)   the same type
//   /tokenizer/model   uint8 (bytes,) the serialized SentencePiece model, or the hf bundle (not bytes)
//   / attrs: format="gridtrain-tokens", tokenizer ("bytes" | "sentencepiece" | "hf"), vocab_size, source
//            (file name), source_bytes, sha256 (hex digest of this file's tokens as stored, one
//            split after the other: for bytes, the source bytes), shard, shards
// The first (1 − val_fraction) of the tokens are the training split, the rest the validation
// split (a contiguous tail, so no window straddles both). Shard k of K holds the k-th contiguous
// share of each split, so the shards concatenated are exactly the one-file corpus. With several
// ranks, SentencePiece encodes each rank's share of the input's lines (cut after a newline, which
// no trained piece contains, so the tokens do not depend on the cut) and every rank writes its
// shards. The input is encoded in pieces of at most 16 MiB, also cut after a newline (a line
// longer than that is cut where the piece ends). A model given with --sp-model that adds a dummy
// prefix or normalises whitespace sees each piece's start as the start of a text: its tokens are
// those of encoding the input a few lines at a time, and may differ with the number of ranks. So
// may an hf tokenizer's whose pre-tokenizer joins newlines into one token (GPT-2's "\n\n"): for
// documents, prefer `prepare jsonl`. Bytes that are not UTF-8 are counted and located before
// SentencePiece or hf encode anything, and refused unless accepted (then each is U+FFFD).
//
// --format megatron writes the same tokens as a Megatron indexed dataset (P.bin + P.idx, or
// shard-<k>.bin/.idx in the directory) of one document per line: a document ends after each
// newline token (the tokenizer must encode "\n" as one token), and a shard holds the documents
// that start in its share of the tokens. No split is stored: the reader splits by documents
// (data.split). Megatron's index records no vocabulary or tokenizer: training on it needs
// model.vocab_size.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include <mpi.h>

namespace gridtrain {

struct PrepareOptions {
  PrepareOptions() = default;
  PrepareOptions(std::string in, std::string out) : input(std::move(in)), output(std::move(out)) {}
  std::string input, output;  ///< output: the .h5 file (megatron: the prefix P), or with shards the directory for them
  std::string format = "hdf5";  ///< hdf5 | megatron (data/indexed_dataset.hpp: one document per line)
  double val_fraction = 0.1;  ///< in (0, 1); hdf5 only (a Megatron dataset is split when read: data.split)
  std::uint64_t shard_size = 0;  ///< tokens per shard (at most); 0: one file
  std::string tokenizer = "bytes";  ///< bytes | sentencepiece | hf
  std::string sp_model;       ///< sentencepiece: a .model file; "" = train one on the input
  std::string hf_tokenizer;   ///< hf: a tokenizer.json, or a transformers model directory holding one
  int vocab_size = 8192;      ///< sentencepiece trained here: pieces
  double character_coverage = 0.9995;  ///< sentencepiece trained here: share of characters given pieces, (0, 1]
  bool accept_lossy = false;  ///< sentencepiece, hf: store text they cannot give back unchanged (text_fidelity.hpp)
  std::string json_key = "text";  ///< jsonl: the key of each line's document text
  bool append_eod = false;        ///< jsonl: end each non-empty document with the tokenizer's end-of-document token
};

struct PrepareReport {
  std::string tokenizer;
  int vocab_size = 0;
  std::uint64_t source_bytes = 0;
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  std::uint64_t documents = 0;  ///< megatron: the documents (lines) written; its tokens are all in train_tokens
  int shards = 1;
  std::string sha256;  ///< one file: the source's digest; shards: that of the shards' digests
  std::string lossy;  ///< sentencepiece, accept_lossy: what of the input does not come back unchanged ("" if nothing)
};

/// Collective over comm: rank r writes shards r, r + p, ... (one file: rank 0), each via
/// <file>.tmp + rename, so a crash never leaves a half file. Throws gridtrain::Error (the same on
/// every rank) naming the file when input cannot be read or is shorter than 2 tokens, the
/// options are invalid (an unknown tokenizer, a model SentencePiece cannot load or train), the
/// input holds what SentencePiece would not give back unchanged (counted and located; unless
/// accept_lossy), or an output cannot be written.
PrepareReport prepare_text(const PrepareOptions& o, MPI_Comm comm);

/// `gridtrain prepare jsonl`: the documents of a JSON Lines file (data/jsonl.hpp: plain, .gz or
/// .zst), each encoded alone as Megatron's preprocess_data.py does, o.append_eod appending the
/// tokenizer's end-of-document token to each that is not empty; empty documents hold no tokens and
/// are dropped. Written as prepare_text writes (o.format, shards), a Megatron dataset with one
/// document per JSON line. Collective over comm: rank r encodes the r-th contiguous share of the
/// documents (every rank reads the file up to its share's end). Throws gridtrain::Error (the same
/// on every rank) for what prepare_text refuses, a line that is not such a document (naming file
/// and line), --append-eod with a tokenizer that has no end-of-document token (bytes), --train-
/// tokenizer (train on a text file), and documents SentencePiece does not give back unchanged
/// (counted, the first named by line; unless accept_lossy).
PrepareReport prepare_jsonl(const PrepareOptions& o, MPI_Comm comm);

/// Name of shard k in a shard directory: shard-<k, 6 digits>.h5 (megatron: without the extension, the prefix).
std::string shard_name(int k);

}  // namespace gridtrain
