#include "gridtrain/data/samples.hpp"

#include <algorithm>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/config/data_blend.hpp"
#include "gridtrain/data/blended_samples.hpp"
#include "gridtrain/data/image_data.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/hash.hpp"

namespace gridtrain {
namespace {

// data.eod_token resolved against what the corpus records: the key where given (it must agree
// with a recorded id), else the corpus's; -1 where neither says and no document key needs one.
int end_of_document(const Config& c, const TokenData& d, int vocab) {
  const int eod = c.data.eod_token >= 0 ? c.data.eod_token : d.eod_id;
  const std::string at = "data.eod_token = " + std::to_string(c.data.eod_token) + ": ";
  if (c.data.eod_token >= vocab)
    throw Error(at + "not a token of the vocabulary (" + std::to_string(vocab) + " ids); valid: auto, or 0 .. " +
                std::to_string(vocab - 1));
  if (c.data.eod_token >= 0 && d.eod_id >= 0 && c.data.eod_token != d.eod_id)
    throw Error(at + c.data.path + " records its documents' end token as " + std::to_string(d.eod_id) +
                " (attribute eod_id); valid: auto or " + std::to_string(d.eod_id));
  if (eod < 0 && c.data.documents())
    throw Error("data.reset_position_ids, data.document_mask and data.eod_mask_loss need the end-of-document token, "
                "and " + c.data.path + " records none: set data.eod_token to the id its tokenizer appended after each "
                "document, or write the corpus with `gridtrain prepare jsonl --append-eod`");
  return eod;
}

class TokenSamples : public Samples {
 public:
  TokenSamples(const Config& c, MPI_Comm comm) : T_(c.model.block_size) {
    const std::string hint = "Prepare the KJV corpus with: bible -f \"Genesis 1:1-Revelation 22:21\" > data/kjv.txt && "
                             "gridtrain prepare text --input data/kjv.txt --output " + c.data.path +
                             " (or run scripts/prepare-kjv)";
    data_ = load_tokens(c.data.path, comm, static_cast<std::size_t>(T_) + 1, hint, {c.data.split, c.model.vocab_size});
    vocab_ = c.model.vocab_size > 0 ? c.model.vocab_size : data_.vocab_size;
    if (vocab_ < data_.vocab_size)
      throw Error("model.vocab_size = " + std::to_string(vocab_) + " is smaller than the dataset's vocab_size = " +
                  std::to_string(data_.vocab_size) + " (" + c.data.path + "); valid: 0 (auto) or >= " +
                  std::to_string(data_.vocab_size));
    eod_ = end_of_document(c, data_, vocab_);
    sampler_ = std::make_unique<Sampler>(data_.train.size(), T_, c.train.seed);
    path_ = c.data.path;
  }
  int width() const override { return T_ + 1; }
  DataShape shape() const override { return {vocab_, eod_}; }
  void train_row(std::uint64_t g, std::int64_t* out) override { copy_window(data_.train, sampler_->window_start(g), T_, out); }
  std::uint64_t epoch(std::uint64_t g) const override { return sampler_->epoch(g); }
  std::vector<std::uint64_t> validation(int count, int) const override {
    return validation_starts(data_.val.size(), T_, count);
  }
  std::string validation_samples() const override {
    return "windows of " + std::to_string(T_ + 1) + " tokens in " +
           (data_.format == "megatron" ? "the validation split (data.split)" : "/val/tokens");
  }
  void val_row(std::uint64_t id, std::int64_t* out) const override { copy_window(data_.val, id, T_, out); }
  std::string describe() const override {
    return path_ + (data_.files.size() > 1 ? " (" + std::to_string(data_.files.size()) + " shards)" : "") + ": " +
           std::to_string(data_.train.size()) + " train / " + std::to_string(data_.val.size()) + " val tokens, vocab " +
           std::to_string(vocab_) + ", " + std::to_string(sampler_->windows()) + " windows per epoch, source sha256 " +
           (data_.sha256.empty() ? "unknown" : data_.sha256.substr(0, 16));
  }
  CorpusId id() const override {
    return {data_.sha256, data_.train.size(), data_.val.size(), data_.tokenizer, data_.tokenizer_model, ""};
  }

 private:
  int T_;
  int vocab_ = 0, eod_ = -1;
  std::string path_;
  TokenData data_;
  std::unique_ptr<Sampler> sampler_;
};

class ImageSamples : public Samples {
 public:
  ImageSamples(const Config& c, MPI_Comm comm)
      : data_(load_images(c.data.path, comm,
                          "Prepare Fashion-MNIST with scripts/prepare-fashion-mnist (Debian package dataset-fashion-mnist)")),
        sampler_(Sampler::items(data_.train.count, c.train.seed)), seed_(c.train.seed), crop_(c.data.random_crop) {}
  int width() const override { return static_cast<int>(data_.pixels()) + 1; }
  DataShape shape() const override {
    return {.channels = data_.channels, .height = data_.height, .width = data_.width, .classes = data_.classes};
  }
  // Random crop: a shift in [−P, P]² drawn from (seed, g), independent of the layout and timing.
  void train_row(std::uint64_t g, std::int64_t* out) override {
    int dy = 0, dx = 0;
    if (crop_ > 0) {
      const std::uint64_t h = splitmix64(seed_ ^ splitmix64(g ^ 0x63726f70ULL)), span = 2 * crop_ + 1;  // "crop"
      dy = static_cast<int>(h % span) - crop_;
      dx = static_cast<int>((h >> 32) % span) - crop_;
    }
    copy_image(data_, data_.train, sampler_.window_start(g), dy, dx, out);
  }
  std::uint64_t epoch(std::uint64_t g) const override { return sampler_.epoch(g); }
  std::vector<std::uint64_t> validation(int count, int) const override { return validation_items(data_.test.count, count); }
  std::string validation_samples() const override { return "images in /test/images"; }
  void val_row(std::uint64_t id, std::int64_t* out) const override { copy_image(data_, data_.test, id, 0, 0, out); }
  std::string describe() const override {
    return data_.file + ": " + std::to_string(data_.train.count) + " train / " + std::to_string(data_.test.count) +
           " test images of " + std::to_string(data_.channels) + "x" + std::to_string(data_.height) + "x" +
           std::to_string(data_.width) + ", " + std::to_string(data_.classes) + " classes, random crop " +
           (crop_ > 0 ? "±" + std::to_string(crop_) + " px" : std::string("off")) + ", sha256 " +
           (data_.sha256.empty() ? "unknown" : data_.sha256.substr(0, 16));
  }
  CorpusId id() const override { return {data_.sha256, data_.train.count, data_.test.count, "none", "", ""}; }

 private:
  ImageData data_;
  Sampler sampler_;
  std::uint64_t seed_;
  int crop_;
};

}  // namespace

DataShape data_shape(const Config& c, MPI_Comm comm) {
  if (c.model.type == ModelType::Cnn) return ImageSamples(c, comm).shape();
  if (c.model.vocab_size > 0) return {c.model.vocab_size};
  int vocab = 0;  // a blend's: the largest of its datasets'
  for (const auto& path : c.data.blend.empty() ? std::vector{c.data.path} : parse_blend(c.data.blend).paths)
    vocab = std::max(vocab, corpus_vocab_size(path, comm, "Prepare the dataset with `gridtrain prepare`, or set "
                                                          "model.vocab_size", c.data.split));
  return {vocab};
}

std::unique_ptr<Samples> load_samples(const Config& c, MPI_Comm comm) {
  if (c.model.type == ModelType::Cnn) return std::make_unique<ImageSamples>(c, comm);
  if (!c.data.blend.empty()) return std::make_unique<BlendedSamples>(c, comm);
  return load_token_samples(c, comm);
}

std::unique_ptr<Samples> load_token_samples(const Config& c, MPI_Comm comm) { return std::make_unique<TokenSamples>(c, comm); }

}  // namespace gridtrain
