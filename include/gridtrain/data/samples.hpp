// The training data as the step loop reads it: numbered samples, each one row of int64 values
// that Model::split cuts into input and targets (model/model.hpp). TokenSamples: windows of
// T + 1 tokens of a token corpus (model.type = gpt); ImageSamples: an image's pixels and its
// label (cnn). Training sample g is the sampler's (data/sampler.hpp): a function of
// (train.seed, g) alone, so every layout reads the same samples at the same step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/data/corpus_id.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/data/data_shape.hpp"

namespace gridtrain {

class Samples {
 public:
  virtual ~Samples() = default;
  /// int64 values per sample row.
  virtual int width() const = 0;
  /// What the data fix about the model (vocabulary; image shape and classes).
  virtual DataShape shape() const = 0;
  /// Writes training sample g (global sample index) into out[0 .. width). Called from one thread
  /// at a time (the loader's).
  virtual void train_row(std::uint64_t g, std::int64_t* out) = 0;
  /// Epoch of global sample index g.
  virtual std::uint64_t epoch(std::uint64_t g) const = 0;
  /// The fixed validation subset: at most count sample ids, the same on every rank and layout.
  virtual std::vector<std::uint64_t> validation(int count) const = 0;
  /// What a validation sample is, plural, for messages: "windows of 129 tokens in /val/tokens".
  virtual std::string validation_samples() const = 0;
  /// Writes validation sample `id` (from validation()) into out. Thread-safe.
  virtual void val_row(std::uint64_t id, std::int64_t* out) const = 0;
  /// The "Data:" line of the setup report, without the prefix.
  virtual std::string describe() const = 0;
  /// What checkpoints record to recognise the data at resume.
  virtual CorpusId id() const = 0;
};

/// What the data fix about c.model.type's model: gpt the vocabulary (model.vocab_size, else the
/// token file's vocab_size attribute; no token is read), cnn the image set's shape and classes
/// (the set is opened and its labels checked). Collective over comm. Throws gridtrain::Error naming data.path.
DataShape data_shape(const Config& c, MPI_Comm comm);

/// Loads the data of c.model.type from c.data.path. Collective over comm. Throws gridtrain::Error
/// (the same on every rank) naming the file and the problem (see load_tokens, load_images), and for
/// a model.vocab_size below the corpus's.
std::unique_ptr<Samples> load_samples(const Config& c, MPI_Comm comm);

}  // namespace gridtrain
