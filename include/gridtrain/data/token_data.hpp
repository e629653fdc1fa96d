// Token corpora written by `gridtrain prepare` (or Megatron-LM's tools: data/indexed_dataset.hpp),
// left on disk and read window by window.
//
// A corpus is one HDF5 file or several shard files (data.path: a file, a directory of *.h5, or a
// glob), each with /train/tokens and /val/tokens (1-D integers, contiguous storage) and the
// attributes vocab_size and tokenizer. A split is the concatenation of that dataset over the
// shards in name order, so the global token index spans shards (as Megatron's indexed datasets
// or llm.c's .bin shards) and a corpus cut into shards reads exactly as the same tokens in one
// file. Rank 0 reads the metadata with HDF5 and tells the others; from then on every rank reads
// the tokens it needs with pread(2) at the datasets' file offsets (H5Dget_offset): no HDF5 call,
// so any thread may read, and memory does not grow with the corpus.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/data/stored_integers.hpp"

namespace gridtrain {

/// Copies split[start .. start + T] (T + 1 tokens) into out, widened to int64.
void copy_window(const StoredIntegers& split, std::uint64_t start, int block_size, std::int64_t* out);

struct TokenData {
  StoredIntegers train;  ///< (N_train,) token ids in [0, vocab_size)
  StoredIntegers val;    ///< (N_val,)
  int vocab_size = 0;
  int eod_id = -1;                 ///< the end-of-document token the corpus records (eod_id attribute), or -1
  std::string format;              ///< "hdf5" (`gridtrain prepare`) | "megatron" (data/indexed_dataset.hpp)
  std::string tokenizer;           ///< "bytes" | "sentencepiece" | "none" (not recorded: a Megatron dataset)
  std::string tokenizer_model;     ///< the serialized model (/tokenizer/model of the first file), or ""
  std::vector<std::string> files;  ///< the shard files, in order
  /// The source's SHA-256 (one file: its sha256 attribute; shards: SHA-256 of theirs joined by
  /// newlines), or "" when a file has none.
  std::string sha256;
};

/// How a corpus is read where its files do not say (a Megatron indexed dataset).
struct CorpusOptions {
  std::string split;   ///< data.split: Megatron's train,validation,test weights; "" = 969,30,1 (Megatron only)
  int vocab_size = 0;  ///< model.vocab_size: the range a Megatron dataset's tokens are checked against
};

/// Collective over comm. data.path is an HDF5 corpus (above), or Megatron indexed datasets: a
/// prefix P of P.idx and P.bin, or a directory or glob of *.idx, read as one stream in name order
/// and split by documents (data/indexed_dataset.hpp). Throws gridtrain::Error (the same on every
/// rank) naming the file and what is wrong: no such file or no file matching, not HDF5, missing
/// datasets or attributes, a malformed Megatron index (naming the offset), data.split given for
/// an HDF5 corpus or leaving no validation document, a Megatron corpus without
/// options.vocab_size,
/// shards that disagree on vocab_size or tokenizer, a dataset that is chunked or compressed
/// (rewrite it with `gridtrain prepare`), tokens >= vocab_size (a Megatron corpus: >= options.vocab_size; the ranks check the corpus in
/// parallel, each its share), or a split shorter than min_tokens (one window of block_size + 1
/// tokens). prepare_hint is appended to the error when nothing exists at path.
TokenData load_tokens(const std::string& path, MPI_Comm comm, std::size_t min_tokens,
                      const std::string& prepare_hint, const CorpusOptions& options = {});

/// The corpus's vocab_size from its metadata alone (no token is read; one file, a directory of
/// shards or a glob, as load_tokens). Collective over comm. Throws gridtrain::Error as load_tokens
/// for a missing or malformed corpus, and for a Megatron one, which records no vocabulary.
int corpus_vocab_size(const std::string& path, MPI_Comm comm, const std::string& prepare_hint,
                      const std::string& split = "");

}  // namespace gridtrain
