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

/// What checkpoints keep of the sampling beyond (train.seed, global sample index), by name (the
/// /train attributes); empty for one corpus.
using DataState = std::vector<std::pair<std::string, std::vector<double>>>;

/// One dataset of the training data as reports name it: a blend's path and weight; a single
/// corpus is one dataset named "" of weight 1.
struct DatasetInfo {
  std::string name;
  double weight = 1.0;
};

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
  /// The fixed validation subset of dataset `dataset` (of datasets()): at most count sample ids,
  /// the same on every rank and layout.
  virtual std::vector<std::uint64_t> validation(int count, int dataset = 0) const = 0;
  /// The datasets validation reports one by one (a blend's); one by default.
  virtual std::vector<DatasetInfo> datasets() const { return {{}}; }
  /// The sampling state at a checkpoint (a blend's weights and where they began).
  virtual DataState state() const { return {}; }
  /// Continues from a checkpoint's state(), which training resumes at global sample g (a
  /// checkpoint without it: from g as it is).
  virtual void restore(const DataState& state, std::uint64_t g) { (void)state, (void)g; }
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

/// Loads the data of c.model.type from c.data.path, or the blend c.data.blend (data/blended_samples).
/// Collective over comm. Throws gridtrain::Error
/// (the same on every rank) naming the file and the problem (see load_tokens, load_images), and for
/// a model.vocab_size below the corpus's.
std::unique_ptr<Samples> load_samples(const Config& c, MPI_Comm comm);

/// The token windows of the one corpus c.data.path (what load_samples gives a language model
/// without a blend).
std::unique_ptr<Samples> load_token_samples(const Config& c, MPI_Comm comm);

}  // namespace gridtrain
